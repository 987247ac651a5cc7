"""The ``hermesbus`` command line (typer + rich)."""

from __future__ import annotations

import logging

import typer

from ._broker import broker_command
from ._doctor import doctor_command
from ._export import export_command
from ._index import search_command, session_command, trace_command
from ._keys import app as keys_app
from ._kibana import app as kibana_app
from ._replay import replay_command
from ._say import say_command
from ._schemas import app as schemas_app
from ._send import send_command
from ._tail import tail_command
from ._tools import app as tools_app
from ._topics import app as topics_app
from ._up import up_command

__all__ = ["app", "main"]

app = typer.Typer(
    name="hermesbus",
    help="hermesbus: an event-driven message bus for AI-agent components on Kafka.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.command("broker")(broker_command)
app.add_typer(schemas_app, name="schemas")
app.add_typer(topics_app, name="topics")
app.add_typer(tools_app, name="tools")
app.add_typer(keys_app, name="keys")
app.add_typer(kibana_app, name="kibana")
app.command("up")(up_command)
app.command("trace")(trace_command)
app.command("session")(session_command)
app.command("search")(search_command)
app.command("tail")(tail_command)
app.command("replay")(replay_command)
app.command("export")(export_command)
app.command("doctor")(doctor_command)
app.command("say")(say_command)
app.command("send")(send_command)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # we report its failures once
    # elastic_transport logs a traceback per retry: the index reports its failures once
    logging.getLogger("elastic_transport").setLevel(logging.CRITICAL)
    app()

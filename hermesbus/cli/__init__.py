"""The ``hermesbus`` command line (typer + rich).

A command's module is imported only when that command runs or shows its help: the top
level's help lists each command by the one-line summary kept here (a unit test checks
that it is the command's own), so ``hermesbus --help`` imports no Kafka client, no
store and no model.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import typer
from typer import _click
from typer.core import TyperCommand, TyperGroup

from hermesbus.base import sigint as _sigint

__all__ = ["COMMANDS", "app", "load", "main"]

COMMANDS: dict[str, tuple[str, str, str]] = {
    "broker": (
        "._broker",
        "broker_command",
        "Run the embedded broker (tansu, in memory) and print KAFKA_BOOTSTRAP=HOST:PORT.",
    ),
    "up": (
        "._up",
        "up_command",
        "Start the broker (embedded unless configured), create the topics, run the processors.",
    ),
    "run": (
        "._up",
        "run_command",
        "Run some of the processors (each deployable and scalable apart) on a configured broker.",
    ),
    "diagnostics": (
        "._diagnostics",
        "diagnostics_command",
        "Add up the envelopes' diagnostics over windows (faust-streaming); emit closed windows.",
    ),
    "stats": (
        "._stats",
        "stats_command",
        "Rate, p50/p99, errors, confidence and lag per component, tool and flow state.",
    ),
    "trace": (
        "._index",
        "trace_command",
        "Print the trace's spans: component, state, what it handled, a time bar, ms, outcome.",
    ),
    "session": (
        "._index",
        "session_command",
        "Every trace of a session from the trace index, each as a waterfall, in log order.",
    ),
    "search": (
        "._index",
        "search_command",
        "Envelopes that match every filter, oldest first, with the sessions they touch.",
    ),
    "tail": (
        "._tail",
        "tail_command",
        "List the records of the bus's topics, decoded (either framing), in log order.",
    ),
    "replay": (
        "._replay",
        "replay_command",
        "Replay a slice of the log: a session, a trace, a time range or offsets.",
    ),
    "export": (
        "._export",
        "export_command",
        "Write a session's records, the writer schemas they need and their trace index\n"
        "documents to one file, for `hermesbus replay --bundle FILE --shadow` on any machine.",
    ),
    "doctor": (
        "._doctor",
        "doctor_command",
        "Check Python, state, keys, the broker, topics, schema registry and tools; say each fix.",
    ),
    "say": (
        "._say",
        "say_command",
        "Send TEXT as a user turn of SESSION from app:cli; print its message id, or its replies.",
    ),
    "send": (
        "._send",
        "send_command",
        "Send each line's envelope to its target's topic, keyed by session, signed; print its id.",
    ),
    "schemas": ("._schemas", "app", "Avro schemas: compatibility checks and frozen versions."),
    "topics": ("._topics", "app", "The topic catalog and its provisioning."),
    "acls": (
        "._acls",
        "acls_command",
        "Print the ACLs of a bus on a secured cluster, one principal per component.",
    ),
    "tools": ("._tools", "app", "Tools: admission, the registry and live health."),
    "flows": (
        "._flows",
        "app",
        "Flows: check a spec file, register it, list and show the registered versions.",
    ),
    "mcp": ("._mcp", "app", "hermesbus as an MCP server: read-only tools for agents and IDEs."),
    "keys": ("._keys", "app", "The components' signing keys."),
    "stores": (
        "._stores",
        "app",
        "Store marks: which store came back empty, and accepting one that did.",
    ),
    "kibana": ("._kibana", "app", "Kibana: import the saved objects for the traces."),
}
"""Each command, in the order the help lists them: its module, the command function (or
the sub-app, ``app``) and the first paragraph of its help."""


def load(name: str) -> _click.Command:
    """The command ``name`` as typer makes it, its module imported now."""
    module, attribute, _ = COMMANDS[name]
    target = getattr(importlib.import_module(module, __package__), attribute)
    one = typer.Typer(pretty_exceptions_enable=False, add_completion=False)
    if isinstance(target, typer.Typer):
        one.add_typer(target, name=name)
    else:
        one.command(name)(target)
    return typer.main.get_group(one).commands[name]


class _Commands(Mapping[str, _click.Command]):
    """The commands by name, each loaded when first looked up."""

    def __init__(self) -> None:
        self._loaded: dict[str, _click.Command] = {}

    def __getitem__(self, name: str) -> _click.Command:
        if name not in COMMANDS:
            raise KeyError(name)
        if name not in self._loaded:
            self._loaded[name] = load(name)
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS)


class _LazyGroup(TyperGroup):
    """The top level: commands load when run (or their help is asked for); its own help
    lists them by their summaries."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _Commands()  # type: ignore[assignment]
        self._listing = False

    def list_commands(self, ctx: _click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: _click.Context, cmd_name: str) -> _click.Command | None:
        if self._listing and cmd_name in COMMANDS:
            return TyperCommand(cmd_name, help=COMMANDS[cmd_name][2])
        return self.commands.get(cmd_name)

    def format_help(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="hermesbus",
    help="hermesbus: an event-driven message bus for AI-agent components on Kafka.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=_LazyGroup,
)


@app.callback()
def _top() -> None:
    """The commands come from :data:`COMMANDS`; typer needs a callback for a group."""


def main() -> None:
    from hermesbus.base.logs import configure

    configure()  # each condition logged once per 30 s, third-party loggers quiet
    if sys.argv[1:2] != ["up"]:  # up keeps exiting 130 at once until its loop handles Ctrl-C
        _sigint.release()  # the other commands get KeyboardInterrupt, as they expect
    app()

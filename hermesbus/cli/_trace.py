"""``hermesbus trace TRACE_ID``: a trace read back from the topics, drawn as a waterfall."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.markup import escape

from hermesbus.trace import collect, spans, waterfall

from ._common import BootstrapOption, PrefixOption, console, errors, fail, kafka_with

__all__ = ["trace_command"]


def trace_command(
    trace_id: Annotated[str, typer.Argument(help="The trace to draw (envelope trace_id).")],
    session: Annotated[
        str | None, typer.Option(help="Read only this session's partitions (faster).")
    ] = None,
    bootstrap: BootstrapOption = None,
    prefix: PrefixOption = "",
) -> None:
    """Print the trace's spans: component, state, what it handled, a time bar, ms, outcome."""
    if not trace_id.strip():
        raise fail("no trace id: pass the trace_id of an envelope (Client.ask's reply has it)", 2)
    with errors():
        kafka = kafka_with(bootstrap)
        hops = asyncio.run(collect(kafka, trace_id, session_id=session, prefix=prefix))
    if not hops:
        where = f"session {session}'s partitions" if session else "the topics"
        raise fail(
            f"no envelope of trace {trace_id!r} on {where} at {kafka.bootstrap}"
            f" (prefix {prefix!r}): check the id, --session and --prefix, and that the broker"
            " is the bus's (the embedded broker keeps nothing once `up` stops)"
        )
    for line in waterfall(spans(hops)):
        console.print(escape(line), soft_wrap=True)

"""``hermesbus tail``: the topics' records, decoded, as lines or JSON (no group, no commit)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer

from ._common import (
    BootstrapOption,
    PrefixOption,
    check_component,
    console,
    errors,
    fail,
    json_safe,
    kafka_with,
    program_settings,
    shown,
)
from ._when import TIMES, tail_position

if TYPE_CHECKING:
    from hermesbus.codec import Codec
    from hermesbus.connectors.kafka import KafkaConfig
    from hermesbus.trace.tail import Filters, Position, Tailed

__all__ = ["tail_command"]

_WHERE = f"beginning, end, an offset (fewer than 13 digits) or a time: {TIMES}"


def tail_command(
    topic: Annotated[
        list[str] | None,
        typer.Option(help="A topic to read (repeatable; the prefix is added). Default: all."),
    ] = None,
    session: Annotated[str | None, typer.Option(help="Only this session (its partitions).")] = None,
    trace: Annotated[str | None, typer.Option(help="Only this trace.")] = None,
    component: Annotated[
        str | None,
        typer.Option(help="Only what this component sent: conversation, dispatcher, tool, ..."),
    ] = None,
    start: Annotated[str, typer.Option("--from", help=f"Where to start: {_WHERE}.")] = "beginning",
    end: Annotated[
        str | None,
        typer.Option("--to", help=f"Where to stop, excluded: {_WHERE}. Default: the end now."),
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep listing new records (Ctrl-C stops).")
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="One JSON object per line: topic, partition, offset, timestamp, key, "
            "headers, envelope (or error).",
        ),
    ] = False,
    bootstrap: BootstrapOption = None,
    prefix: PrefixOption = "",
) -> None:
    """List the records of the bus's topics, decoded (either framing), in log order.

    Reads by plain assignment: no consumer group is joined and no offset is committed,
    so no processor is disturbed. An undecodable record is listed with the reason.
    """
    from hermesbus.topics import Catalog
    from hermesbus.trace.tail import Filters

    now = int(time.time() * 1000)  # what -15m counts back from
    first = _position("--from", start, now)
    last = _position("--to", end, now) if end is not None else None
    if component is not None and ":" not in component:  # a whole source is taken too
        check_component(component)
    names = (
        [prefix + name for name in topic]
        if topic
        else Catalog.load().with_overrides(prefix=prefix).names()
    )
    filters = Filters(session=session, trace=trace, component=component)
    # Ctrl-C ends a --follow; a closed pipe (| head) ends any: both quietly
    with errors(), contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        from hermesbus.codec import codec_for

        settings = program_settings(bootstrap)
        kafka, codec = kafka_with(settings, bootstrap), codec_for(settings.bus)
        asyncio.run(_print(kafka, codec, names, first, last, follow, filters, as_json, not topic))


def _position(option: str, text: str, now_ms: int) -> Position:
    """``text`` of ``option`` as a position; a bad one or a time out of range exits 2."""
    try:
        return tail_position(text, now_ms)
    except ValueError as exc:
        raise fail(f"{option} {exc}", 2) from None


async def _print(
    kafka: KafkaConfig,
    codec: Codec,
    names: list[str],
    first: Position,
    last: Position | None,
    follow: bool,
    filters: Filters,
    as_json: bool,
    missing_ok: bool,
) -> None:
    import orjson

    from hermesbus.trace.tail import tail

    listed = 0
    async for tailed in tail(
        kafka,
        names,
        start=first,
        end=last,
        follow=follow,
        filters=filters,
        missing_ok=missing_ok,
        codec=codec,
    ):
        listed += 1
        if as_json:
            line = json_safe(orjson.dumps(tailed.as_json()).decode())
            sys.stdout.buffer.write(line.encode() + b"\n")
            sys.stdout.buffer.flush()
        else:
            console.print(_line(tailed), soft_wrap=True)
    if not listed and not as_json:
        console.print("nothing in that slice (check --from/--to, the filters and --prefix)")


def _line(tailed: Tailed) -> str:
    """One record as a line of markup; everything from the record is ``shown`` escaped."""
    from hermesbus.trace.index import iso_ms

    where = f"{tailed.topic}/{tailed.partition}@{tailed.offset}"
    at = iso_ms(tailed.timestamp_ms)
    envelope = tailed.envelope
    if envelope is None:
        return f"{at} {shown(where)}  [red]undecodable[/red]: {shown(tailed.error or '')}"
    body = envelope.payload.body
    kind = type(body).__name__ if body is not None else "-"
    return (
        f"{at} {shown(where)}  {shown(envelope.source)} → {shown(envelope.target)}  "
        f"{kind} {shown(envelope.payload.task)}  session {shown(envelope.session_id)} "
        f"trace {shown(envelope.trace_id)} id {shown(envelope.message_id)}"
    )

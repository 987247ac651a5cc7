"""``hermesbus replay --shadow``: today's processors over a recorded slice, compared."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

from hermesbus.bundle import read_bundle
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.connectors.sqlite.index import SqliteTraceIndex
from hermesbus.envelope import Envelope
from hermesbus.errors import BrokerError, ConfigError
from hermesbus.index import ArchivedRecord, Document, Search, TraceIndex, archived
from hermesbus.lifecycle import tune_collector
from hermesbus.payloads import UserTurn
from hermesbus.processors.protocol import ProtocolPolicy
from hermesbus.redrive import Fork, external_inputs, redrive, sandbox_home
from hermesbus.replay import (
    Recording,
    ShadowReport,
    catalog_topics,
    documents,
    recording_of,
    records_from_broker,
    sessions_of_trace,
    shadow,
)
from hermesbus.stack import REPLAYABLE, shadows, trace_index
from hermesbus.tail import Position, tail
from hermesbus.topics import CONVERSATION_IN
from hermesbus.trace import Hop

from ._common import BootstrapOption, PrefixOption, console, err_console, errors, fail
from ._index import parse_when

__all__ = ["read_sessions", "replay_command"]

_SHOW_PROGRESS_FROM = 500
"""Inputs from which a replay shows a progress bar (on a terminal)."""


@dataclass(frozen=True)
class _Slice:
    """Which inputs are compared: a trace, a time range, offsets of one partition."""

    trace: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    offsets: tuple[tuple[str, int, int, int], ...] = ()

    def keeps(self, hop: Hop) -> bool:
        if self.trace is not None and hop.envelope.trace_id != self.trace:
            return False
        if self.since_ms is not None and hop.appended_ms < self.since_ms:
            return False
        if self.until_ms is not None and hop.appended_ms >= self.until_ms:
            return False
        if self.offsets:
            return any(
                hop.topic == topic and hop.partition == part and first <= hop.offset <= last
                for topic, part, first, last in self.offsets
            )
        return True


def replay_command(
    session: Annotated[
        list[str] | None, typer.Option(help="Replay this session (repeatable).")
    ] = None,
    trace: Annotated[
        str | None, typer.Option(help="Compare only this trace (its sessions are replayed).")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--from", help="Compare from this log time: -15m, -2h, ISO time, epoch ms."),
    ] = None,
    until: Annotated[
        str | None, typer.Option("--to", help="Compare up to this log time (excluded).")
    ] = None,
    offsets: Annotated[
        list[str] | None,
        typer.Option(
            help="Compare only TOPIC:PARTITION:FIRST-LAST (offsets, inclusive; repeatable)."
        ),
    ] = None,
    shadow_mode: Annotated[
        bool,
        typer.Option(
            "--shadow",
            help="Re-run the processors' current code on what they consumed and compare "
            "what they emit with what they emitted then (no tool runs, nothing is written).",
        ),
    ] = False,
    redrive_mode: Annotated[
        bool,
        typer.Option(
            "--redrive",
            help="Copy the slice's user turns into sandbox topics (--into) and run the "
            "processors there, with tools answering as recorded.",
        ),
    ] = False,
    into: Annotated[
        str | None,
        typer.Option(help="The sandbox's topic and group prefix, e.g. replay-1. (--redrive)."),
    ] = None,
    fork: Annotated[
        str | None,
        typer.Option(help="A redrive with this user turn (message id) changed by --set."),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="FIELD=VALUE of the forked turn, e.g. payload.body.text=…"),
    ] = None,
    live_tools: Annotated[
        bool,
        typer.Option(help="In a redrive, run the registered tools for real (not as recorded)."),
    ] = False,
    reply_timeout: Annotated[
        float, typer.Option(help="Seconds a redrive waits for each turn's answer.")
    ] = 60.0,
    processor: Annotated[
        list[str] | None,
        typer.Option(help=f"Only this processor (repeatable): {', '.join(REPLAYABLE)}."),
    ] = None,
    source: Annotated[
        str,
        typer.Option(
            help="Where to read: broker, archive (the trace index) or auto (the broker when "
            "one is configured and has the records, else the archive)."
        ),
    ] = "auto",
    bundle: Annotated[
        Path | None,
        typer.Option(help="Replay an exported bundle (`hermesbus export`): no broker needed."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be read and run; run nothing.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON document, for scripts.")
    ] = False,
    bootstrap: BootstrapOption = None,
    prefix: PrefixOption = "",
) -> None:
    """Replay a slice of the log: a session, a trace, a time range or offsets.

    Every session concerned is replayed from its first envelope, so each processor has
    the state it had before the slice; only the slice is compared. Exit 0: no
    divergence; 1: the first divergence is printed (envelope, field path, recorded and
    replayed values).
    """
    redriving = redrive_mode or fork is not None
    if shadow_mode == redriving:
        raise fail(
            "say how to replay: --shadow (re-run and compare, writing nothing) or --redrive "
            "--into PREFIX (run again in sandbox topics; --fork changes one turn)",
            2,
        )
    if redriving and not into:
        raise fail("--redrive and --fork need --into PREFIX: the sandbox's topics and groups", 2)
    if fork is not None and not set_:
        raise fail("--fork needs at least one --set FIELD=VALUE (e.g. payload.body.text=...)", 2)
    changes = Fork(fork, dict(_assignment(text) for text in set_ or ())) if fork else None
    if source not in ("auto", "broker", "archive"):
        raise fail(f"--source {source!r}: use broker, archive or auto", 2)
    if not session and trace is None and bundle is None and since is None and until is None:
        if not offsets:
            raise fail(
                "choose what to replay: --session, --trace, --from/--to, --offsets or --bundle",
                2,
            )
    now = int(time.time() * 1000)  # what -15m counts back from
    chosen = _Slice(
        trace=trace,
        since_ms=parse_when(since, now, "--from"),
        until_ms=parse_when(until, now, "--to"),
        offsets=tuple(_offsets(text) for text in offsets or ()),
    )
    names = tuple(processor or REPLAYABLE)
    with errors():
        if bundle is not None:
            opened = read_bundle(bundle)
            recording, prefix = opened.recording(), opened.prefix
            sessions = [*opened.sessions, *(session or ())]
        else:
            across = [prefix + REPLAYABLE["memory"]] if "memory" in names else []
            found = asyncio.run(
                read_sessions(
                    source, bootstrap, prefix, list(session or ()), trace, across, chosen=chosen
                )
            )
            recording, sessions = found.recording(prefix), found.sessions
        if not any(hop.envelope.session_id in sessions for hop in recording.hops):
            raise fail(_nothing(sessions, chosen, recording.source))
        if redriving and into is not None:
            _redrive(
                recording,
                sessions,
                chosen,
                into,
                prefix,
                changes,
                live_tools,
                reply_timeout,
                dry_run,
                bootstrap,
            )
            return
        if dry_run:
            _dry_run(recording, sessions, names, chosen, prefix, as_json)
            return
        tune_collector()  # a long replay makes many objects: rare collections, as `up` does
        report = asyncio.run(_shadow(recording, sessions, names, chosen, prefix))
    _print(report, recording, sessions, as_json)
    if report.diverged:
        raise typer.Exit(1)


def _assignment(text: str) -> tuple[str, str]:
    field_, sep, value = text.partition("=")
    if not sep or not field_.strip():
        raise fail(f"--set {text!r}: use FIELD=VALUE, e.g. payload.body.text=先不提交", 2)
    return field_.strip(), value


def _redrive(
    recording: Recording,
    sessions: list[str],
    chosen: _Slice,
    into: str,
    prefix: str,
    changes: Fork | None,
    live_tools: bool,
    reply_timeout: float,
    dry_run: bool,
    bootstrap: str | None,
) -> None:
    sandbox = into if into.endswith(".") else into + "."
    home = sandbox_home(sandbox)
    turns = external_inputs(recording, sessions, prefix, selected=chosen.keeps)
    if dry_run:
        console.print(
            f"would read {len(recording)} envelopes from {escape(recording.source)}", soft_wrap=True
        )
        console.print(
            f"would copy {len(turns)} user turns to {escape(sandbox + CONVERSATION_IN)}:",
            soft_wrap=True,
        )
        for hop in turns:
            changed = changes is not None and changes.message_id == hop.envelope.message_id
            mark = (
                f"  (forked: {', '.join(f'{k}={v}' for k, v in changes.sets.items())})"
                if changed and changes
                else ""
            )
            console.print(
                escape(f"  {hop.envelope.message_id}  {_said(hop.envelope)}{mark}"), soft_wrap=True
            )
        groups = ", ".join(sandbox + name for name in (*REPLAYABLE, "indexer"))
        console.print(escape(f"would run groups {groups} on topics {sandbox}*"), soft_wrap=True)
        console.print(
            escape(f"would keep the sandbox's state and trace index in {home}"), soft_wrap=True
        )
        console.print(
            "would write nothing of the bus's own: its topics, groups and stores stay as they are"
        )
        return
    kafka = KafkaConfig(bootstrap=bootstrap) if bootstrap else KafkaConfig()
    done = asyncio.run(
        redrive(
            recording,
            sessions,
            into=sandbox,
            kafka=kafka,
            source_prefix=prefix,
            fork=changes,
            live_tools=live_tools,
            reply_timeout_s=reply_timeout,
            selected=chosen.keeps,
        )
    )
    for envelope in done.sent:
        console.print(escape(f"user    {_said(envelope)}"), soft_wrap=True)
        for text in done.replies.get(envelope.message_id, []):
            console.print(escape(f"hermes  {text}"), soft_wrap=True)
        if envelope.message_id in done.unanswered:
            console.print(f"[red]no answer within {reply_timeout:g} s[/red]")
    where = (
        f"the embedded broker (gone now; {home / 'index.sqlite3'} keeps the records)"
        if done.embedded
        else done.bootstrap
    )
    ran = f"topics {sandbox}* and groups {sandbox}* on {where}"
    console.print(escape(f"sandbox {sandbox}: {ran}; state in {home}"), soft_wrap=True)
    for forked_ in done.forks:
        both = f"hermesbus trace {forked_['trace']} --sandbox {sandbox}"
        line = f"fork: {forked_['fork']} replaces {forked_['original']}; both branches: {both}"
        console.print(escape(line), soft_wrap=True)
    if done.unanswered:
        raise typer.Exit(1)


def _said(envelope: Envelope) -> str:
    body = envelope.payload.body
    return body.text if isinstance(body, UserTurn) else type(body).__name__


def _nothing(sessions: Sequence[str], chosen: _Slice, where: str) -> str:
    what = f"session {', '.join(sessions)}" if sessions else f"trace {chosen.trace}"
    return (
        f"no envelope of {what} in {where}: check the id and --prefix (the embedded broker "
        "keeps nothing once `up` stops; the trace index does)"
    )


def _offsets(text: str) -> tuple[str, int, int, int]:
    try:
        topic, part, span = text.rsplit(":", 2)
        first, _, last = span.partition("-")
        return topic, int(part), int(first), int(last or first)
    except ValueError:
        raise fail(f"--offsets {text!r}: use TOPIC:PARTITION:FIRST-LAST", 2) from None


@dataclass(frozen=True)
class _Read:
    """What a slice's sessions hold, as the broker or the archive has it."""

    records: list[ArchivedRecord]
    documents: list[Document]
    where: str
    sessions: list[str]

    def recording(self, prefix: str) -> Recording:
        return recording_of(self.records, self.where, prefix=prefix)


async def read_sessions(
    source: str,
    bootstrap: str | None,
    prefix: str,
    sessions: list[str],
    trace: str | None,
    across: list[str],
    *,
    chosen: _Slice | None = None,
) -> _Read:
    """The sessions' records (and a trace's sessions', or those of ``chosen``'s time range
    or offsets when no session is named) from the broker, or from the trace index's
    archive when no broker is configured, it has none of them or is down."""
    kafka = KafkaConfig(bootstrap=bootstrap) if bootstrap else KafkaConfig()
    chosen = chosen or _Slice(trace=trace)
    if source != "archive" and kafka.bootstrap:
        try:
            return await _from_broker(
                kafka, prefix, sessions, chosen, across, strict=source == "broker"
            )
        except LookupError:
            err_console.print(
                f"Kafka at {kafka.bootstrap} has none of it: reading the trace index's archive",
                soft_wrap=True,
            )
        except BrokerError as exc:
            if source == "broker":
                raise
            err_console.print(f"the broker is unreachable ({exc}): reading the trace index")
    elif source == "broker":
        raise ConfigError(
            "--source broker: no broker configured (--bootstrap or HERMES_KAFKA_BOOTSTRAP)"
        )
    return await _from_index(prefix, sessions, chosen, across)


async def _from_broker(
    kafka: KafkaConfig,
    prefix: str,
    sessions: list[str],
    chosen: _Slice,
    across: list[str],
    *,
    strict: bool,
) -> _Read:
    """LookupError: the broker holds none of it (and ``strict`` is off)."""
    if chosen.trace is not None:
        sessions = [*sessions, *await sessions_of_trace(kafka, chosen.trace, prefix=prefix)]
    elif not sessions:
        sessions = await _sessions_in_log(kafka, prefix, chosen)
    sessions = list(dict.fromkeys(sessions))
    records = await records_from_broker(kafka, sessions, prefix=prefix, every_session_of=across)
    if not strict and not any(_session_of_record(r) in sessions for r in records):
        raise LookupError(sessions)
    return _Read(records, [], f"Kafka at {kafka.bootstrap}", sessions)


async def _sessions_in_log(kafka: KafkaConfig, prefix: str, chosen: _Slice) -> list[str]:
    """The sessions with an envelope in ``chosen``'s offsets, or else its time range."""
    found: dict[str, None] = {}
    if chosen.offsets:
        for topic, part, first, last in chosen.offsets:
            start, end = Position("offset", first), Position("offset", last + 1)
            async for t in tail(kafka, [topic], start=start, end=end):
                if t.partition == part and t.envelope is not None:
                    found[t.envelope.session_id] = None
        return list(found)
    start = (
        Position("time", chosen.since_ms) if chosen.since_ms is not None else Position("beginning")
    )
    end = Position("time", chosen.until_ms) if chosen.until_ms is not None else Position("end")
    async for t in tail(kafka, catalog_topics(prefix), start=start, end=end, missing_ok=True):
        if t.envelope is not None:
            found[t.envelope.session_id] = None
    return list(found)


def _session_of_record(record: ArchivedRecord) -> str | None:
    return record.key.decode("utf-8", "replace") if record.key is not None else None


async def _from_index(prefix: str, sessions: list[str], chosen: _Slice, across: list[str]) -> _Read:
    index = trace_index(install=False)
    if isinstance(index, SqliteTraceIndex) and not _exists(index.where):
        raise ConfigError(
            f"no trace index at {index.where} and no broker with the records: `hermesbus up` "
            "indexes every envelope there; --bootstrap reads a broker instead"
        )
    async with index:
        if chosen.trace is not None:
            docs = await index.by_trace(chosen.trace)
            sessions += [found for doc in docs if (found := _session_of(doc))]
        elif not sessions:
            sessions = await _sessions_in_index(index, chosen)
        sessions = list(dict.fromkeys(sessions))
        docs = await documents(index, sessions, every_session_of=across)
    return _Read([archived(doc) for doc in docs], docs, f"trace index {index.where}", sessions)


_SCAN_LIMIT = 100_000
"""Documents a time range or offsets are looked for in, to find their sessions."""


async def _sessions_in_index(index: TraceIndex, chosen: _Slice) -> list[str]:
    if chosen.offsets:
        docs: list[Document] = []
        for topic, part, first, last in chosen.offsets:
            for doc in await index.search(Search(topic=topic, limit=_SCAN_LIMIT)):
                record = archived(doc)
                if record.partition == part and first <= record.offset <= last:
                    docs.append(doc)
    else:
        query = Search(since_ms=chosen.since_ms, until_ms=chosen.until_ms, limit=_SCAN_LIMIT)
        docs = await index.search(query)
    return list(dict.fromkeys(found for doc in docs if (found := _session_of(doc))))


def _exists(path: str) -> bool:
    return Path(path).exists()


def _session_of(doc: dict[str, Any]) -> str | None:
    """The session of an index document (``gen_ai.conversation.id``; refused ones have none)."""
    conversation = doc.get("gen_ai", {}).get("conversation", {})
    found = conversation.get("id")
    return found if isinstance(found, str) and found else None


async def _shadow(
    recording: Recording, sessions: list[str], names: Sequence[str], chosen: _Slice, prefix: str
) -> ShadowReport:
    async with shadows(names, prefix=prefix) as wired:
        with _progress() as tick:
            return await shadow(
                recording,
                wired,
                selected=chosen.keeps,
                sessions=sessions,
                policy=ProtocolPolicy(),
                prefix=prefix,
                progress=tick,
            )


@contextmanager
def _progress() -> Iterator[Callable[[int, int], None]]:
    """A bar on stderr for long replays on a terminal; nothing otherwise."""
    if not err_console.is_terminal:
        yield lambda done, total: None
        return
    bar = Progress(
        "replaying",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
    )
    task = None
    with bar:

        def tick(done: int, total: int) -> None:
            nonlocal task
            if total < _SHOW_PROGRESS_FROM:
                return
            if task is None:
                task = bar.add_task("replay", total=total)
            bar.update(task, completed=done)

        yield tick


def _dry_run(
    recording: Recording,
    sessions: list[str],
    names: Sequence[str],
    chosen: _Slice,
    prefix: str,
    as_json: bool,
) -> None:
    per: dict[str, dict[str, int]] = {}
    for name in names:
        topic = prefix + REPLAYABLE[name]
        inputs = [h for h in recording.hops if h.topic == topic]
        mine = [h for h in inputs if h.envelope.session_id in sessions]
        per[name] = {
            "inputs": len(inputs if name == "memory" else mine),
            "compared": sum(1 for h in mine if chosen.keeps(h)),
        }
    answer = {
        "source": recording.source,
        "sessions": sessions,
        "records": len(recording),
        "processors": per,
        "writes": "nothing: a shadow replay writes no topic and no store "
        "(memory's stores are in a temporary folder)",
    }
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(answer) + b"\n")
        return
    console.print(
        f"would read {len(recording)} envelopes from {escape(recording.source)}", soft_wrap=True
    )
    console.print(f"sessions: {escape(', '.join(sessions)) or 'none'}", soft_wrap=True)
    for name, counts in per.items():
        console.print(f"  {name}: run {counts['inputs']} inputs, compare {counts['compared']}")
    console.print(f"would write {answer['writes']}")


def _print(report: ShadowReport, recording: Recording, sessions: list[str], as_json: bool) -> None:
    if as_json:
        answer = {
            "source": recording.source,
            "sessions": sessions,
            "replayed": report.replayed,
            "compared": report.compared,
            "outputs": report.outputs,
            "divergences": [d.as_json() for d in report.divergences],
        }
        sys.stdout.buffer.write(orjson.dumps(answer) + b"\n")
        return
    ran = ", ".join(
        f"{name} {report.compared[name]}/{report.replayed[name]}" for name in report.replayed
    )
    console.print(
        f"replayed {len(sessions)} session(s) from {escape(recording.source)}: inputs "
        f"compared/run: {ran}; {report.outputs} outputs compared",
        soft_wrap=True,
    )
    if not report.diverged:
        console.print("no divergence")
        return
    first, *others = report.divergences
    for line in first.lines():
        console.print(escape(line), soft_wrap=True)
    for other in others:
        console.print(
            escape(f"also: {other.lines()[0]}, field {other.path or '-'}"), soft_wrap=True
        )

"""``hermesbus trace``, ``session`` and ``search``: the trace index read back.

The index is Elasticsearch when ``HERMES_ELASTICSEARCH_URL`` is set, else the SQLite
file under the state folder; both answer with the same documents, so the waterfall
is the same from either. ``trace --from-log`` reads the topics instead (no index needed).
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.table import Table

from hermesbus.codec import codec_for
from hermesbus.compose.backends import trace_index
from hermesbus.compose.redrive import lineage_of, sandbox_home
from hermesbus.compose.settings import Settings
from hermesbus.connectors.sqlite.index import SqliteTraceIndex
from hermesbus.contract.payloads import Reply
from hermesbus.topics import DLQ
from hermesbus.trace.index import Document, Search, TraceIndex, iso_ms, session_of
from hermesbus.trace.spans import Hop, collect, hops_of, spans, waterfall

from ._common import (
    BootstrapOption,
    HomeOption,
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
from ._when import TIMES, parse_when

__all__ = ["search_command", "session_command", "trace_command"]

T = TypeVar("T")
JsonOption = Annotated[bool, typer.Option("--json", help="One JSON document, for scripts.")]


def trace_command(
    trace_id: Annotated[str, typer.Argument(help="The trace to draw (envelope trace_id).")],
    from_log: Annotated[
        bool,
        typer.Option("--from-log", help="Read the topics instead of the trace index."),
    ] = False,
    session: Annotated[
        str | None, typer.Option(help="With --from-log: read only this session's partitions.")
    ] = None,
    sandbox: Annotated[
        str | None,
        typer.Option(
            help="Beside it, the same trace as the sandbox PREFIX ran it (replay --redrive "
            "or --fork): both waterfalls and their replies side by side."
        ),
    ] = None,
    as_json: JsonOption = False,
    bootstrap: BootstrapOption = None,
    prefix: PrefixOption = "",
    home: HomeOption = None,
) -> None:
    """Print the trace's spans: component, state, what it handled, a time bar, ms, outcome."""
    if not trace_id.strip():
        raise fail("no trace id: pass the trace_id of an envelope (Client.ask's reply has it)", 2)
    with errors():
        settings = program_settings(bootstrap if from_log else None)
        codec = codec_for(settings.bus)
        if from_log:
            kafka = kafka_with(settings, bootstrap)
            found = asyncio.run(
                collect(kafka, trace_id, session_id=session, prefix=prefix, codec=codec)
            )
            docs: list[Document] = []
            where = f"the topics at {kafka.bootstrap} (prefix {prefix!r})"
        else:
            docs, where = _ask(settings, lambda index: index.by_trace(trace_id))
            found = hops_of(docs, codec, dlq_topic=prefix + DLQ)
    if not found and not docs:
        raise fail(_not_found(trace_id, where, from_log=from_log))
    if sandbox is not None:
        with errors():
            _beside(settings, trace_id, sandbox, found, where, as_json)
        return
    if as_json:
        _print_json({"trace_id": trace_id, "index": where, **_answer(found, docs)})
        return
    _draw(found)
    _dead_letters(docs)
    link = _kibana(settings, f'trace.id:"{trace_id}"', docs)
    if link:
        console.print(f"Kibana: {link}", soft_wrap=True, highlight=False)


def _beside(
    settings: Settings,
    trace_id: str,
    sandbox: str,
    found: Sequence[Hop],
    where: str,
    as_json: bool,
) -> None:
    """The trace and the sandbox's run of it: waterfalls, then the replies side by side."""
    prefix = sandbox if sandbox.endswith(".") else sandbox + "."
    home = settings.home
    lineage = lineage_of(home, prefix)
    theirs_index = trace_index(settings.sandbox(sandbox_home(home, prefix)), install=False)
    path = theirs_index.where

    async def read() -> list[Document]:
        async with theirs_index:  # the sandbox's own: SQLite in its folder, as redrive wrote it
            return await theirs_index.by_trace(trace_id)

    theirs = hops_of(asyncio.run(read()), codec_for(settings.bus), dlq_topic=prefix + DLQ)
    forks = [f for f in lineage.get("forks", []) if f.get("trace") == trace_id]
    if as_json:
        _print_json(
            {
                "trace_id": trace_id,
                "original": {"index": where, **_answer(found, [])},
                "sandbox": {
                    "prefix": prefix,
                    "index": path,
                    "forks": forks,
                    **_answer(theirs, []),
                },
            }
        )
        return
    console.rule(shown(f"original: {where}"))
    _draw(found)
    changed = "; ".join(
        f"fork of {f['original']}: " + ", ".join(f"{k}={v}" for k, v in f["set"].items())
        for f in forks
    )
    console.rule(shown(f"sandbox {prefix}: {path}" + (f" ({changed})" if changed else "")))
    _draw(theirs)
    table = Table("original", f"sandbox {prefix}", title="replies, in order")
    ours, others = _replies(found), _replies(theirs)
    for index in range(max(len(ours), len(others))):
        table.add_row(
            shown(ours[index]) if index < len(ours) else "-",
            shown(others[index]) if index < len(others) else "-",
        )
    console.print(table)


def _replies(hops: Sequence[Hop]) -> list[str]:
    return [
        h.envelope.payload.body.text for h in hops if isinstance(h.envelope.payload.body, Reply)
    ]


def _not_found(trace_id: str, where: str, *, from_log: bool) -> str:
    if from_log:
        return (
            f"no envelope of trace {trace_id!r} on {where}: check the id, --session and "
            "--prefix, and that the broker is the bus's (the embedded broker keeps nothing "
            "once `up` stops; the trace index does: drop --from-log)"
        )
    return (
        f"no envelope of trace {trace_id!r} in the trace index at {where}: check the id, and "
        "that the indexer ran (`hermesbus up` runs it); --from-log reads the topics instead"
    )


def session_command(
    session_id: Annotated[str, typer.Argument(help="The session (the Kafka key).")],
    as_json: JsonOption = False,
    prefix: PrefixOption = "",
    home: HomeOption = None,
) -> None:
    """Every trace of a session from the trace index, each as a waterfall, in log order."""
    if not session_id.strip():
        raise fail("no session id: pass the session_id of a conversation", 2)
    with errors():
        settings = program_settings()
        docs, where = _ask(settings, lambda index: index.by_session(session_id))
        found = hops_of(docs, codec_for(settings.bus), dlq_topic=prefix + DLQ)
    if not docs:
        raise fail(f"no envelope of session {session_id!r} in {where}: check the id")
    if as_json:
        _print_json({"session_id": session_id, "index": where, **_answer(found, docs)})
        return
    traces: dict[str, list[Hop]] = {}
    for hop in found:
        traces.setdefault(hop.envelope.trace_id, []).append(hop)
    console.print(f"session {shown(session_id)}: {len(docs)} envelopes, {len(traces)} traces")
    for trace_id, hops in traces.items():
        console.rule(f"trace {shown(trace_id)}")
        _draw(hops)
    _dead_letters(docs)
    link = _kibana(settings, f'gen_ai.conversation.id:"{session_id}"', docs)
    if link:
        console.print(f"Kibana: {link}", soft_wrap=True, highlight=False)


def search_command(
    component: Annotated[
        str | None, typer.Option(help="conversation, dispatcher, tool, memory or app.")
    ] = None,
    outcome: Annotated[str | None, typer.Option(help="success or failure.")] = None,
    since: Annotated[str | None, typer.Option(help=f"From this time: {TIMES}.")] = None,
    until: Annotated[str | None, typer.Option(help="Like --since; the end, excluded.")] = None,
    text: Annotated[
        str | None, typer.Option(help="Words in the summary, payload or error.")
    ] = None,
    session: Annotated[str | None, typer.Option(help="Only this session.")] = None,
    trace: Annotated[str | None, typer.Option(help="Only this trace.")] = None,
    action: Annotated[
        str | None, typer.Option(help="Body type: ToolCall, ErrorReport, undecodable...")
    ] = None,
    topic: Annotated[
        str | None, typer.Option(help="Only this topic (the prefix is added).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="At most this many.")] = 50,
    as_json: JsonOption = False,
    prefix: PrefixOption = "",
    home: HomeOption = None,
) -> None:
    """Envelopes that match every filter, oldest first, with the sessions they touch.

    ``hermesbus search --outcome failure --since -1h``: which sessions failed in the last
    hour, at which component.
    """
    check_component(component)
    with errors():
        now = int(time.time() * 1000)
        query = Search(
            component=component,
            outcome=outcome,
            since_ms=parse_when(since, now, "--since"),
            until_ms=parse_when(until, now, "--until"),
            text=text,
            session_id=session,
            trace_id=trace,
            action=action,
            topic=prefix + topic if topic and not topic.startswith(prefix) else topic,
            limit=limit,
        )
        docs, where = _ask(program_settings(), lambda index: index.search(query))
    if as_json:
        _print_json({"index": where, "documents": [_row(doc) for doc in docs]})
        return
    if not docs:
        console.print(f"nothing matches in {shown(where)}")
        return
    _table(docs)
    _sessions(docs)


def _ask(settings: Settings, question: Callable[[TraceIndex], Awaitable[T]]) -> tuple[T, str]:
    """Open the configured index read-only, ask, close; a missing SQLite file is no index."""
    index = trace_index(settings, install=False)
    if isinstance(index, SqliteTraceIndex) and not Path(index.where).exists():
        raise fail(
            f"no trace index at {index.where}: `hermesbus up` indexes every envelope there "
            f"(HERMES_HOME={settings.home}); set HERMES_ELASTICSEARCH_URL to read "
            "Elasticsearch instead"
        )

    async def run() -> T:
        async with index:
            return await question(index)

    return asyncio.run(run()), index.where


def _draw(hops: Sequence[Hop]) -> None:
    for line in waterfall(spans(hops)):
        console.print(shown(line), soft_wrap=True, highlight=False)


def _dead_letters(docs: Sequence[Document]) -> None:
    letters = [doc for doc in docs if "dlq" in doc.get("hermes", {})]
    letters += [doc for doc in docs if doc["event"].get("action") == "undecodable"]
    for doc in letters:
        error = doc.get("error") or {}
        console.print(
            f"[red]{shown(doc['event'].get('action', '?'))}[/red] {shown(doc['_id'])}: "
            f"{shown(str(error.get('type')))}: {shown(str(error.get('message')))}",
            soft_wrap=True,
        )


def _answer(found: Sequence[Hop], docs: Sequence[Document]) -> dict[str, Any]:
    return {
        "spans": [
            {
                "component": s.component,
                "state": s.state,
                "what": s.what,
                "start_ms": s.start_ms,
                "end_ms": s.end_ms,
                "duration_ms": s.duration_ms,
                "outcome": s.outcome,
            }
            for s in spans(found)
        ],
        "documents": [_row(doc) for doc in docs],
    }


def _row(doc: Document) -> dict[str, Any]:
    """A document without its raw bytes and headers (``tail`` and replay read those)."""
    hermes = {k: v for k, v in doc.get("hermes", {}).items() if k not in ("raw", "kafka")}
    return {k: v for k, v in doc.items() if k != "hermes"} | {"hermes": hermes}


def _print_json(value: dict[str, Any]) -> None:
    typer.echo(json_safe(json.dumps(value, ensure_ascii=False, indent=1)))


def _table(docs: Sequence[Document]) -> None:
    table = Table("time", "component", "action", "outcome", "session", "trace", "what")
    for doc in docs:
        error = (doc.get("error") or {}).get("message")
        outcome = doc["event"].get("outcome", "")
        table.add_row(
            shown(doc["@timestamp"]),
            shown((doc.get("service") or {}).get("name", "-")),
            shown(doc["event"].get("action", "")),
            "[red]failure[/red]" if outcome == "failure" else shown(outcome),
            shown(session_of(doc) or "-"),
            shown(str((doc.get("trace") or {}).get("id") or "-")),  # undecodable: none
            shown(str(error or doc.get("message", ""))),
        )
    console.print(table)


def _sessions(docs: Sequence[Document]) -> None:
    """``N envelopes in M sessions: s1 (dispatcher x2, tool)``: where each session was hit."""
    seen: dict[str, dict[str, int]] = {}
    for doc in docs:
        session = session_of(doc) or "-"
        component = (doc.get("service") or {}).get("name") or "-"
        counts = seen.setdefault(session, {})
        counts[component] = counts.get(component, 0) + 1
    parts = [
        f"{session} ({', '.join(f'{c} x{n}' if n > 1 else c for c, n in counts.items())})"
        for session, counts in seen.items()
    ]
    console.print(
        shown(f"{len(docs)} envelopes in {len(seen)} sessions: " + "; ".join(parts)),
        soft_wrap=True,
    )


def _kibana(settings: Settings, kuery: str, docs: Sequence[Document]) -> str | None:
    """The Discover link for ``kuery`` over the documents' time, when HERMES_KIBANA_URL is set
    and the index read is Elasticsearch."""
    base = settings.bus.kibana_url
    if not base or not docs or isinstance(trace_index(settings, install=False), SqliteTraceIndex):
        return None  # Kibana shows Elasticsearch's documents, not the SQLite index's
    times = [doc["hermes"]["kafka"]["timestamp_ms"] for doc in docs]
    start, end = iso_ms(min(times) - 60_000), iso_ms(max(times) + 60_000)
    rison = kuery.replace("!", "!!").replace("'", "!'")
    state = (
        f"_g=(time:(from:'{start}',to:'{end}'))&_a=(dataSource:(dataViewId:'hermes-envelopes',"
        f"type:dataView),query:(language:kuery,query:'{rison}'))"
    )
    return f"{base.rstrip('/')}/app/discover#/?{urllib.parse.quote(state, safe='=&():,')}"

"""``hermesbus mcp serve``: the bus, read-only, as an MCP server for agents and IDEs.

Six tools, each answering structured content with an output schema: ``trace``,
``session`` and ``search`` read the trace index (as the commands of those names do);
``tail`` lists records of the topics (at most ``limit``, never following); ``replay_shadow``
re-runs sessions through today's processors and compares (writing nothing); ``flows_show``
describes a flow as registered (or the built-in expense report). Nothing here writes a
topic, a store or a file: there is no tool that changes the bus.

Over stdio (the default) the protocol owns stdout, so nothing else is printed there; with
``--port N`` it serves streamable HTTP at ``http://127.0.0.1:N/mcp`` (localhost only, with
the SDK's DNS-rebinding protection).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Annotated, Any, cast

import typer
from pydantic import BaseModel, Field

from ._common import (
    BootstrapOption,
    HomeOption,
    PrefixOption,
    errors,
    fail,
    kafka_with,
    program_settings,
)

__all__ = ["app"]

app = typer.Typer(
    help="hermesbus as an MCP server: read-only tools for agents and IDEs.", no_args_is_help=True
)

TAIL_MAX = 500
"""The most records one ``tail`` call lists."""
SEARCH_MAX = 500


class Span(BaseModel):
    """One hop of a trace: who handled what, when, how long, with what outcome."""

    component: str
    state: str
    what: str
    start_ms: int
    end_ms: int
    duration_ms: float
    outcome: str


class TraceView(BaseModel):
    """A trace's spans (the waterfall's rows) and its indexed documents."""

    trace_id: str
    index: str
    spans: list[Span]
    documents: list[dict[str, Any]]


class SessionView(BaseModel):
    """Every envelope of a session, as spans and documents, in log order."""

    session_id: str
    index: str
    spans: list[Span]
    documents: list[dict[str, Any]]


class SearchView(BaseModel):
    """The documents matching every filter, oldest first."""

    index: str
    documents: list[dict[str, Any]]


class TailView(BaseModel):
    """Records of the topics in log order, decoded; ``more``: the limit cut the listing."""

    records: list[dict[str, Any]]
    more: bool


class Divergence(BaseModel):
    """Where a replayed output first differs from the recorded one."""

    lines: list[str]
    detail: dict[str, Any]


class ShadowView(BaseModel):
    """A shadow replay: what was run and compared, and the divergences (none: same output)."""

    source: str
    sessions: list[str]
    replayed: dict[str, int]
    compared: dict[str, int]
    outputs: int
    diverged: bool
    divergences: list[Divergence]


class FlowView(BaseModel):
    """A flow's machine: its spec (as JSON) and the diagram of its moves."""

    flow: str
    version: int
    start: str
    registered: str = Field(description="when it was registered, or 'built in'")
    digest: str
    spec: dict[str, Any]
    diagram: list[str]


@app.command("serve")
def serve_command(
    stdio: Annotated[
        bool, typer.Option("--stdio", help="Serve over stdin/stdout (the default).")
    ] = False,
    port: Annotated[
        int | None,
        typer.Option(help="Serve streamable HTTP on 127.0.0.1:PORT/mcp instead.", min=1, max=65535),
    ] = None,
    bootstrap: BootstrapOption = None,
    prefix: PrefixOption = "",
    home: HomeOption = None,
) -> None:
    """Serve read-only tools over MCP: trace, session, search, tail (bounded),
    replay_shadow and flows_show, each with an output schema."""
    if stdio and port is not None:
        raise fail("give --stdio or --port, not both", 2)
    with errors():
        settings = program_settings(bootstrap)
        if home is not None:
            settings = settings.at_home(Path(home))
        token = settings.bus.mcp_serve_token
        if port is not None and (token is None or not token.get_secret_value()):
            raise fail(
                "--port serves the bus to whoever can reach the port: set "
                "HERMES_MCP_SERVE_TOKEN to the bearer token clients must send (or use --stdio)",
                2,
            )
        server = build(settings, bootstrap, prefix)
    if port is None or token is None:
        server.run()
        return
    import uvicorn

    app = _bearer(server.streamable_http_app(host="127.0.0.1"), token.get_secret_value())
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def _bearer(app: Any, token: str) -> Any:
    """``app`` behind ``Authorization: Bearer <token>``: any other HTTP request is 401."""
    import hmac

    expected = f"Bearer {token}".encode()

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, expected):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"www-authenticate", b"Bearer")],
                    }
                )
                await send({"type": "http.response.body", "body": b"a bearer token is needed"})
                return
        await app(scope, receive, send)

    return guarded


def build(settings: Any, bootstrap: str | None, prefix: str) -> Any:  # noqa: PLR0915 - one closure per tool
    """The MCP server over the bus ``settings`` and ``bootstrap`` name, topics under ``prefix``."""
    import mcp_types as types
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from hermesbus.codec import codec_for
    from hermesbus.compose.backends import trace_index
    from hermesbus.connectors.sqlite.index import SqliteTraceIndex
    from hermesbus.topics import DLQ
    from hermesbus.trace.index import Search, TraceIndex
    from hermesbus.trace.spans import hops_of

    from ._index import _answer, _row
    from ._when import parse_when, tail_position

    codec = codec_for(settings.bus)
    read_only = types.ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    )
    server = MCPServer(
        "hermesbus",
        instructions=(
            "Read-only views of a hermesbus message bus: traces, sessions and searches from "
            "its trace index, records of its topics, shadow replays and its flows."
        ),
    )

    def missing(index: TraceIndex) -> bool:
        return isinstance(index, SqliteTraceIndex) and not Path(index.where).exists()

    async def asked(question: Any) -> tuple[Any, str]:
        index: TraceIndex = trace_index(settings, install=False)
        if missing(index):
            raise ToolError(f"no trace index at {index.where}: `hermesbus up` writes it")
        async with index:
            return await question(index), index.where

    def spanned(found: Any, docs: Any) -> dict[str, Any]:
        answer = _answer(found, docs)
        return {"spans": [Span(**s) for s in answer["spans"]], "documents": answer["documents"]}

    @server.tool(annotations=read_only)
    async def trace(trace_id: str) -> TraceView:
        """A trace from the trace index: its spans (component, state, what, times, outcome)
        and its documents."""
        docs, where = await asked(lambda index: index.by_trace(trace_id))
        found = hops_of(docs, codec, dlq_topic=prefix + DLQ)
        if not found and not docs:
            raise ToolError(f"no envelope of trace {trace_id!r} in the trace index at {where}")
        return TraceView(trace_id=trace_id, index=where, **spanned(found, docs))

    @server.tool(annotations=read_only)
    async def session(session_id: str) -> SessionView:
        """Every envelope of a session (the Kafka key) from the trace index, in log order."""
        docs, where = await asked(lambda index: index.by_session(session_id))
        if not docs:
            raise ToolError(f"no envelope of session {session_id!r} in {where}")
        found = hops_of(docs, codec, dlq_topic=prefix + DLQ)
        return SessionView(session_id=session_id, index=where, **spanned(found, docs))

    @server.tool(annotations=read_only)
    async def search(
        component: str | None = None,
        outcome: str | None = None,
        since: str | None = None,
        until: str | None = None,
        text: str | None = None,
        session_id: str | None = None,
        trace_id: str | None = None,
        action: str | None = None,
        limit: int = 50,
    ) -> SearchView:
        """Indexed envelopes matching every filter, oldest first (since/until: an ISO time
        or -15m, -2h, -1d; outcome: success or failure; at most 500)."""
        now = int(time.time() * 1000)
        try:
            query = Search(
                component=component,
                outcome=outcome,
                since_ms=parse_when(since, now, "since"),
                until_ms=parse_when(until, now, "until"),
                text=text,
                session_id=session_id,
                trace_id=trace_id,
                action=action,
                limit=max(1, min(limit, SEARCH_MAX)),
            )
        except (ValueError, typer.Exit) as exc:
            raise ToolError(f"bad filter: {exc}") from exc
        docs, where = await asked(lambda index: index.search(query))
        return SearchView(index=where, documents=[_row(doc) for doc in docs])

    @server.tool(annotations=read_only)
    async def tail(
        topics: list[str] | None = None,
        session_id: str | None = None,
        trace_id: str | None = None,
        component: str | None = None,
        start: str = "beginning",
        limit: int = 50,
    ) -> TailView:
        """Records of the topics (default: all of the catalog), decoded, in log order, from
        ``start`` (beginning, end, an offset or a time), at most ``limit`` (500)."""
        from hermesbus.topics import Catalog
        from hermesbus.trace.tail import Filters, Tailed
        from hermesbus.trace.tail import tail as read

        kafka = kafka_with(settings, bootstrap)
        if not kafka.bootstrap:
            raise ToolError("no broker configured (--bootstrap or HERMES_KAFKA_BOOTSTRAP)")
        try:
            first = tail_position(start, int(time.time() * 1000))
        except ValueError as exc:
            raise ToolError(f"start {exc}") from exc
        names = (
            [prefix + name for name in topics]
            if topics
            else Catalog.load().with_overrides(prefix=prefix).names()
        )
        filters = Filters(session=session_id, trace=trace_id, component=component)
        wanted, records = max(1, min(limit, TAIL_MAX)), list[dict[str, Any]]()
        listing = cast(
            "AsyncGenerator[Tailed, None]",
            read(
                kafka, names, start=first, end=None, follow=False, filters=filters,
                missing_ok=not topics, codec=codec,
            ),
        )  # fmt: skip
        async with contextlib.aclosing(listing) as tailed:
            async for record in tailed:
                if len(records) == wanted:
                    return TailView(records=records, more=True)
                records.append(record.as_json())
        return TailView(records=records, more=False)

    @server.tool(annotations=read_only)
    async def replay_shadow(sessions: list[str]) -> ShadowView:
        """Re-run the sessions (from the broker, else the trace index's archive) through
        today's processors and compare their outputs with the recorded ones. Writes
        nothing."""
        from hermesbus.compose.flows import RegistryCatalog, copied_catalog, flow_copies
        from hermesbus.compose.stack import REPLAYABLE, shadows
        from hermesbus.processors.protocol import ProtocolPolicy
        from hermesbus.replay.shadow import shadow

        from ._sources import read_sessions

        if not sessions:
            raise ToolError("name at least one session")
        across = [prefix + REPLAYABLE["memory"]]
        found = await read_sessions(settings, "auto", bootstrap, prefix, sessions, None, across)
        recording = found.recording(prefix)
        if not any(hop.envelope.session_id in sessions for hop in recording.hops):
            raise ToolError(f"none of {sessions} is in {recording.source}")
        kafka, copies = kafka_with(settings, bootstrap), flow_copies(settings.home, prefix)
        flows: Any = None  # the registry as it is, or the copies kept: none written here
        if kafka.bootstrap:
            flows = RegistryCatalog(kafka, prefix, settings.keys.load)
        elif copies.is_dir():
            flows = copied_catalog(copies)
        async with shadows(settings, tuple(REPLAYABLE), prefix=prefix, flows=flows) as wired:
            report = await shadow(
                recording, wired, sessions=found.sessions, policy=ProtocolPolicy(),
                prefix=prefix, applied_window=settings.runtime.applied_window,
            )  # fmt: skip
        return ShadowView(
            source=recording.source,
            sessions=found.sessions,
            replayed=dict(report.replayed),
            compared=dict(report.compared),
            outputs=report.outputs,
            diverged=report.diverged,
            divergences=[
                Divergence(lines=d.lines(), detail=d.as_json()) for d in report.divergences
            ],
        )

    @server.tool(annotations=read_only)
    async def flows_show(flow: str, version: int | None = None) -> FlowView:
        """A flow's machine as registered (the newest version unless one is named), or the
        built-in expense report: its spec and the diagram of the moves out of each state."""
        from hermesbus.compose.flows import read_flows
        from hermesbus.processors.flow import EXPENSE_SPEC

        from ._flows import diagram

        kafka = kafka_with(settings, bootstrap)
        registered = (
            await read_flows(kafka, prefix, settings.keys.load()) if kafka.bootstrap else None
        )
        found = registered.get(flow, version) if registered is not None else None
        if found is None:
            ours = flow == EXPENSE_SPEC.flow and version in (None, EXPENSE_SPEC.version)
            if ours and (registered is None or flow not in registered.versions):
                spec, when, digest = EXPENSE_SPEC, "built in", ""
            else:
                raise ToolError(f"no flow {flow!r} (version {version or 'newest'}) is registered")
        else:
            spec, digest = found.spec, found.digest
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(found.registered_at_ms / 1000))
        return FlowView(
            flow=spec.flow,
            version=spec.version,
            start=spec.start,
            registered=when,
            digest=digest,
            spec=spec.model_dump(mode="json", by_alias=True, exclude_none=True),
            diagram=diagram(spec),
        )

    return server

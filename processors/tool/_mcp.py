"""MCP tools: one shared client session per server, pinned definitions, calls as executions.

A stdio server runs as a child process started by the SDK's stdio transport in a
session (and process group) of its own, through ``_mcp_launch.py``: only the variables
its spec names (and the base ones), an address-space limit, its stderr appended to
``HOME/mcp/<server>.stderr.log``. An HTTP server is reached over streamable HTTP on a host
of the allow-list. The session is opened on the first call or probe and shared by the
server's tools; when the server dies or the connection drops, the next call opens a new
one at once, and a connection that fails is retried after a back-off (0.5 s doubling to
30 s) during which calls answer 503 at once (so their fallbacks answer).

A call runs under the tool's timeout: past it the SDK sends ``notifications/cancelled``
and a stdio server is killed (its whole process group), as a python tool's worker is.
Before a call the tool's definition, as the server lists it now (re-listed when the
listing is older than ``relist_s`` or the server said its list changed), is compared with
the pinned one: a different definition answers 503 with the offered definition attached
(:attr:`Execution.drift`) and nothing is called.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from hermesbus.processors.protocol import OK, TIMEOUT, UNAVAILABLE, VERIFICATION_FAILED
from hermesbus.processors.tool._executor import Execution
from hermesbus.processors.tool._spec import McpServer, ToolSpec

__all__ = [
    "IDEMPOTENCY_META",
    "SIGNATURE_META",
    "STATUS_META",
    "McpConnection",
    "McpExecutor",
    "definition_of",
    "pin_of",
    "server_env",
]

log = logging.getLogger(__name__)

SIGNATURE_META: Final = "hermesbus/signature"
"""A result's ``_meta`` key for the signature of its text (when the spec asks for one)."""
STATUS_META: Final = "hermesbus/status"
"""An error result's ``_meta`` key for its status (4xx/5xx); without it an error is 500."""
IDEMPOTENCY_META: Final = "hermesbus/idempotency_key"
"""A call's ``_meta`` key holding its idempotency key (a server with side effects honours it)."""
_LAUNCH: Final = Path(__file__).with_name("_mcp_launch.py")
_BASE_ENV: Final = ("PATH", "HOME", "LANG", "TZ", "TMPDIR")
_DEFINITION_KEYS: Final = (
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
)
_BACKOFF_FIRST_S: Final = 0.5
_BACKOFF_MAX_S: Final = 30.0
_PAGES: Final = 100
_TOOL_ERROR: Final = 500
_T = TypeVar("_T")


def definition_of(tool: types.Tool) -> dict[str, Any]:
    """What is pinned of a tool: name, title, description, schemas, annotations."""
    dumped = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {key: dumped[key] for key in _DEFINITION_KEYS if key in dumped}


def pin_of(definition: Mapping[str, Any]) -> str:
    """The digest a definition is pinned by (sha256 of its canonical JSON)."""
    canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def server_env(names: tuple[str, ...], source: Mapping[str, str]) -> dict[str, str]:
    """A stdio server's environment from ``source``: the base variables, LC_* and ``names``."""
    wanted = set(_BASE_ENV) | set(names)
    return {k: v for k, v in source.items() if k in wanted or k.startswith("LC_")}


class McpUnavailable(Exception):
    """The server cannot be reached now (not started, dropped, backing off)."""


class McpConnection:
    """The one client session of an MCP server, opened when needed and shared by its tools."""

    def __init__(
        self,
        server: McpServer,
        *,
        env: Mapping[str, str],
        env_names: tuple[str, ...],
        state: Path,
        hosts: frozenset[str],
    ) -> None:
        self.server = server
        self._env = dict(env)
        self.env_names = env_names
        self._state = state
        self._hosts = hosts
        self._lock = asyncio.Lock()
        self._session: ClientSession | None = None
        self._runner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._dead = False
        self._failures = 0
        self._retry_at = 0.0
        self._last_error = ""
        self._listing: dict[str, types.Tool] | None = None
        self._listed_at = 0.0
        self._pid: int | None = None
        self.connects = 0
        """Sessions opened so far (a test sees a reconnection)."""

    @property
    def stderr_log(self) -> Path:
        """Where a stdio server's stderr is appended."""
        return self._state / f"{self.server.name}.stderr.log"

    @property
    def _pidfile(self) -> Path:
        return self._state / f"{self.server.name}.pid"

    @property
    def pid(self) -> int | None:
        """The stdio server's pid while a session is open (None otherwise)."""
        return None if self._session is None else self._pid

    def _read_pid(self) -> int | None:
        """The pid the launcher wrote (it is the server's: the launcher became it)."""
        if self.server.transport != "stdio":
            return None
        try:
            return int(self._pidfile.read_text(encoding="ascii"))
        except (OSError, ValueError):
            return None

    async def session(self, timeout_s: float) -> ClientSession:
        """The open session, or a new one; McpUnavailable when it cannot be had now."""
        async with self._lock:
            if self._session is not None and not self._dead and self._alive():
                return self._session
            await self._teardown()
            wait = self._retry_at - time.monotonic()
            if wait > 0:
                raise McpUnavailable(
                    f"MCP server {self.server.name} is retried in {wait:.1f} s "
                    f"({self._failures} failed attempts; last: {self._last_error})"
                )
            ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
            self._stop = asyncio.Event()
            self._runner = asyncio.get_running_loop().create_task(self._run(ready))
            try:
                async with asyncio.timeout(timeout_s):
                    session = await asyncio.shield(ready)
            except (Exception, TimeoutError) as exc:
                self._failed(exc)
                await self._teardown()
                raise McpUnavailable(
                    f"MCP server {self.server.name} did not connect: {self._last_error}"
                ) from exc
            self._session, self._dead, self._failures = session, False, 0
            self._pid = self._read_pid()
            self._listing = None
            self.connects += 1
            log.info("MCP server %s: session open (%s)", self.server.name, self.server.where)
            return session

    def _failed(self, exc: BaseException) -> None:
        self._failures += 1
        delay = min(_BACKOFF_MAX_S, _BACKOFF_FIRST_S * 2 ** (self._failures - 1))
        self._retry_at = time.monotonic() + delay
        self._last_error = _said(exc)
        log.warning(
            "MCP server %s: %s (retry in %.1f s)", self.server.name, self._last_error, delay
        )

    def _alive(self) -> bool:
        """A stdio server's process is still there (not gone, not a zombie)."""
        pid = self.pid
        if self.server.transport != "stdio" or pid is None:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
        except OSError:
            return _exists(pid)
        return stat.rpartition(")")[2].split()[:1] != ["Z"]

    async def _run(self, ready: asyncio.Future[ClientSession]) -> None:
        """Hold the transport and the session open until stopped (one task: anyio's
        scopes are left where they were entered)."""
        try:
            async with AsyncExitStack() as stack:
                read, write = await self._transport(stack)
                session = await stack.enter_async_context(
                    ClientSession(read, write, message_handler=self._message)
                )
                await session.initialize()
                ready.set_result(session)
                await self._stop.wait()
        except BaseException as exc:  # the session ended: say it to who waits, or log it
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else McpUnavailable(str(exc)))
            elif not self._stop.is_set():
                log.warning("MCP server %s: connection lost: %s", self.server.name, _said(exc))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._dead = True

    async def _transport(self, stack: AsyncExitStack) -> Any:
        if self.server.transport == "http":
            url = str(self.server.url)
            host = _host(url)
            if host is None or host not in self._hosts:
                raise McpUnavailable(f"host {host!r} is not on HERMES_TOOL_HOSTS")
            return await stack.enter_async_context(streamable_http_client(url))
        self._state.mkdir(parents=True, exist_ok=True)
        config = {
            "command": list(self.server.command),
            "env": [*_BASE_ENV, *self.env_names],
            "memory_mb": self.server.memory_limit_mb,
            "pidfile": str(self._pidfile),
        }
        params = StdioServerParameters(
            command=sys.executable, args=[str(_LAUNCH), json.dumps(config)], env=self._env
        )
        errlog = stack.enter_context(self.stderr_log.open("a", encoding="utf-8"))
        return await stack.enter_async_context(stdio_client(params, errlog=errlog))

    async def _message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._listing = None  # listed again before the next call

    async def listing(self, timeout_s: float, max_age_s: float) -> dict[str, types.Tool]:
        """The server's tools by name, listed again when older than ``max_age_s``."""
        listing = self._listing
        if listing is not None and time.monotonic() - self._listed_at <= max_age_s:
            return listing
        session = await self.session(timeout_s)
        tools: dict[str, types.Tool] = {}
        cursor: str | None = None
        for _ in range(_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await self._guarded(session.list_tools(params=params))
            tools.update((tool.name, tool) for tool in page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        self._listing, self._listed_at = tools, time.monotonic()
        return tools

    async def ping(self, timeout_s: float) -> None:
        session = await self.session(timeout_s)
        await self._guarded(session.send_ping())

    async def call(
        self, tool: str, arguments: Any, timeout_s: float, key: str
    ) -> types.CallToolResult:
        session = await self.session(timeout_s)
        meta = types.RequestParamsMeta(**{IDEMPOTENCY_META: key}) if key else None  # type: ignore[typeddict-unknown-key]
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(name=tool, arguments=arguments, _meta=meta)
        )
        # send_request, not call_tool: call_tool checks the structured content against the
        # schema the server lists now; the tool service checks it against the pinned one
        return await self._guarded(
            session.send_request(
                request, types.CallToolResult, request_read_timeout_seconds=timeout_s
            )
        )

    async def _guarded(self, request: Awaitable[_T]) -> _T:
        """``request``; a connection found closed marks the session dead (the next call
        opens a new one)."""
        try:
            return await request
        except MCPError as exc:
            if exc.error.code == types.CONNECTION_CLOSED:
                self._dead = True
            raise
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            self._dead = True
            raise McpUnavailable(f"MCP server {self.server.name}: connection closed") from exc

    def kill(self) -> None:
        """Kill a stdio server's whole process group (a call went past its timeout)."""
        pid = self.pid
        self._dead = True
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)

    async def _teardown(self) -> None:
        runner, self._runner = self._runner, None
        self._session, self._pid = None, None
        if runner is None:
            return
        self._stop.set()
        with contextlib.suppress(TimeoutError, Exception, asyncio.CancelledError):
            async with asyncio.timeout(10):
                await runner
        if not runner.done():
            runner.cancel()

    async def close(self) -> None:
        async with self._lock:
            await self._teardown()


class McpExecutor:
    """One MCP tool as an ``Executor``: ``call`` runs it, ``probe`` pings the server and
    makes the declared probe call; both first check the tool's definition against the pin."""

    def __init__(
        self,
        spec: ToolSpec,
        connection: McpConnection,
        *,
        relist_s: float,
        max_bytes: int,
    ) -> None:
        if spec.mcp is None:
            raise ValueError(f"tool {spec.name!r} is not an MCP tool")
        self.name = spec.name
        self._binding = spec.mcp
        self._connection = connection
        self._relist_s = relist_s
        self._max_bytes = max_bytes

    async def run(self, role: str, arguments: Any, timeout_s: float, key: str = "") -> Execution:
        start = time.perf_counter()
        try:
            async with asyncio.timeout(timeout_s):
                drift = await self._drift(timeout_s)
                if drift is not None:
                    return drift
                if role == "probe":
                    await self._connection.ping(timeout_s)
                    tool, arguments = self._binding.probe_tool, self._binding.probe_arguments
                else:
                    tool = self._binding.tool
                result = await self._connection.call(tool, arguments, timeout_s, key)
        except (TimeoutError, McpUnavailable, MCPError, RuntimeError, OSError, ValueError) as exc:
            return self._failed(exc, timeout_s)
        latency = (time.perf_counter() - start) * 1000
        return self._execution(result, latency)

    def _failed(self, exc: Exception, timeout_s: float) -> Execution:
        """What a call or probe that raised answers; past the timeout a stdio server is
        killed (the SDK has sent the cancellation)."""
        timed_out = isinstance(exc, TimeoutError) or (
            isinstance(exc, MCPError) and exc.error.code == types.REQUEST_TIMEOUT
        )
        if timed_out:
            self._connection.kill()
            return Execution(TIMEOUT, error=f"{self.name} timed out after {timeout_s:g} s")
        if isinstance(exc, McpUnavailable):
            return Execution(UNAVAILABLE, error=f"{self.name}: {exc}")
        if isinstance(exc, MCPError):
            return Execution(UNAVAILABLE, error=f"{self.name}: MCP error {exc.error.code}: {exc}")
        if isinstance(exc, RuntimeError):  # the SDK's own check of structured content
            return Execution(VERIFICATION_FAILED, error=f"{self.name}: {exc}")
        return Execution(UNAVAILABLE, error=f"{self.name}: {type(exc).__name__}: {exc}")

    async def _drift(self, timeout_s: float) -> Execution | None:
        """None while the server offers the pinned definition; else the 503 with the offer."""
        listing = await self._connection.listing(timeout_s, self._relist_s)
        offered = listing.get(self._binding.tool)
        definition = None if offered is None else definition_of(offered)
        if definition is not None and pin_of(definition) == self._binding.pin:
            return None
        said = "no longer offers it" if definition is None else "offers another definition"
        error = (
            f"{self.name}: the MCP server {self._binding.server.name} {said} than the one "
            f"approved ({self._binding.pin[:19]}…): `hermesbus tools approve {self.name}`"
        )
        return Execution(UNAVAILABLE, error=error, drift={"offered": definition})

    def _execution(self, result: types.CallToolResult, latency: float) -> Execution:
        meta = result.meta or {}
        text = "".join(b.text for b in result.content if isinstance(b, types.TextContent))
        if result.is_error:
            said = meta.get(STATUS_META)
            status = said if isinstance(said, int) and 400 <= said <= 599 else _TOOL_ERROR  # noqa: PLR2004
            error = f"{self.name} answered an error: {text[:200]}"
            return Execution(status, error=error, latency_ms=latency)
        signature = meta.get(SIGNATURE_META)
        signature = signature if isinstance(signature, str) else None
        if signature is not None or result.structured_content is None:
            body = text.encode()  # what was signed, or the only JSON there is
        else:
            body = json.dumps(
                result.structured_content, ensure_ascii=False, separators=(",", ":")
            ).encode()
        if len(body) > self._max_bytes:
            error = f"{self.name}: the result is over {self._max_bytes} bytes"
            return Execution(VERIFICATION_FAILED, error=error, latency_ms=latency)
        return Execution(OK, body, signature, latency_ms=latency)

    async def close(self) -> None:
        return None  # the connection belongs to the service


def _said(exc: BaseException) -> str:
    """An exception in one line (an exception group: its first leaf)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]


def _host(url: str) -> str | None:
    import httpx  # noqa: PLC0415 - only to parse the URL

    try:
        return httpx.URL(url).host.lower() or None
    except httpx.InvalidURL:
        return None


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

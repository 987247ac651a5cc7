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
(:attr:`Execution.offered`) and nothing is called.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from hermesbus.processors.protocol import OK, TIMEOUT, UNAVAILABLE, VERIFICATION_FAILED
from hermesbus.processors.tool._executor import Execution, Progress
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
_FINISH_S: Final = 10.0
"""How long closing a session may take before its task is cancelled."""
_SHORT_LIVED_S: Final = 5.0
"""A session that closes this soon after it opened, having answered nothing, counts as a
failed attempt (a server that crashes at its first request is not respawned per call)."""
_ATTEMPTS: Final = itertools.count(1)
"""Numbers connection attempts in this process (each has its own pid file)."""
_LOG_KEEP_BYTES: Final = 8 * 1024 * 1024
"""A stderr log past this is moved to ``.1`` when a session opens (one old log is kept)."""
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
    """The server cannot be reached now (not started, dropped, backing off, closed)."""


class McpClosed(McpUnavailable):
    """The connection closed under a request that was sent: it may have run."""


class _Live:
    """One open session of a server: what a call uses from its listing to its answer."""

    def __init__(self, pidfile: Path) -> None:
        self.pidfile = pidfile
        self.session: ClientSession | None = None
        self.pid: int | None = None
        self.runner: asyncio.Task[None] | None = None
        self.stop = asyncio.Event()
        self.dead = False
        self.answered = False
        """It answered a request after ``initialize`` (a server that dies at once did not)."""
        self.opened_at = 0.0
        self.listing: dict[str, types.Tool] | None = None
        self.listed_at = 0.0

    async def message(self, message: Any) -> None:
        """A server notification: a changed tool list is listed again before the next call."""
        if isinstance(message, types.ToolListChangedNotification):
            self.listing = None

    async def finish(self) -> None:
        """Close the session and the transport (the SDK stops a stdio server: stdin closed,
        then SIGTERM and SIGKILL to its group); the runner is cancelled if it hangs."""
        self.dead = True
        self.stop.set()
        runner = self.runner
        if runner is None:
            return
        await asyncio.wait({runner}, timeout=_FINISH_S)
        if not runner.done():
            runner.cancel()
            await asyncio.wait({runner}, timeout=_FINISH_S)


class McpConnection:
    """The one client session of an MCP server, opened when needed and shared by its tools.

    A session is opened in a task of its own under ``connect_timeout_s``: a caller waits for
    it with its own timeout, and giving up does not stop the attempt (the next caller gets
    the session, or the failure and its back-off). A session that died is replaced; one
    whose server did not answer a ping after a call timed out is closed (a stdio server
    killed, its whole process group)."""

    def __init__(
        self,
        server: McpServer,
        *,
        env: Mapping[str, str],
        env_names: tuple[str, ...],
        state: Path,
        hosts: frozenset[str],
        connect_timeout_s: float = 60.0,
        ping_grace_s: float = 2.0,
    ) -> None:
        """``ping_grace_s``: how long the server has to answer a ping after a call timed
        out, before its session is closed."""
        self.server = server
        self._env = dict(env)
        self.env_names = env_names
        self._state = state
        self._hosts = hosts
        self._connect_timeout_s = connect_timeout_s
        self._ping_grace_s = ping_grace_s
        self._lock = asyncio.Lock()
        self._current: _Live | None = None
        self._connecting: asyncio.Task[_Live] | None = None
        self._retiring: set[asyncio.Task[None]] = set()
        self._failures = 0
        self._retry_at = 0.0
        self._last_error = ""
        self._closed = False
        self.connects = 0
        """Sessions opened so far (a test sees a reconnection)."""

    @property
    def stderr_log(self) -> Path:
        """Where a stdio server's stderr is appended (the previous one kept as ``.1``)."""
        return self._state / f"{self.server.name}.stderr.log"

    @property
    def pid(self) -> int | None:
        """The stdio server's pid while a session is open (None otherwise)."""
        live = self._current
        return None if live is None or live.dead else live.pid

    async def live(self) -> _Live:
        """The open session, or a new one; McpUnavailable when it cannot be had now."""
        async with self._lock:
            if self._closed:
                raise McpUnavailable(f"the connection to MCP server {self.server.name} is closed")
            live = self._current
            if live is not None and not live.dead and _alive(live.pid):
                return live
            if self._connecting is None:
                if live is not None:
                    self._current = None
                    if not live.answered and time.monotonic() - live.opened_at < _SHORT_LIVED_S:
                        self._failed(McpUnavailable("it closed before answering a request"))
                    self._retire(live)
                wait = self._retry_at - time.monotonic()
                if wait > 0:
                    raise McpUnavailable(
                        f"MCP server {self.server.name} is retried in {wait:.1f} s "
                        f"({self._failures} failed attempts; last: {self._last_error})"
                    )
                connecting = asyncio.get_running_loop().create_task(self._connect())
                connecting.add_done_callback(_retrieved)
                self._connecting = connecting
            connecting = self._connecting
        try:
            return await asyncio.shield(connecting)  # a caller's timeout ends its wait only
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the caller itself is cancelled
            raise McpUnavailable(f"MCP server {self.server.name}: connecting was stopped") from None

    async def _connect(self) -> _Live:
        attempt = next(_ATTEMPTS)  # a pid file per attempt: others start the server too
        live = _Live(self._state / f"{self.server.name}.{os.getpid()}.{attempt}.pid")
        ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
        live.runner = asyncio.get_running_loop().create_task(self._run(live, ready))
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                live.session = await asyncio.shield(ready)
        except Exception as exc:
            self._failed(exc)
            await live.finish()
            raise McpUnavailable(
                f"MCP server {self.server.name} did not connect: {self._last_error}"
            ) from exc
        except BaseException:  # cancelled (the connection is closing): no server left behind
            await asyncio.shield(live.finish())
            raise
        finally:
            self._connecting = None
        live.pid = _pid_in(live.pidfile)
        live.opened_at = time.monotonic()
        live.runner.add_done_callback(lambda _: setattr(live, "dead", True))
        self._current = live  # its back-off is forgiven once it answers a request
        self.connects += 1
        log.info("MCP server %s: session open (%s)", self.server.name, self.server.where)
        return live

    def _failed(self, exc: BaseException) -> None:
        self._failures += 1
        delay = min(_BACKOFF_MAX_S, _BACKOFF_FIRST_S * 2 ** (self._failures - 1))
        self._retry_at = time.monotonic() + delay
        self._last_error = _said(exc)
        log.warning(
            "MCP server %s: %s (retry in %.1f s)", self.server.name, self._last_error, delay
        )

    def answered(self, live: _Live) -> None:
        """``live`` answered a request: a server that works, its failures forgiven."""
        if not live.answered:
            live.answered = True
            self._failures = 0

    def _retire(self, live: _Live) -> None:
        task = asyncio.get_running_loop().create_task(live.finish())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _run(self, live: _Live, ready: asyncio.Future[ClientSession]) -> None:
        """Hold the transport and the session open until stopped (one task: anyio's
        scopes are left where they were entered)."""
        try:
            async with AsyncExitStack() as stack:
                read, write = await self._transport(stack, live)
                session = await stack.enter_async_context(
                    ClientSession(read, write, message_handler=live.message)
                )
                await session.initialize()
                if not ready.done():
                    ready.set_result(session)
                await live.stop.wait()
        except BaseException as exc:  # the session ended: say it to who waits, or log it
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else McpUnavailable(str(exc)))
            elif not live.stop.is_set():
                log.warning("MCP server %s: connection lost: %s", self.server.name, _said(exc))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            live.dead = True
            with contextlib.suppress(OSError):
                live.pidfile.unlink()

    async def _transport(self, stack: AsyncExitStack, live: _Live) -> Any:
        if self.server.transport == "http":
            url = str(self.server.url)
            host = _host(url)
            if host is None or host not in self._hosts:
                raise McpUnavailable(f"host {host!r} is not on HERMES_TOOL_HOSTS")
            return await stack.enter_async_context(streamable_http_client(url))
        self._state.mkdir(parents=True, exist_ok=True)
        _rotate(self.stderr_log)
        config = {
            "command": list(self.server.command),
            "env": [*_BASE_ENV, *self.env_names],
            "memory_mb": self.server.memory_limit_mb,
            "pidfile": str(live.pidfile),
        }
        params = StdioServerParameters(
            command=sys.executable, args=[str(_LAUNCH), json.dumps(config)], env=self._env
        )
        errlog = stack.enter_context(self.stderr_log.open("a", encoding="utf-8"))
        return await stack.enter_async_context(stdio_client(params, errlog=errlog))

    async def listing(self, live: _Live, max_age_s: float) -> dict[str, types.Tool]:
        """The server's tools by name as ``live`` lists them, listed again when older than
        ``max_age_s`` (a new session lists afresh: a listing is never carried over)."""
        listing = live.listing
        if listing is not None and time.monotonic() - live.listed_at <= max_age_s:
            return listing
        session = _session_of(live)
        tools: dict[str, types.Tool] = {}
        cursor: str | None = None
        for _ in range(_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await _guarded(live, session.list_tools(params=params))
            tools.update((tool.name, tool) for tool in page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        live.listing, live.listed_at = tools, time.monotonic()
        self.answered(live)
        return tools

    async def ping(self, live: _Live) -> None:
        await _guarded(live, _session_of(live).send_ping())

    async def call(
        self,
        live: _Live,
        tool: str,
        arguments: Any,
        *,
        timeout_s: float,
        key: str,
        on_progress: Progress | None = None,
    ) -> types.CallToolResult:
        """Call ``tool`` in ``live``; ``on_progress`` hears what the server reports while
        it runs (the figures only: its message is the server's own words, not passed on)."""

        async def heard(progress: float, total: float | None, message: str | None) -> None:
            del message  # the server's own words: not passed on
            if on_progress is not None:
                await on_progress(progress, total)

        meta = types.RequestParamsMeta(**{IDEMPOTENCY_META: key}) if key else None  # type: ignore[typeddict-unknown-key]
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(name=tool, arguments=arguments, _meta=meta)
        )
        # send_request, not call_tool: call_tool checks the structured content against the
        # schema the server lists now; the tool service checks it against the pinned one
        return await _guarded(
            live,
            _session_of(live).send_request(
                request,
                types.CallToolResult,
                request_read_timeout_seconds=timeout_s,
                progress_callback=heard if on_progress is not None else None,
            ),
        )

    def timed_out(self, live: _Live) -> None:
        """A request in ``live`` went past its caller's timeout (the SDK sent its
        cancellation): the server must still answer a ping within a grace, or the session
        is closed and a stdio server killed (its whole process group)."""
        if self._closed or live.dead:
            return
        task = asyncio.get_running_loop().create_task(self._check(live))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _check(self, live: _Live) -> None:
        try:
            async with asyncio.timeout(self._ping_grace_s):
                await self.ping(live)
        except (TimeoutError, McpUnavailable, MCPError, OSError) as exc:
            log.warning(
                "MCP server %s: no answer to a ping after a call timed out (%s): closed",
                self.server.name, _said(exc),
            )  # fmt: skip
            self.kill(live)

    def kill(self, live: _Live) -> None:
        """Close ``live``; a stdio server's whole process group is killed."""
        if live.dead and live.runner is not None and live.runner.done():
            return
        live.dead = True
        if live.pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(live.pid, signal.SIGKILL)
        self._retire(live)

    async def close(self) -> None:
        """Close the session for good (a later call answers that it is closed)."""
        async with self._lock:
            self._closed = True
            connecting, self._connecting = self._connecting, None
            if connecting is not None:
                connecting.cancel()
                await asyncio.wait({connecting}, timeout=_FINISH_S)
            live, self._current = self._current, None
            if live is not None:
                self._retire(live)
        await self.settled(2 * _FINISH_S + self._ping_grace_s)

    async def settled(self, within_s: float) -> None:
        """Wait (at most ``within_s``) until no session is being closed or checked."""
        deadline = time.monotonic() + within_s
        while self._retiring and (left := deadline - time.monotonic()) > 0:
            await asyncio.wait(set(self._retiring), timeout=left)  # a check may kill on


class McpExecutor:
    """One MCP tool as an ``Executor``: ``call`` runs it, ``probe`` pings the server and
    makes the declared probe call; both first check the tool's definition against the pin,
    in the session the call then uses."""

    def __init__(
        self,
        spec: ToolSpec,
        connection: McpConnection | Callable[[], McpConnection],
        *,
        relist_s: float,
        max_bytes: int,
    ) -> None:
        """``connection``: the server's, or what gives the one to use now (the service's
        current one, which replaces a connection whose server was registered anew)."""
        if spec.mcp is None:
            raise ValueError(f"tool {spec.name!r} is not an MCP tool")
        self.name = spec.name
        self._binding = spec.mcp
        self._seen: tuple[types.Tool, bool] | None = None
        """The last offered definition compared with the pin, and whether it matched (a
        listing is read again only every ``relist_s``: the same objects until then)."""
        self._connection_of = connection if callable(connection) else lambda: connection
        self._relist_s = relist_s
        self._max_bytes = max_bytes

    async def run(
        self,
        role: str,
        arguments: Any,
        timeout_s: float,
        key: str = "",
        *,
        progress: Progress | None = None,
    ) -> Execution:
        start = time.perf_counter()
        connection = self._connection_of()
        live: _Live | None = None  # the session this call uses, once it has one
        calling = False  # its tools/call request is out
        try:
            async with asyncio.timeout(timeout_s):
                live = await connection.live()
                relist = 0.0 if role == "probe" else self._relist_s
                drift = self._drift(await connection.listing(live, relist))
                if drift is not None:
                    return drift
                tool = self._binding.tool
                if role == "probe":
                    await connection.ping(live)
                    tool, arguments = self._binding.probe_tool, self._binding.probe_arguments
                calling = True
                result = await connection.call(
                    live, tool, arguments, timeout_s=timeout_s, key=key, on_progress=progress
                )
        except (TimeoutError, McpUnavailable, MCPError, RuntimeError, OSError, ValueError) as exc:
            return self._failed(exc, timeout_s, connection, live, calling=calling)
        connection.answered(live)
        latency = (time.perf_counter() - start) * 1000
        return self._execution(result, latency)

    def _failed(
        self,
        exc: Exception,
        timeout_s: float,
        connection: McpConnection,
        live: _Live | None,
        *,
        calling: bool,
    ) -> Execution:
        """What a call or probe that raised answers. Past its timeout, the session it used
        (a request of it out: a listing, a ping or the call) has its server checked
        (:meth:`McpConnection.timed_out`); a connection that closed under the call leaves
        its outcome unknown (504, as a timeout)."""
        code = exc.error.code if isinstance(exc, MCPError) else None
        if isinstance(exc, TimeoutError) or code == types.REQUEST_TIMEOUT:
            if live is not None:
                connection.timed_out(live)
            return Execution(TIMEOUT, error=f"{self.name} timed out after {timeout_s:g} s")
        if calling and (code == types.CONNECTION_CLOSED or isinstance(exc, McpClosed)):
            error = f"{self.name}: the connection closed while the call ran (outcome unknown)"
            return Execution(TIMEOUT, error=error)
        if isinstance(exc, McpUnavailable):
            return Execution(UNAVAILABLE, error=f"{self.name}: {exc}")
        if isinstance(exc, MCPError):
            return Execution(UNAVAILABLE, error=f"{self.name}: MCP error {code}: {exc}")
        if isinstance(exc, RuntimeError):
            return Execution(UNAVAILABLE, error=f"{self.name}: {exc}")
        return Execution(UNAVAILABLE, error=f"{self.name}: {type(exc).__name__}: {exc}")

    def _drift(self, listing: Mapping[str, types.Tool]) -> Execution | None:
        """None while the server offers the pinned definition; a 503 otherwise: with the
        offer attached when it offers another one (recorded: the tool awaits approval),
        without when it does not list the tool now (this call fails, nothing is recorded)."""
        offered = listing.get(self._binding.tool)
        if offered is None:
            error = (
                f"{self.name}: the MCP server {self._binding.server.name} does not offer "
                f"{self._binding.tool!r} now"
            )
            return Execution(UNAVAILABLE, error=error)
        seen = self._seen
        if seen is not None and seen[0] is offered and seen[1]:
            return None
        definition = definition_of(offered)
        matches = pin_of(definition) == self._binding.pin
        self._seen = (offered, matches)
        if matches:
            return None
        error = (
            f"{self.name}: the MCP server {self._binding.server.name} offers another "
            f"definition than the one approved ({self._binding.pin[:19]}…): "
            f"`hermesbus tools approve {self.name}`"
        )
        return Execution(UNAVAILABLE, error=error, offered=definition)

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


def _session_of(live: _Live) -> ClientSession:
    if live.session is None or live.dead:
        raise McpUnavailable("the session is closed")
    return live.session


async def _guarded(live: _Live, request: Awaitable[_T]) -> _T:
    """``request``; a connection found closed marks the session dead (the next call opens
    a new one)."""
    try:
        return await request
    except MCPError as exc:
        if exc.error.code == types.CONNECTION_CLOSED:
            live.dead = True
        raise
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
        live.dead = True
        raise McpClosed("connection closed") from exc


def _alive(pid: int | None) -> bool:
    """A stdio server's process is still there (not gone, not a zombie); True without one.
    Read for every call: its ``/proc`` status, with no more than the system calls it takes
    (a zombie's status says so while its other threads still exit, before it can be
    waited for)."""
    if pid is None:
        return True
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return _exists(pid)
    try:
        stat = os.read(fd, 4096)
    except OSError:
        return _exists(pid)
    finally:
        os.close(fd)
    return stat.rpartition(b")")[2].split()[:1] != [b"Z"]


def _pid_in(pidfile: Path) -> int | None:
    """The pid the launcher wrote (the server's: the launcher became it)."""
    try:
        return int(pidfile.read_text(encoding="ascii"))
    except (OSError, ValueError):
        return None


def _rotate(log_file: Path) -> None:
    """Keep a stderr log bounded: past the limit it becomes ``.1`` (the older one goes)."""
    with contextlib.suppress(OSError):
        if log_file.stat().st_size > _LOG_KEEP_BYTES:
            log_file.replace(log_file.with_name(log_file.name + ".1"))


def _retrieved(task: asyncio.Task[Any]) -> None:
    """Retrieve a connection attempt's failure (its waiters may all have given up)."""
    if not task.cancelled():
        task.exception()

"""The tool processor's port: registry, executors, calls with fallbacks, probes, health.

``async with ToolService(store, settings, environ=...) as tools`` starts the store, an HTTP
client and (lazily) a pool of warm workers per python tool; ``ports = {"tools": tools}`` for
the handler, and ``tools.health_view`` (or ``tools`` itself) is the dispatcher's
``HealthView``. ``environ`` is the only environment the tools are given anything from
(``Settings.tool_env``, revealed): nothing here reads the process's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import httpx
from mcp.shared.exceptions import MCPError

from hermesbus.base.lifecycle import Service
from hermesbus.contract.fields import epoch_ms, from_epoch_ms
from hermesbus.contract.payloads import ToolCall, ToolResult
from hermesbus.errors import AdmissionError, ToolError, VerificationError
from hermesbus.processors.protocol import (
    BAD_ARGUMENTS,
    NOT_REGISTERED,
    OK,
    UNAVAILABLE,
    VERIFICATION_FAILED,
    ToolHealth,
    is_failure,
)
from hermesbus.processors.tool._executor import (
    Execution,
    Executor,
    Progress,
    PythonWorker,
    worker_env,
)
from hermesbus.processors.tool._health import RegistryHealth, parse_probe
from hermesbus.processors.tool._http import HttpExecutor
from hermesbus.processors.tool._mcp import (
    McpConnection,
    McpExecutor,
    McpUnavailable,
    pin_of,
    server_env,
)
from hermesbus.processors.tool._mcp_specs import McpDocument, mcp_specs
from hermesbus.processors.tool._pool import WorkerPool
from hermesbus.processors.tool._registry import ToolRegistry, refusal
from hermesbus.processors.tool._release import arguments_digest, failure, release
from hermesbus.processors.tool._settings import ToolSettings
from hermesbus.processors.tool._spec import McpServer, ToolSpec, tool_name_problem
from hermesbus.processors.tool._store import Probe, StoredResult, ToolStore
from hermesbus.processors.tool._verify import ANY_VALUE, json_depth, schema_error
from hermesbus.runtime import outage

__all__ = ["CallReport", "Progress", "ToolPort", "ToolService"]

log = logging.getLogger(__name__)

FORBIDDEN = 403
"""A stored tool may not run (any more): a module off ``HERMES_TOOL_MODULES``, a private
callable, or a name that is no tool name."""
CONFLICT = 409
"""The idempotency key was used by another tool or with other arguments."""
INTERNAL = 500
_VERIFIED = b"true"


VERIFICATION_ALERT = "verification_failed"
DEFINITION_ALERT = "tool_definition_changed"
"""An MCP tool's server offers another definition than the one approved (pinned)."""


@dataclass(frozen=True, slots=True)
class CallReport:
    """The answer to one call, an alert (its message and code: a result failed
    verification, an MCP tool's definition changed) and what it cost."""

    result: ToolResult
    alert: str | None = None
    elapsed_ms: float = 0.0
    external_calls: int = 0
    avg_latency_ms: float = 0.0
    alert_code: str = VERIFICATION_ALERT


class ToolPort(Protocol):
    """What the handler needs (``ports["tools"]``)."""

    async def call(
        self,
        call: ToolCall,
        *,
        now: datetime,
        fallback: bool = False,
        timeout_ms: int = 0,
        progress: Progress | None = None,
    ) -> CallReport: ...


@dataclass(slots=True)
class _Meter:
    latencies: list[float] = field(default_factory=list)
    drifted: bool = False
    """The alert is about an MCP tool's changed definition."""

    def add(self, execution: Execution) -> Execution:
        self.latencies.append(execution.latency_ms)
        return execution


class ToolService(Service):
    """Runs registered tools: validate, execute isolated, verify, cap, fall back, record.

    ``environ``: where a python tool's worker takes its variables from (the base ones and
    those its spec names) and where a result's signature key is looked up; read when a
    worker is made and when a result is verified."""

    def __init__(
        self,
        store: ToolStore,
        settings: ToolSettings,
        *,
        environ: Mapping[str, str],
        debug: bool | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self._environ = environ
        self._client: httpx.AsyncClient | None = None
        self.registry = ToolRegistry(store, self.settings, debug=debug)
        self.health_view = RegistryHealth(store, window=self.settings.tool_health_window)
        self._executors: dict[tuple[str, str], tuple[ToolSpec, Executor]] = {}
        self._retiring: set[asyncio.Task[None]] = set()
        self._connections: dict[str, McpConnection] = {}
        self._drift_lock = asyncio.Lock()
        self._started = False
        self.probed = asyncio.Event()
        """Set while the stored probes are this run's: ``health`` waits for it (a start
        clears it until its first probes land, so no call is routed by an old probe)."""
        self.probed.set()

    async def start(self) -> None:
        if self._started:
            return
        if isinstance(self.store, Service):
            await self.store.start()
        self._client = httpx.AsyncClient()
        self._started = True

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        executors, self._executors = self._executors, {}
        await asyncio.gather(*(executor.close() for _, executor in executors.values()))
        await asyncio.gather(*self._retiring)
        connections, self._connections = self._connections, {}
        await asyncio.gather(*(connection.close() for connection in connections.values()))
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
        if isinstance(self.store, Service):
            await self.store.stop()

    async def register(self, spec: ToolSpec) -> ToolSpec:
        """Admit the tool (AdmissionError otherwise); its old workers are retired."""
        admitted = await self.registry.register(spec)
        for role in ("main", "backup", "verify"):
            entry = self._executors.pop((spec.name, role), None)
            if entry is not None:
                await entry[1].close()
        return admitted

    async def register_mcp(self, document: McpDocument, server: McpServer) -> list[ToolSpec]:
        """List the server's tools, admit each (its definition pinned now, the spec file
        giving what admission needs), run each one's probe, then store them all; nothing is
        stored when any is refused (AdmissionError naming every problem)."""
        if refused := self.registry.server_problems(server):
            raise AdmissionError(f"MCP server {server.name} refused: " + "; ".join(refused))
        timeout = self.settings.tool_spawn_timeout_s
        connection = self._new_connection(server, document.env)
        try:
            specs = mcp_specs(document, server, await self._offered(connection, timeout))
            problems = await self._taken(server, specs)
            admitted: list[ToolSpec] = []
            for spec in specs:
                try:
                    admitted.append(await self.registry.admit(spec))
                except AdmissionError as exc:
                    problems.append(str(exc))
            for spec in admitted:
                cap = spec.max_result_bytes * self.settings.tool_response_factor
                probe = McpExecutor(spec, connection, relist_s=0.0, max_bytes=cap)
                execution = await probe.run("probe", None, max(spec.timeout_s, timeout))
                if not execution.ok:
                    said = f"tool {spec.name!r} refused: its probe failed: {execution.error}"
                    problems.append(said)
        finally:
            await connection.close()
        if problems:
            raise AdmissionError("; ".join(problems))
        await self._store_server(server, admitted)
        return admitted

    @staticmethod
    async def _offered(connection: McpConnection, within_s: float) -> list[Any]:
        """The server's tools, listed within ``within_s`` (else AdmissionError)."""
        server = connection.server
        try:
            async with asyncio.timeout(within_s):
                listing = await connection.listing(await connection.live(), 0.0)
        except (McpUnavailable, MCPError, OSError, TimeoutError) as exc:
            said = str(exc) or f"no answer within {within_s:g} s"
            raise AdmissionError(
                f"MCP server {server.name} ({server.where}) could not be listed: {said}"
            ) from exc
        return list(listing.values())

    async def _store_server(self, server: McpServer, admitted: list[ToolSpec]) -> None:
        """Store a server's admitted tools; those of its tools it offers no longer are
        rebound to it as it is now (their calls answer that it does not offer them)."""
        old = self._connections.pop(server.name, None)
        if old is not None:
            await old.close()
        offered = {spec.name for spec in admitted}
        for stale in await self.store.list_specs():
            binding = stale.mcp
            if binding is None or binding.server.name != server.name:
                continue
            env = admitted[0].env if admitted else stale.env
            if stale.name not in offered and (binding.server, stale.env) != (server, env):
                rebound = binding.model_copy(update={"server": server})
                await self.store.save_spec(stale.model_copy(update={"mcp": rebound, "env": env}))
        for spec in admitted:
            await self.store.save_spec(spec)
            entry = self._executors.pop((spec.name, "main"), None)
            if entry is not None:
                await entry[1].close()

    async def _taken(self, server: McpServer, specs: list[ToolSpec]) -> list[str]:
        """Names the server's tools would take from another tool (a python or http one, or
        another server's): refused, so no server replaces what it does not own."""
        problems = []
        for spec in specs:
            held = await self.store.get_spec(spec.name)
            if held is None or (held.mcp is not None and held.mcp.server.name == server.name):
                continue
            owner = f"server {held.mcp.server.name}'s" if held.mcp else f"a {held.kind}"
            problems.append(
                f"tool {spec.name!r} is already {owner} tool: give the offered "
                f"{spec.mcp.tool if spec.mcp else spec.name!r} another name: in tools:"
            )
        return problems

    async def health(self, tool: str) -> ToolHealth | None:
        """:class:`~hermesbus.processors.protocol.HealthView` of the registered tools (once
        ``probed``)."""
        await self.probed.wait()
        health = await self.health_view.health(tool)
        if health is None:
            return None
        return dataclasses.replace(health, queued=self.queued(tool))

    def pool(self, tool: str) -> WorkerPool | None:
        """The pool of a python tool's workers (None before its first call or probe)."""
        entry = self._executors.get((tool, "main"))
        return entry[1] if entry is not None and isinstance(entry[1], WorkerPool) else None

    def queued(self, tool: str) -> int:
        """Calls of ``tool`` waiting for a free worker of its pool now (0: none, or no pool)."""
        entry = self._executors.get((tool, "main"))
        return entry[1].queued if entry is not None and isinstance(entry[1], WorkerPool) else 0

    def worker_pid(self, tool: str) -> int | None:
        """The pid of a python tool's (first) live worker (None when none is running)."""
        entry = self._executors.get((tool, "main"))
        return entry[1].pid if entry is not None and isinstance(entry[1], WorkerPool) else None

    # -- calls --------------------------------------------------------------------------

    async def call(
        self,
        call: ToolCall,
        *,
        now: datetime,
        fallback: bool = False,
        timeout_ms: int = 0,
        progress: Progress | None = None,
    ) -> CallReport:
        """Answer one call; ``now`` is the envelope's time (the cache's clock); ``progress``
        hears what an MCP tool reports while it runs. Raises only for an outage of a store
        (the runtime holds the call in place until it is back); any other unexpected error
        is a 500 result (raising would make the runtime run it again).

        A failed call is answered by the tool's fallback when the call allows one (marked
        ``fallback``; a cached answer ``stale``). A result that fails verification is
        discarded whatever answers instead: its alert is raised all the same, and the
        fallback's answer never feeds memory (only a fresh, verified result does).

        Only successes are stored under the idempotency key: a call whose outcome is
        unknown (504) may run again on a retry, so a tool with side effects must honour
        the key itself (HTTP: the ``Idempotency-Key`` header; python: the
        ``HERMES_IDEMPOTENCY_KEY`` variable while the call runs)."""
        start = time.perf_counter()
        meter = _Meter()
        try:
            result, alert = await self._answer(
                call, epoch_ms(now), fallback, timeout_ms, meter, progress=progress
            )
        except Exception as exc:  # the boundary: a result, never an exception ...
            if outage(exc):
                raise  # ... but a store that is away: the runtime holds the call in place
            log.exception("tool %s: the call failed inside the processor", call.tool)
            result = failure(call.tool, INTERNAL, f"internal error: {type(exc).__name__}")
            alert = None
        elapsed = (time.perf_counter() - start) * 1000
        count = len(meter.latencies)
        average = sum(meter.latencies) / count if count else 0.0
        code = DEFINITION_ALERT if meter.drifted else VERIFICATION_ALERT
        return CallReport(result, alert, elapsed, count, average, code)

    async def _answer(
        self,
        call: ToolCall,
        now_ms: int,
        fallback: bool,
        timeout_ms: int,
        meter: _Meter,
        *,
        progress: Progress | None = None,
    ) -> tuple[ToolResult, str | None]:
        checked = await self._check(call)
        if isinstance(checked, ToolResult):
            return checked, None
        spec, arguments = checked
        digest = arguments_digest(arguments)
        stored = await self._stored(call, spec, digest)
        if stored is not None:  # a redelivery or a retry of a call that already succeeded
            return stored, None
        strategy = spec.fallback.strategy if spec.fallback is not None else "none"
        allowed = call.fallback_allowed and strategy != "none"
        key = call.idempotency_key
        if spec.mcp is not None and spec.mcp.offered_pin is not None:  # awaiting approval
            result, alert = await self._unapproved(spec, meter)
            if allowed:
                answer = await self._fallback(spec, arguments, digest, now_ms, meter=meter, key=key)
                result = answer or result
            return result, alert
        if fallback and allowed:
            answer = await self._fallback(spec, arguments, digest, now_ms, meter=meter, key=key)
            if answer is not None:
                return answer, None
        result, alert = await self._primary(
            spec, arguments, timeout_ms, meter, key, progress=progress
        )
        if result.status_code == OK:
            await self._keep(key, digest, StoredResult(result, now_ms))
        elif is_failure(result.status_code) and allowed:  # verification failures too
            answer = await self._fallback(spec, arguments, digest, now_ms, meter=meter, key=key)
            failed = result.model_copy(update={"error": f"{result.error}; no fallback answered"})
            result = answer or failed
        return result, alert

    async def _stored(self, call: ToolCall, spec: ToolSpec, digest: str) -> ToolResult | None:
        """The stored answer under the key; a 409 when another tool or other arguments used it."""
        stored = await self.store.get_result(call.idempotency_key)
        if stored is None:
            return None
        if stored.result.tool != spec.name or stored.digest != digest:
            other = "another tool" if stored.result.tool != spec.name else "other arguments"
            error = f"idempotency key {call.idempotency_key!r} was already used by {other}"
            return failure(spec.name, CONFLICT, error)
        return stored.result

    async def _keep(self, key: str, digest: str, stored: StoredResult) -> None:
        retention_ms = int(self.settings.tool_result_retention_s * 1000)
        await self.store.put_result(key, digest, stored, stored.at_ms - retention_ms)

    async def _check(self, call: ToolCall) -> ToolResult | tuple[ToolSpec, Any]:
        """The spec and the parsed arguments, or the 404/403/400 answer."""
        unnamed = tool_name_problem(call.tool)
        if unnamed is not None:  # never looked up: no spec can carry such a name
            return failure(call.tool, NOT_REGISTERED, unnamed)
        spec = await self.store.get_spec(call.tool)
        if spec is None:
            return failure(call.tool, NOT_REGISTERED, f"tool {call.tool!r} is not registered")
        refused = self.registry.runnable_problems(spec)
        if refused:
            return failure(spec.name, FORBIDDEN, refusal(spec, refused))
        problem, arguments = self._arguments(call.arguments_json)
        if problem is None:
            problem = schema_error(spec.input_schema or ANY_VALUE, arguments)
            problem = None if problem is None else f"arguments: {problem}"
        return (spec, arguments) if problem is None else failure(spec.name, BAD_ARGUMENTS, problem)

    def _arguments(self, text: str) -> tuple[str | None, Any]:
        """The parsed arguments, or why they are refused: too long, not JSON, too deep."""
        limit = self.settings.tool_max_arguments_bytes
        if len(text.encode()) > limit:
            return f"arguments are over {limit} bytes", None
        try:
            arguments = json.loads(text)
        except (ValueError, RecursionError) as exc:
            return f"arguments are not JSON: {exc}", None
        if json_depth(arguments) > self._depth:
            return f"arguments are nested deeper than {self._depth}", None
        return None, arguments

    async def _primary(
        self,
        spec: ToolSpec,
        arguments: Any,
        timeout_ms: int,
        meter: _Meter,
        key: str,
        *,
        progress: Progress | None = None,
    ) -> tuple[ToolResult, str | None]:
        timeout = spec.timeout_s if timeout_ms <= 0 else min(spec.timeout_s, timeout_ms / 1000)
        executor = self._executor(spec, "main")
        execution = meter.add(
            await executor.run("call", arguments, timeout, key, progress=progress)
        )
        if execution.offered is not None:
            await self._drifted(spec, execution.offered)
            stored = await self.store.get_spec(spec.name)
            return await self._unapproved(stored or spec, meter)
        if execution.ok:
            verifier = self._verifier(spec, "main", timeout)
            result, alert = await release(
                spec, execution, verifier, None, env=self._environ, max_depth=self._depth
            )
        else:
            result, alert = failure(spec.name, execution.status, execution.error), None
        ok = not is_failure(result.status_code)
        await self.store.record_call(spec.name, _wall_ms(), execution.latency_ms, ok)
        if result.status_code == VERIFICATION_FAILED:
            log.warning("tool %s: result discarded: %s", spec.name, result.error)
        return result, alert

    async def _drifted(self, spec: ToolSpec, offered: Any) -> None:
        """Record that an MCP tool's server offers ``offered`` instead of its pinned
        definition: the tool is unhealthy until approved. A tool awaiting approval already
        keeps its alert state (one alert however often the server changes it again); the
        newest offer is what ``tools approve`` shows."""
        if spec.mcp is None or not isinstance(offered, dict):
            return
        async with self._drift_lock:
            current = await self.store.get_spec(spec.name)
            if current is None or current.mcp is None or current.mcp.pin != spec.mcp.pin:
                return  # removed or approved meanwhile
            offered_pin = pin_of(offered)
            if current.mcp.offered_pin == offered_pin:
                return
            alerted = current.mcp.alerted and current.mcp.offered_pin is not None
            binding = current.mcp.model_copy(
                update={"offered": offered, "offered_pin": offered_pin, "alerted": alerted}
            )
            changed = current.model_copy(update={"mcp": binding})
            if not await self.store.replace_spec(current, changed):
                return  # approved or recorded by another writer meanwhile
        log.warning(
            "tool %s: its MCP server offers another definition (%s) than the approved %s; "
            "its fallback answers until `hermesbus tools approve %s`",
            spec.name, offered_pin[:19], spec.mcp.pin[:19], spec.name,
        )  # fmt: skip

    async def _unapproved(self, spec: ToolSpec, meter: _Meter) -> tuple[ToolResult, str | None]:
        """The 503 of a tool whose changed definition awaits approval, and the alert the
        first time (once per change, recorded in the store)."""
        binding = spec.mcp
        assert binding is not None  # noqa: S101 - only MCP tools drift
        error = (
            f"tool {spec.name!r}: its MCP server {binding.server.name} changed the tool's "
            f"definition ({binding.offered_pin}; approved {binding.pin}); it is not called "
            f"until `hermesbus tools approve {spec.name}`"
        )
        alert = None
        async with self._drift_lock:
            current = await self.store.get_spec(spec.name)
            if (
                current is not None
                and current.mcp is not None
                and current.mcp.offered_pin == binding.offered_pin
                and not current.mcp.alerted
            ):
                done = current.mcp.model_copy(update={"alerted": True})
                marked = current.model_copy(update={"mcp": done})
                if await self.store.replace_spec(current, marked):  # one writer alerts
                    alert, meter.drifted = error, True
        return failure(spec.name, UNAVAILABLE, error), alert

    @property
    def _depth(self) -> int:
        return self.settings.tool_max_json_depth

    async def _fallback(
        self, spec: ToolSpec, arguments: Any, digest: str, now_ms: int, *, meter: _Meter, key: str
    ) -> ToolResult | None:
        """The fallback's answer; None when it has none (no fresh cache, backup failed)."""
        fallback = spec.fallback
        if fallback is None or fallback.strategy == "none":
            return None
        if fallback.strategy == "mock":
            body = json.dumps(fallback.mock_result, ensure_ascii=False)
            return ToolResult(tool=spec.name, status_code=OK, result_json=body, fallback="mock")
        if fallback.strategy == "cache":
            return await self._cached(spec, digest, now_ms, fallback.stale_after_s or 0.0)
        backup = self._executor(spec, "backup")
        execution = meter.add(await backup.run("call", arguments, spec.timeout_s, key))
        if not execution.ok:
            log.warning("tool %s: backup failed: %s", spec.name, execution.error)
            return None
        verifier = self._verifier(spec, "backup", spec.timeout_s)
        result, _ = await release(
            spec, execution, verifier, "proxy", env=self._environ, max_depth=self._depth
        )
        return result if result.status_code == OK else None

    async def _cached(
        self, spec: ToolSpec, digest: str, now_ms: int, stale_after_s: float
    ) -> ToolResult | None:
        """The newest result for these arguments, unless older than ``stale_after_s`` or
        dated after ``now_ms`` (an entry from the future is not fresh, it is suspect)."""
        stored = await self.store.last_result(spec.name, digest)
        if stored is None or not 0 <= now_ms - stored.at_ms <= stale_after_s * 1000:
            return None
        since = stored.result.stale_since or from_epoch_ms(stored.at_ms)
        update = {"stale": True, "stale_since": since, "fallback": "cache"}
        return stored.result.model_copy(update=update)

    def _verifier(
        self, spec: ToolSpec, role: str, timeout_s: float
    ) -> Callable[[Any], Awaitable[None]]:
        """Runs the spec's verifier in a worker (python tools: the one that answered) under
        ``timeout_s``; raises VerificationError unless it returned True."""
        executor = self._executor(spec, role if spec.kind == "python" else "verify")

        async def run(value: Any) -> None:
            execution = await executor.run("verify", value, timeout_s)
            if not execution.ok:
                raise VerificationError(f"verifier: {spec.verifier} failed: {execution.error}")
            if execution.body != _VERIFIED:
                raise VerificationError(f"verifier: {spec.verifier} rejected the result")

        return run

    @contextlib.asynccontextmanager
    async def injected(
        self, tool: str, front: Callable[[Executor], Executor]
    ) -> AsyncIterator[None]:
        """Inside the block the tool's calls run through ``front(its executor)`` (``tools
        chaos``: a fault injected in front of the tool's own executor, in this service
        only); after it, through its own executor again."""
        spec = await self.store.get_spec(tool)
        if spec is None:
            raise ToolError(f"tool {tool!r} is not registered")
        key = (tool, "main")
        own = self._executor(spec, "main")
        placed = (spec, front(own))
        self._executors[key] = placed
        try:
            yield
        finally:
            if self._executors.get(key) is placed:
                self._executors[key] = (spec, own)
            else:  # the tool was registered anew meanwhile: its own executor is retired
                await own.close()

    def _executor(self, spec: ToolSpec, role: str) -> Executor:
        key = (spec.name, role)
        entry = self._executors.get(key)
        if entry is not None and (entry[0] is spec or entry[0] == spec):
            return entry[1]
        if entry is not None:  # re-registered elsewhere (the CLI): retire the old executor
            task = asyncio.get_running_loop().create_task(entry[1].close())
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)
        executor = self._new_executor(spec, role)
        self._executors[key] = (spec, executor)
        return executor

    def _new_executor(self, spec: ToolSpec, role: str) -> Executor:
        """``main`` and ``backup`` run the tool (python: and its verifier); ``verify`` is an
        http tool's verifier worker."""
        backup = spec.fallback.backup if spec.fallback else None
        target = (backup or spec.target) if role == "backup" else spec.target
        if spec.mcp is not None and role != "verify":
            cap = spec.max_result_bytes * self.settings.tool_response_factor
            return McpExecutor(
                spec,
                lambda: self.connection(spec),
                relist_s=self.settings.mcp_relist_s,
                max_bytes=cap,
            )
        if spec.kind == "http" and role != "verify":
            if self._client is None:
                raise ToolError("the tool service is not started (use async with ToolService)")
            cap = spec.max_result_bytes * self.settings.tool_response_factor
            return HttpExecutor(
                spec.name, target, spec.call_path, spec.health_path, self._client,
                hosts=self.settings.hosts, max_bytes=cap,
            )  # fmt: skip
        targets = {"verify": spec.verifier} if spec.verifier else {}
        if role != "verify":
            targets["call"] = target
        if role == "main" and spec.health:
            targets["probe"] = spec.health
        name = spec.name if role == "main" else f"{spec.name}({role})"
        secret = spec.signature.key_env if spec.signature else None
        env = worker_env(spec.env, secret, self._environ)
        spawn = self.settings.tool_spawn_timeout_s

        def worker(_: int) -> PythonWorker:
            return PythonWorker(name, targets, spec.memory_limit_mb, spawn, env)

        return WorkerPool(name, spec.workers, worker)

    def connection(self, spec: ToolSpec) -> McpConnection:
        """The shared session of an MCP tool's server (a new one when its server changed)."""
        if spec.mcp is None:
            raise ToolError(f"tool {spec.name!r} is not an MCP tool")
        server = spec.mcp.server
        connection = self._connections.get(server.name)
        if connection is not None and (connection.server, connection.env_names) == (
            server,
            spec.env,
        ):
            return connection
        if connection is not None:  # re-registered with another command or URL
            task = asyncio.get_running_loop().create_task(connection.close())
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)
        connection = self._new_connection(server, spec.env)
        self._connections[server.name] = connection
        return connection

    def _new_connection(self, server: McpServer, env_names: tuple[str, ...]) -> McpConnection:
        """A connection to ``server`` whose process (stdio) sees ``env_names``."""
        return McpConnection(
            server,
            env=server_env(env_names, self._environ),
            env_names=env_names,
            state=self.settings.mcp_state,
            hosts=self.settings.hosts,
            connect_timeout_s=self.settings.tool_spawn_timeout_s,
            ping_grace_s=self.settings.mcp_ping_grace_s,
        )

    # -- probes -------------------------------------------------------------------------

    async def probe_all(self, *, save: bool = True) -> dict[str, Probe]:
        """Run every registered tool's probe and store the answers (start, then ~every 10 s);
        ``save=False`` only returns them (a check must not change what a running bus reads)."""
        specs = await self.store.list_specs()
        probes = await asyncio.gather(*(self.probe(spec, save=save) for spec in specs))
        return {spec.name: probe for spec, probe in zip(specs, probes, strict=True)}

    async def probe(self, spec: ToolSpec, *, save: bool = True) -> Probe:
        if refused := self.registry.runnable_problems(spec):
            execution = Execution(FORBIDDEN, error=refusal(spec, refused))
        else:
            executor = self._executor(spec, "main")
            running = isinstance(executor, WorkerPool) and executor.pid is not None
            execution = await executor.run("probe", None, spec.timeout_s)
            if running and isinstance(executor, WorkerPool):  # not at start-up, not in a burst
                await executor.warm()
            if execution.offered is not None and save:
                await self._drifted(spec, execution.offered)
        probe = parse_probe(execution, _wall_ms(), spec.timeout_s)
        if probe.error:
            log.warning("tool %s: probe failed: %s", spec.name, probe.error)
        if save:
            await self.store.save_probe(spec.name, probe)
        return probe


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000

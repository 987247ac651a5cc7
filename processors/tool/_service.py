"""The tool processor's port: registry, executors, calls with fallbacks, probes, health.

``async with ToolService(store, settings) as tools`` starts the store, an HTTP client and
(lazily) one warm worker per python tool; ``ports = {"tools": tools}`` for the handler,
and ``tools.health_view`` (or ``tools`` itself) is the dispatcher's ``HealthView``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

import httpx

from hermesbus._types import EPOCH
from hermesbus.errors import ToolError
from hermesbus.lifecycle import Service
from hermesbus.payloads import ToolCall, ToolResult
from hermesbus.processors.protocol import (
    BAD_ARGUMENTS,
    NOT_REGISTERED,
    OK,
    VERIFICATION_FAILED,
    ToolHealth,
    is_failure,
)

from ._executor import Execution, Executor, HttpExecutor, PythonWorker
from ._health import RegistryHealth, parse_probe
from ._registry import ToolRegistry
from ._release import arguments_digest, failure, release
from ._settings import ToolSettings
from ._spec import ToolSpec
from ._store import Probe, StoredResult, ToolStore
from ._verify import resolve, schema_error

__all__ = ["CallReport", "ToolPort", "ToolService", "probe_all"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CallReport:
    """The answer to one call, an alert message when verification failed, and what it cost."""

    result: ToolResult
    alert: str | None = None
    elapsed_ms: float = 0.0
    external_calls: int = 0
    avg_latency_ms: float = 0.0


class ToolPort(Protocol):
    """What the handler needs (``ports["tools"]``)."""

    async def call(
        self, call: ToolCall, *, now: datetime, fallback: bool = False, timeout_ms: int = 0
    ) -> CallReport: ...


@dataclass(slots=True)
class _Meter:
    latencies: list[float] = field(default_factory=list)

    def add(self, execution: Execution) -> Execution:
        self.latencies.append(execution.latency_ms)
        return execution


def _millis(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(milliseconds=1)


class ToolService(Service):
    """Runs registered tools: validate, execute isolated, verify, cap, fall back, record."""

    def __init__(
        self, store: ToolStore, settings: ToolSettings | None = None, *, debug: bool | None = None
    ) -> None:
        self.store = store
        self.settings = settings or ToolSettings()
        self._client: httpx.AsyncClient | None = None
        self.registry = ToolRegistry(store, self.settings, debug=debug)
        self.health_view = RegistryHealth(store, window=self.settings.tool_health_window)
        self._executors: dict[tuple[str, str], tuple[ToolSpec, Executor]] = {}
        self._verifiers: dict[str, Callable[[Any], Any]] = {}
        self._retiring: set[asyncio.Task[None]] = set()
        self._started = False

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
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
        if isinstance(self.store, Service):
            await self.store.stop()

    async def register(self, spec: ToolSpec) -> ToolSpec:
        """Admit the tool (AdmissionError otherwise); its old workers are retired."""
        admitted = await self.registry.register(spec)
        for role in ("main", "backup"):
            entry = self._executors.pop((spec.name, role), None)
            if entry is not None:
                await entry[1].close()
        return admitted

    async def health(self, tool: str) -> ToolHealth | None:
        """:class:`~hermesbus.processors.protocol.HealthView` of the registered tools."""
        return await self.health_view.health(tool)

    def worker_pid(self, tool: str) -> int | None:
        """The pid of a python tool's live worker (None when none is running)."""
        entry = self._executors.get((tool, "main"))
        return entry[1].pid if entry is not None and isinstance(entry[1], PythonWorker) else None

    # -- calls --------------------------------------------------------------------------

    async def call(
        self, call: ToolCall, *, now: datetime, fallback: bool = False, timeout_ms: int = 0
    ) -> CallReport:
        """Answer one call; ``now`` is the envelope's time (the cache's clock)."""
        start = time.perf_counter()
        meter = _Meter()
        result, alert = await self._answer(call, _millis(now), fallback, timeout_ms, meter)
        elapsed = (time.perf_counter() - start) * 1000
        count = len(meter.latencies)
        average = sum(meter.latencies) / count if count else 0.0
        return CallReport(result, alert, elapsed, count, average)

    async def _answer(
        self, call: ToolCall, now_ms: int, fallback: bool, timeout_ms: int, meter: _Meter
    ) -> tuple[ToolResult, str | None]:
        checked = await self._check(call)
        if isinstance(checked, ToolResult):
            return checked, None
        spec, arguments = checked
        stored = await self.store.get_result(call.idempotency_key)
        if stored is not None:  # a redelivery or a retry of a call that already succeeded
            return stored.result, None
        digest = arguments_digest(arguments)
        strategy = spec.fallback.strategy if spec.fallback is not None else "none"
        allowed = call.fallback_allowed and strategy != "none"
        if fallback and allowed:
            answer = await self._fallback(spec, arguments, digest, now_ms, meter)
            if answer is not None:
                return answer, None
        result, alert = await self._primary(spec, arguments, timeout_ms, meter)
        if result.status_code == OK:
            await self.store.put_result(call.idempotency_key, digest, StoredResult(result, now_ms))
        elif is_failure(result.status_code) and alert is None and allowed:
            answer = await self._fallback(spec, arguments, digest, now_ms, meter)
            failed = result.model_copy(update={"error": f"{result.error}; no fallback answered"})
            result = answer or failed
        return result, alert

    async def _check(self, call: ToolCall) -> ToolResult | tuple[ToolSpec, Any]:
        """The spec and the parsed arguments, or the 404/400 answer."""
        spec = await self.store.get_spec(call.tool)
        if spec is None:
            return failure(call.tool, NOT_REGISTERED, f"tool {call.tool!r} is not registered")
        try:
            arguments = json.loads(call.arguments_json)
        except ValueError as exc:
            return failure(spec.name, BAD_ARGUMENTS, f"arguments are not JSON: {exc}")
        problem = schema_error(spec.input_schema or {}, arguments)
        if problem is not None:
            return failure(spec.name, BAD_ARGUMENTS, f"arguments: {problem}")
        return spec, arguments

    async def _primary(
        self, spec: ToolSpec, arguments: Any, timeout_ms: int, meter: _Meter
    ) -> tuple[ToolResult, str | None]:
        timeout = spec.timeout_s if timeout_ms <= 0 else min(spec.timeout_s, timeout_ms / 1000)
        execution = meter.add(await self._executor(spec, "main").run("call", arguments, timeout))
        if execution.ok:
            result, alert = release(spec, execution, self._verifier(spec), None)
        else:
            result, alert = failure(spec.name, execution.status, execution.error), None
        ok = not is_failure(result.status_code)
        await self.store.record_call(spec.name, _wall_ms(), execution.latency_ms, ok)
        if result.status_code == VERIFICATION_FAILED:
            log.warning("tool %s: result discarded: %s", spec.name, result.error)
        return result, alert

    async def _fallback(
        self, spec: ToolSpec, arguments: Any, digest: str, now_ms: int, meter: _Meter
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
        execution = meter.add(await backup.run("call", arguments, spec.timeout_s))
        if not execution.ok:
            log.warning("tool %s: backup failed: %s", spec.name, execution.error)
            return None
        result, _ = release(spec, execution, self._verifier(spec), "proxy")
        return result if result.status_code == OK else None

    async def _cached(
        self, spec: ToolSpec, digest: str, now_ms: int, stale_after_s: float
    ) -> ToolResult | None:
        stored = await self.store.last_result(spec.name, digest)
        if stored is None or now_ms - stored.at_ms > stale_after_s * 1000:
            return None
        since = stored.result.stale_since or EPOCH + timedelta(milliseconds=stored.at_ms)
        update = {"stale": True, "stale_since": since, "fallback": "cache"}
        return stored.result.model_copy(update=update)

    def _verifier(self, spec: ToolSpec) -> Callable[[Any], Any]:
        target = spec.verifier or ""
        if target not in self._verifiers:
            try:
                self._verifiers[target] = resolve(target)
            except ToolError as exc:
                message = str(exc)

                def refuse(_value: Any) -> bool:
                    raise ToolError(message)

                return refuse
        return self._verifiers[target]

    def _executor(self, spec: ToolSpec, role: str) -> Executor:
        key = (spec.name, role)
        entry = self._executors.get(key)
        if entry is not None and entry[0] == spec:
            return entry[1]
        if entry is not None:  # re-registered elsewhere (the CLI): retire the old executor
            task = asyncio.get_running_loop().create_task(entry[1].close())
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)
        executor = self._new_executor(spec, role)
        self._executors[key] = (spec, executor)
        return executor

    def _new_executor(self, spec: ToolSpec, role: str) -> Executor:
        backup = spec.fallback.backup if spec.fallback else None
        target = (backup or spec.target) if role == "backup" else spec.target
        if spec.kind == "http":
            if self._client is None:
                raise ToolError("the tool service is not started (use async with ToolService)")
            return HttpExecutor(spec.name, target, spec.call_path, spec.health_path, self._client)
        targets = {"call": target}
        if role == "main" and spec.health:
            targets["probe"] = spec.health
        name = spec.name if role == "main" else f"{spec.name}(backup)"
        return PythonWorker(name, targets, spec.memory_limit_mb, self.settings.tool_spawn_timeout_s)

    # -- probes -------------------------------------------------------------------------

    async def probe_all(self) -> dict[str, Probe]:
        """Run every registered tool's probe and store the answers (start, then ~every 10 s)."""
        specs = await self.store.list_specs()
        probes = await asyncio.gather(*(self.probe(spec) for spec in specs))
        return {spec.name: probe for spec, probe in zip(specs, probes, strict=True)}

    async def probe(self, spec: ToolSpec) -> Probe:
        execution = await self._executor(spec, "main").run("probe", None, spec.timeout_s)
        probe = parse_probe(execution, _wall_ms(), spec.timeout_s)
        if probe.error:
            log.warning("tool %s: probe failed: %s", spec.name, probe.error)
        await self.store.save_probe(spec.name, probe)
        return probe


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


async def probe_all(tools: ToolService) -> dict[str, Probe]:
    """Probe every registered tool once (what the stack runs at start and every ~10 s)."""
    return await tools.probe_all()

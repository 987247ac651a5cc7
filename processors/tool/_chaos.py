"""Fallbacks proven before go-live: a tool called through injected faults.

:func:`chaos` calls a tool with its sample arguments once cleanly (the baseline: it must
answer itself, and a ``cache`` fallback then has an answer to give), then once per
fault, and after each fault again until the tool answers itself (it recovered). A fault
passes when its call was answered by the spec's fallback, saying so (``fallback`` set; a
cached answer marked stale), the fault that should alert did, and the tool recovered.

Faults, and how each is injected (``ToolService.injected`` puts an executor in front of
the tool's own, for this service only):

* ``latency``: the answer comes after the call's deadline. A tool with a process here (a
  python worker, a stdio MCP server) is stopped (``SIGSTOP``) past the call's budget and
  then resumed: the executor's own timeout answers; elsewhere the answer is held back in
  front of the executor until past the deadline.
* ``error``: the tool answers ``503``, in front of the executor.
* ``killed``: the tool's process is killed (``SIGKILL``, its process group) while the
  call waits for it (it was stopped first, so the call is surely under way). Not
  applicable to a tool with no process here (HTTP, MCP over HTTP).
* ``hang``: the tool never answers. Its process is stopped and left so: the executor's
  timeout and its clean-up (a worker killed; an MCP server that fails its ping killed)
  are what runs; elsewhere the call is held in front of the executor.
* ``unverified``: the tool's real answer, cut in half (as a damaged transfer would leave
  it, with a stray byte so that it is never JSON), must fail verification (signature,
  JSON, schema or verifier) and raise an alert.

Each faulted call must also have failed the way its fault makes it fail (past its
deadline; not by a deadline but by the kill; ...), and raised no alert but the one an
unverified answer raises.

The faulted calls that wait out a deadline (``latency``, ``hang``) get the budget
(``budget_s``, at most the tool's timeout), so a run takes seconds, not timeouts; every
other call gets the tool's own timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from hermesbus.contract.payloads import ToolCall, ToolResult
from hermesbus.processors.protocol import OK, TIMEOUT, UNAVAILABLE
from hermesbus.processors.tool._executor import Execution, Executor, Progress
from hermesbus.processors.tool._mcp import McpUnavailable
from hermesbus.processors.tool._service import CallReport, ToolService
from hermesbus.processors.tool._spec import ToolSpec

__all__ = ["FAULTS", "ChaosReport", "FaultOutcome", "chaos"]

FAULTS: Final = ("latency", "error", "killed", "hang", "unverified")
_PAST_S: Final = 0.5
"""How long past the call's budget a ``latency`` fault holds the answer back."""
_KILL_AFTER_S: Final = (0.3, 1.0, 2.0)
"""How long after the call starts its stopped process is killed, tried in turn until the
call was surely under way (it did not answer itself)."""
_RECOVER_EVERY_S: Final = 0.5


@dataclass(frozen=True, slots=True)
class FaultOutcome:
    """What one fault did: how it was injected, what the faulted call answered, whether
    the tool answered itself again after it, and what is wrong (nothing: passed)."""

    fault: str
    how: str
    result: ToolResult | None = None
    alerted: bool = False
    recovered: bool = False
    problems: tuple[str, ...] = ()
    applies: bool = True
    primary: str = "-"
    """What the tool's executor answered the faulted call (status: error), before any
    fallback."""

    @property
    def passed(self) -> bool:
        return self.applies and not self.problems


@dataclass(frozen=True, slots=True)
class ChaosReport:
    """A tool's chaos run: ``baseline`` is None when its clean call answered (else why not;
    then no fault was injected)."""

    tool: str
    strategy: str
    baseline: str | None
    outcomes: tuple[FaultOutcome, ...] = ()

    @property
    def passed(self) -> bool:
        """The tool answered cleanly, at least one fault applied, and each that did passed."""
        applied = [outcome for outcome in self.outcomes if outcome.applies]
        return self.baseline is None and bool(applied) and all(o.passed for o in applied)


async def chaos(
    tools: ToolService,
    name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    faults: tuple[str, ...] = FAULTS,
    budget_s: float = 1.0,
    recover_s: float = 60.0,
) -> ChaosReport:
    """Run the tool ``name`` of ``tools`` through ``faults`` with ``arguments`` (default:
    its spec's ``sample_arguments``). ``tools`` should be a service of its own over a
    scratch store: the faults' failures count in the tool's health there."""
    unknown = [fault for fault in faults if fault not in FAULTS]
    if not faults:
        raise ValueError(f"no fault to inject: the faults are {', '.join(FAULTS)}")
    if unknown:
        raise ValueError(f"unknown faults {unknown}: the faults are {', '.join(FAULTS)}")
    spec = await tools.store.get_spec(name)
    if spec is None:
        raise LookupError(f"tool {name!r} is not registered")
    strategy = spec.fallback.strategy if spec.fallback is not None else "none"
    given = arguments if arguments is not None else spec.sample_arguments
    if given is None:
        raise ValueError(
            f"tool {name!r} has no sample_arguments: give them in its spec, or the arguments "
            "to call it with"
        )
    run = _Run(tools, spec, dict(given), min(budget_s, spec.timeout_s), recover_s)
    baseline = await run.call()
    if baseline.result.status_code != OK or baseline.result.fallback is not None:
        said = baseline.result.error or f"answered by its fallback {baseline.result.fallback}"
        why = f"the tool does not answer without faults ({baseline.result.status_code}: {said})"
        return ChaosReport(name, strategy, why)
    outcomes = [await run.fault(fault) for fault in faults]
    return ChaosReport(name, strategy, None, tuple(outcomes))


class _Run:
    def __init__(
        self,
        tools: ToolService,
        spec: ToolSpec,
        arguments: dict[str, Any],
        budget_s: float,
        recover_s: float,
    ) -> None:
        self.tools, self.spec, self.arguments = tools, spec, arguments
        self.budget_s, self.recover_s = budget_s, recover_s
        self.strategy = spec.fallback.strategy if spec.fallback is not None else "none"

    async def fault(self, fault: str) -> FaultOutcome:
        try:
            pids = await self._processes()
        except McpUnavailable as exc:
            return FaultOutcome(fault, "not injected", problems=(f"its server is away: {exc}",))
        watch: _Front
        if fault == "error":
            how, watch = "the tool answers 503 (in front of its executor)", _Answers503()
            report = await self.call(budget=True, front=watch)
        elif fault == "unverified":
            how, watch = "the tool's answer cut in half (in front of its executor)", _Cut()
            report = await self.call(front=watch)  # a real answer, in the tool's own time
        elif not pids and fault == "killed":
            why = "no process of its own here to kill (an HTTP tool or MCP server)"
            return FaultOutcome(fault, why, applies=False)
        elif not pids:
            held = "until past its deadline" if fault == "latency" else "for good"
            how = f"the answer held back {held} (in front of its executor: no process here)"
            watch = _Held(self.spec.name)
            report = await self.call(budget=True, front=watch)
        elif fault == "killed":
            watch = _Front()
            how, report = await self._killed(watch)
        else:
            watch = _Front()
            resumed = self.budget_s + _PAST_S if fault == "latency" else None
            how = (
                f"its process stopped for {resumed:g} s, past the call's {self.budget_s:g} s"
                if resumed is not None
                else "its process stopped for good"
            )
            report = await self._stopped(pids, resumed, watch)
        return await self._outcome(fault, how, report, watch.seen)

    async def _processes(self) -> tuple[int, ...]:
        """The pids of the processes the tool's next call may run in (started now: every
        worker of a python tool's pool; a stdio MCP server); none when it has none here."""
        if self.spec.kind == "python":
            pool = self.tools.pool(self.spec.name)
            if pool is None:  # no call made yet (the baseline makes one)
                return ()
            await pool.warm()
            return pool.pids
        if self.spec.mcp is not None and self.spec.mcp.server.transport == "stdio":
            connection = self.tools.connection(self.spec)
            await connection.live()
            return () if connection.pid is None else (connection.pid,)
        return ()

    async def _stopped(
        self, pids: tuple[int, ...], resume_after_s: float | None, watch: _Front
    ) -> CallReport:
        """The call under the budget, its processes stopped first: resumed after
        ``resume_after_s``, or left stopped (``hang``) until the executor's clean-up is
        done (a worker killed at once; an MCP server once its ping had its grace), then
        resumed, so that a worker the call did not use is not left stopped."""
        _signal(pids, signal.SIGSTOP)
        call = asyncio.ensure_future(self.call(budget=True, front=watch))
        try:
            if resume_after_s is not None:
                await asyncio.sleep(resume_after_s)
                _signal(pids, signal.SIGCONT)
            report = await call
            if resume_after_s is None and self.spec.mcp is not None:
                await self.tools.connection(self.spec).settled(self.recover_s)
        finally:  # never leave a process stopped behind
            _signal(pids, signal.SIGCONT)
            call.cancel()
        return report

    async def _killed(self, watch: _Front) -> tuple[str, CallReport]:
        """The call in the tool's own time, its processes stopped first and killed while it
        waits on them; tried again later into the call when it did not wait on them yet."""
        report: CallReport | None = None
        after = 0.0
        for delay in _KILL_AFTER_S:
            after = min(delay, self.spec.timeout_s / 4)  # well before its own deadline
            pids = await self._processes()
            _signal(pids, signal.SIGSTOP)
            call = asyncio.ensure_future(self.call(front=watch))
            try:
                await asyncio.sleep(after)
            finally:  # killed whatever happens: never left stopped
                _signal(pids, signal.SIGKILL)
            report = await call
            if not _itself(report.result):
                break  # the call was under way: the kill reached it
            await self._recovered()
        assert report is not None  # noqa: S101 - at least one attempt
        return f"its process stopped, then killed {after:g} s into the call", report

    async def call(self, *, budget: bool = False, front: _Front | None = None) -> CallReport:
        """One call with the sample arguments (a new idempotency key each time: never a
        replay); ``budget``: under the budget, not the tool's own timeout; ``front``: in
        front of the tool's executor."""
        key = f"chaos-{self.spec.name}-{uuid.uuid4().hex}"
        request = ToolCall(
            tool=self.spec.name,
            arguments_json=json.dumps(self.arguments, ensure_ascii=False),
            idempotency_key=key,
        )
        timeout_ms = int(self.budget_s * 1000) if budget else 0
        if front is None:
            return await self.tools.call(request, now=datetime.now(UTC), timeout_ms=timeout_ms)
        async with self.tools.injected(self.spec.name, front.wrap):
            return await self.tools.call(request, now=datetime.now(UTC), timeout_ms=timeout_ms)

    async def _outcome(
        self, fault: str, how: str, report: CallReport, seen: Execution | None
    ) -> FaultOutcome:
        result = report.result
        problems = []
        cause = _cause_problem(fault, seen)
        if _itself(result):
            problems.append("the fault did not reach the call: the tool answered itself")
        elif cause is not None:
            problems.append(cause)
        elif result.status_code != OK or result.fallback is None:
            problems.append(
                f"no fallback answered ({result.status_code}: {result.error or 'no error'})"
            )
        elif result.fallback != self.strategy:
            problems.append(f"answered by {result.fallback}, but its fallback is {self.strategy}")
        elif self.strategy == "cache" and not result.stale:
            problems.append("the cached answer is not marked stale")
        if fault == "unverified" and report.alert is None:
            problems.append("the answer that failed verification raised no alert")
        elif fault != "unverified" and report.alert is not None:
            problems.append(f"an alert was raised: {report.alert}")
        recovered, why = await self._recovered()
        if not recovered:
            within = f"within {self.recover_s:g} s"
            problems.append(f"the tool did not answer itself again {within} ({why})")
        primary = (
            "-" if seen is None else f"{seen.status}" + (f": {seen.error}" if seen.error else "")
        )
        return FaultOutcome(
            fault, how, result, report.alert is not None, recovered, tuple(problems),
            primary=primary,
        )  # fmt: skip

    async def _recovered(self) -> tuple[bool, str]:
        """Whether the tool answers itself again (a worker restarted, a session reopened)
        within ``recover_s``; else the last answer's error."""
        deadline = time.monotonic() + self.recover_s
        while True:
            report = await self.call()
            if _itself(report.result):
                return True, ""
            why = f"{report.result.status_code}: {report.result.error or report.result.fallback}"
            if time.monotonic() >= deadline:
                return False, why
            await asyncio.sleep(_RECOVER_EVERY_S)


def _cause_problem(fault: str, seen: Execution | None) -> str | None:
    """Why the executor's answer is not the one the fault should cause (None: it is)."""
    if seen is None:
        return "the fault did not reach the tool's executor"
    said = f"{seen.status}: {seen.error or 'no error'}"
    if fault in ("latency", "hang") and seen.status != TIMEOUT:
        return f"the call failed otherwise than past its deadline ({said})"
    if fault == "killed" and (seen.ok or "timed out" in seen.error):
        return f"the call did not fail by its process being killed ({said})"
    if fault == "unverified" and not seen.ok:
        return f"the tool did not answer, so nothing was cut ({said})"
    return None


def _itself(result: ToolResult) -> bool:
    """The tool itself answered (a verified 200 of its own, no fallback)."""
    return result.status_code == OK and result.fallback is None


def _signal(pids: tuple[int, ...], signum: signal.Signals) -> None:
    """Signal each process group (a worker or a server runs in one of its own); one that
    is gone already is fine."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signum)


class _Front:
    """An executor in front of the tool's own: only ``call`` runs through :meth:`_call`."""

    def __init__(self) -> None:
        self.real: Executor | None = None
        self.seen: Execution | None = None
        """What the executor (or this front in its place) answered the last call."""

    def wrap(self, real: Executor) -> Executor:
        self.real = real
        return self

    async def run(
        self,
        role: str,
        arguments: Any,
        timeout_s: float,
        key: str = "",
        *,
        progress: Progress | None = None,
    ) -> Execution:
        assert self.real is not None  # noqa: S101 - wrapped before use
        if role != "call":
            return await self.real.run(role, arguments, timeout_s, key, progress=progress)
        self.seen = await self._call(self.real, arguments, timeout_s, key, progress)
        return self.seen

    async def _call(
        self,
        real: Executor,
        arguments: Any,
        timeout_s: float,
        key: str,
        progress: Progress | None,
    ) -> Execution:
        return await real.run("call", arguments, timeout_s, key, progress=progress)

    async def close(self) -> None:
        return None  # the real executor belongs to the service


class _Answers503(_Front):
    async def _call(
        self, real: Executor, arguments: Any, timeout_s: float, key: str, progress: Progress | None
    ) -> Execution:
        return Execution(UNAVAILABLE, error="injected: the tool answered 503 Service Unavailable")


class _Cut(_Front):
    async def _call(
        self, real: Executor, arguments: Any, timeout_s: float, key: str, progress: Progress | None
    ) -> Execution:
        execution = await real.run("call", arguments, timeout_s, key, progress=progress)
        if not execution.ok:
            return execution
        cut = execution.body[: len(execution.body) // 2] + b"\x00"  # never JSON, whatever it was
        return dataclasses.replace(execution, body=cut)


class _Held(_Front):
    """No answer within the deadline (late or never: the caller cannot tell them apart),
    so the call ends at its deadline as a 504, the tool's executor never reached."""

    def __init__(self, tool: str) -> None:
        super().__init__()
        self._tool = tool

    async def _call(
        self, real: Executor, arguments: Any, timeout_s: float, key: str, progress: Progress | None
    ) -> Execution:
        await asyncio.sleep(timeout_s)  # what comes later (or never) is past the deadline
        return Execution(TIMEOUT, error=f"{self._tool} timed out after {timeout_s:g} s")

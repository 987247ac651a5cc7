"""Ports that answer from a recording instead of live tools and live health.

For shadow replay (``hermesbus replay --shadow``) and redrive, where no tool may run and
nothing may be asked of the world:

* :class:`RecordedTools` (a ``ToolPort``) and :class:`RecordedHealth` (a ``HealthView``):
  answer what the log says was answered for the envelope being replayed, and
  :class:`RecordedAccess` decides who may call what as the dispatcher decided then;
  :class:`RecordedBudgets` gives the conversation the cycle budget it used then. Before each
  envelope, :meth:`cue` them with what the processor emitted for it then; a call or a
  health question the recording has no answer for gets a clear "not recorded" answer,
  which the replay then shows as a divergence.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from hermesbus.contract.envelope import Envelope
from hermesbus.contract.payloads import (
    ErrorReport,
    MemoryWrite,
    StateSnapshot,
    ToolCall,
    ToolResult,
)
from hermesbus.processors.flow import EXPENSE_SPEC
from hermesbus.processors.protocol import (
    ACCESS,
    ADMIT,
    ADMITTED,
    ALERTS,
    BUSY_BEHIND,
    FLOW_SNAPSHOT,
    REFUSALS,
    Admission,
    ToolHealth,
    component_of,
    tool_at,
)
from hermesbus.processors.tool import CallReport, Progress

if TYPE_CHECKING:
    from hermesbus.replay.shadow import Recording

__all__ = [
    "ArgumentTools",
    "RecordedAccess",
    "RecordedBudgets",
    "RecordedHealth",
    "RecordedTools",
    "backlogged_of",
    "health_of",
    "without_flow_version",
]

_NOT_RECORDED = 599
"""The status of a call the recording has no answer for (no real tool answers 599)."""


class RecordedTools:
    """The tool processor's port in a replay: each call answers the ``ToolResult`` the
    tool processor emitted for the envelope being replayed (and its alert, if any)."""

    def __init__(self) -> None:
        self._results: dict[str, ToolResult] = {}
        self._alerts: dict[str, str] = {}

    def cue(self, recorded: Iterable[Envelope]) -> None:
        """What the tool processor emitted then for the envelope about to be replayed."""
        self._results.clear()
        self._alerts.clear()
        for envelope in recorded:
            body = envelope.payload.body
            if isinstance(body, ToolResult):
                self._results[body.tool] = body
            elif isinstance(body, ErrorReport) and envelope.target == ALERTS:
                self._alerts[body.component] = body.message

    async def call(
        self,
        call: ToolCall,
        *,
        now: datetime,
        fallback: bool = False,
        timeout_ms: int = 0,
        progress: Progress | None = None,
    ) -> CallReport:
        result = self._results.get(call.tool)
        if result is None:
            message = f"no recorded result of {call.tool} for this envelope: replay calls no tool"
            return CallReport(ToolResult(tool=call.tool, status_code=_NOT_RECORDED, error=message))
        return CallReport(result, alert=self._alerts.get(tool_at(call.tool)))


class RecordedHealth:
    """The dispatcher's ``HealthView`` and ``BacklogView`` in a replay: each tool is as
    healthy as the dispatcher found it then (the ``health`` it wrote on the call it
    dispatched), and records waited for what a round the dispatcher failed as ``busy``
    says they waited for."""

    def __init__(self) -> None:
        self._health: dict[str, ToolHealth] = {}
        self._backlogs: dict[str, int] = {}

    def cue(self, recorded: Iterable[Envelope]) -> None:
        """What the dispatcher emitted then for the envelope about to be replayed."""
        self._health.clear()
        self._backlogs.clear()
        for envelope in recorded:
            health = health_of(envelope)
            if health is not None:
                self._health[health.tool] = health
            for component in backlogged_of(envelope):
                self._backlogs[component] = 1

    async def health(self, tool: str) -> ToolHealth | None:
        return self._health.get(tool)

    async def backlog(self, component: str, within_ms: int = 0) -> int:
        return self._backlogs.get(component, 0)


class RecordedAccess:
    """The dispatcher's access port in a replay: each call is admitted or refused as the
    dispatcher decided for the envelope being replayed (its dispatched calls carry
    ``context["access"]``, its refusal the code and the sentence); a tool it decided
    nothing about has no rules (every user, without limit), as then."""

    def __init__(self) -> None:
        self._decided: dict[str, Admission] = {}

    def cue(self, recorded: Iterable[Envelope]) -> None:
        self._decided = {}
        for envelope in recorded:
            body, context = envelope.payload.body, envelope.payload.context
            decided = context.get(ACCESS)
            if isinstance(body, ToolCall) and decided == ADMITTED:
                self._decided[body.tool] = Admission(checked=True)
            elif isinstance(body, ErrorReport) and decided in REFUSALS:
                tool = context.get("tool")
                if isinstance(tool, str) and component_of(envelope.target) != "alerts":
                    self._decided[tool] = Admission(str(decided), body.message, checked=True)

    async def admit(
        self,
        tool: str,
        user: str,
        roles: frozenset[tuple[str, str]],
        at_ms: int,
        key: str,
        *,
        count: bool = True,
    ) -> Admission:
        return self._decided.get(tool, ADMIT)


class RecordedBudgets:
    """The conversation's ``budgets`` port in a replay: the ``timeout_ms`` its recorded
    calls carried for the envelope being replayed, so a log made with another
    ``HERMES_CONVERSATION_BUDGET_SCALE`` replays without diverging; the state's own
    budget where it sent no call then."""

    def __init__(self) -> None:
        self._timeout_ms: int | None = None

    def cue(self, recorded: Iterable[Envelope]) -> None:
        """What the conversation emitted then for the envelope about to be replayed."""
        calls = (e for e in recorded if isinstance(e.payload.body, ToolCall))
        self._timeout_ms = next((e.metadata.timeout_ms for e in calls), None)

    def timeout_ms(self, state: str, base_ms: int | None = None) -> int:
        if self._timeout_ms is not None:
            return self._timeout_ms
        return base_ms if base_ms is not None else EXPENSE_SPEC.budget_of(state)


def health_of(dispatched: Envelope) -> ToolHealth | None:
    """The tool health that makes the dispatcher decide as it did on ``dispatched`` (a call
    it sent to ``tool:<name>``, whose context says ``health`` and ``health_latency_ms``, or
    a round it failed as ``busy``: that tool had calls queued); None for any other envelope,
    or when the dispatcher did not know the tool's health."""
    body = dispatched.payload.body
    context = dispatched.payload.context
    verdict = context.get("health")
    if isinstance(body, ErrorReport):
        return _busy_tool(body, context.get(BUSY_BEHIND))
    if not isinstance(body, ToolCall) or component_of(dispatched.target) != "tool":
        return None
    if verdict not in ("ok", "slow", "unhealthy"):
        return None
    latency = context.get("health_latency_ms")
    latency_ms = float(latency) if isinstance(latency, int | float) else 0.0
    if verdict == "unhealthy":
        alert = context.get("health_alert")
        return ToolHealth(
            body.tool,
            latency_ms=latency_ms,
            success_rate=0.0,
            alert=alert if isinstance(alert, str) else "",
        )
    if verdict == "slow":  # healthy and over its slow threshold, whatever that was then
        return ToolHealth(
            body.tool,
            latency_ms,
            1.0,
            slow_after_ms=latency_ms - 1.0,
            unhealthy_after_ms=latency_ms + 1.0,
        )
    return ToolHealth(
        body.tool,
        latency_ms,
        1.0,
        slow_after_ms=max(latency_ms, 1_000.0),
        unhealthy_after_ms=max(latency_ms, 2_000.0),
    )


def _busy_tool(report: ErrorReport, behind: object) -> ToolHealth | None:
    """A tool with calls queued at its workers, if ``report`` failed a round as ``busy``
    naming a tool that its context lists as backlogged (or, written before such lists
    were, naming a tool at all: the tool's queue was all it could mean)."""
    kind, _, tool = report.component.partition(":")
    if report.code != "busy" or kind != "tool":
        return None
    if behind is None or (isinstance(behind, list) and report.component in behind):
        return ToolHealth(tool, 0.0, 1.0, queued=1)
    return None


def backlogged_of(dispatched: Envelope) -> list[str]:
    """The components records waited for when the dispatcher emitted ``dispatched``: those
    a round it failed as ``busy`` names in its context (:data:`BUSY_BEHIND`); none for
    any other envelope."""
    body = dispatched.payload.body
    if not isinstance(body, ErrorReport) or body.code != "busy":
        return []
    behind = dispatched.payload.context.get(BUSY_BEHIND)
    return [c for c in behind if isinstance(c, str)] if isinstance(behind, list) else []


class ArgumentTools:
    """A ``ToolPort`` for a redrive: each call answers what the tool answered then for the
    same tool and arguments (the latest such answer); a call the recording never saw gets
    a "not recorded" answer (599), so a fork that asks something new says so."""

    def __init__(self, answers: Mapping[tuple[str, str], ToolResult]) -> None:
        self._answers = dict(answers)
        self.missed: list[ToolCall] = []

    @classmethod
    def of(cls, recording: Recording) -> ArgumentTools:
        """The answers of every tool call in ``recording`` (what the tool processor emitted)."""
        answers: dict[tuple[str, str], ToolResult] = {}
        for hop in recording.hops:
            call = hop.envelope.payload.body
            if not isinstance(call, ToolCall) or component_of(hop.envelope.target) != "tool":
                continue
            for out in recording.outputs(hop.envelope.message_id):
                body = out.envelope.payload.body
                if isinstance(body, ToolResult):
                    answers[call.tool, call.arguments_json] = body
        return cls(answers)

    async def call(
        self,
        call: ToolCall,
        *,
        now: datetime,
        fallback: bool = False,
        timeout_ms: int = 0,
        progress: Progress | None = None,
    ) -> CallReport:
        result = self._answers.get((call.tool, call.arguments_json))
        if result is None:
            self.missed.append(call)
            message = (
                f"{call.tool} was never called with these arguments in the recording: a "
                "redrive in recorded mode runs no tool (--live-tools runs them)"
            )
            return CallReport(ToolResult(tool=call.tool, status_code=_NOT_RECORDED, error=message))
        return CallReport(result)


def without_flow_version(envelope: Envelope) -> Envelope:
    """``envelope`` with no flow version in its snapshots, nor in a finished session's
    memory snapshot: a replay against another version of a flow compares what the flow
    does, not which version it is."""
    update: dict[str, Any] = {}
    if envelope.snapshot is not None and envelope.snapshot.flow_version is not None:
        update["snapshot"] = envelope.snapshot.model_copy(update={"flow_version": None})
    body = envelope.payload.body
    if isinstance(body, StateSnapshot) and body.snapshot.flow_version is not None:
        snapshot = body.snapshot.model_copy(update={"flow_version": None})
        update["payload"] = envelope.payload.model_copy(
            update={"body": body.model_copy(update={"snapshot": snapshot})}
        )
    elif isinstance(body, MemoryWrite) and body.key.startswith(FLOW_SNAPSHOT):
        value = json.loads(body.value_json)
        if isinstance(value, dict):
            value.pop("version", None)
            kept = body.model_copy(update={"value_json": json.dumps(value, sort_keys=True)})
            update["payload"] = envelope.payload.model_copy(update={"body": kept})
    return envelope.model_copy(update=update) if update else envelope

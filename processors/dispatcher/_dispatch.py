"""What the dispatcher does to a cycle: send a call, retry it, answer once, or fail fast.

The call-order rules: a call leaves only after the cycle's memory context (memory first); the
requester gets ONE answer per round — every result in call order, or one error report
that names the failing component, its code and advice, after which the round's pending
calls are cancelled and their late results dropped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

from hermesbus.contract.payloads import (
    ContextValue,
    ErrorReport,
    MemoryQuery,
    Reply,
    ToolCall,
    ToolResults,
)
from hermesbus.errors import StoreError
from hermesbus.processors.dispatcher._emit import Effects, diagnostics
from hermesbus.processors.dispatcher._health import bilingual, choose
from hermesbus.processors.dispatcher._state import CallStatus, Cycle, CycleStatus
from hermesbus.processors.protocol import (
    ACCESS,
    CYCLE,
    FALLBACK,
    MEMORY_CONTEXT,
    TASK_QUERY_CONTEXT,
    TIMEOUT,
    TOOLS,
    UNAVAILABLE,
    USER,
    VERIFICATION_FAILED,
    HealthView,
    result_confidence,
    tool_at,
)

__all__ = [
    "RETRYABLE",
    "RETRY_LATER",
    "answer",
    "cycle_context",
    "deadline_purpose",
    "dispatch",
    "fail",
    "query_memory",
    "retry_purpose",
    "schedule_retry",
    "timer_data",
]

RETRYABLE: Final = frozenset({500, UNAVAILABLE, TIMEOUT})
"""Transient failures worth another attempt. A 502 (verification failed) is not: a retry
re-runs the tool (e.g. a real submit) for a result that fails again; neither is any other
5xx (501, 505, 507 out of memory ...), which the same call will meet again."""

RETRY_LATER: Final = bilingual("稍后重试或使用降级数据", "retry later or use fallback data")
_CHECK_TOOL: Final = bilingual("工具结果未通过校验，请联系管理员", "result failed verification")


def deadline_purpose(cid: str) -> str:
    return f"cycle:{cid}"


def retry_purpose(cid: str, tool: str) -> str:
    return f"retry:{cid}:{tool}"


def cycle_context(cid: str, cycle: Cycle) -> dict[str, ContextValue]:
    return {CYCLE: cid, TOOLS: list(cycle.tools), "round": cycle.round}


def query_memory(
    fx: Effects, cid: str, cycle: Cycle, call_context: dict[str, ContextValue]
) -> None:
    """The round's one query_context to memory, before any of its calls leaves."""
    symbols, prefs = call_context.get("symbols"), call_context.get("preferences")
    user = fx.source.user_id
    query = MemoryQuery(
        symbols=tuple(symbols) if isinstance(symbols, list) else (),
        preferences=tuple(prefs) if isinstance(prefs, list) else (),
        entity=f"user:{user}" if user else None,
    )
    context = cycle_context(cid, cycle)
    diag = diagnostics(len(cycle.tools))
    fx.send(MEMORY_CONTEXT, query, task=TASK_QUERY_CONTEXT, context=context, diag=diag)


async def dispatch(fx: Effects, cid: str, cycle: Cycle, tool: str, health: HealthView) -> None:
    """Send ``tool``'s call with the time left of the cycle, as live health advises. The
    time memory took is not in the envelopes' times (it answers with its query's time), so
    it is taken off here: a tool is never given time the cycle no longer has."""
    call = cycle.calls[tool]
    left = (cycle.deadline_ms or 0) - fx.now_ms - max(0, cycle.memory_ms)
    if left <= 0:
        fail(fx, cid, cycle, component=tool_at(tool), code="timeout", message=_late(cid, cycle))
        return
    envelope = call.envelope
    body = envelope.payload.body
    if not isinstance(body, ToolCall):
        raise StoreError(
            f"cycle {cid!r}: the saved call of {tool!r} is not a ToolCall", retriable=False
        )
    choice = choose(tool, await health.health(tool), body.fallback_allowed)
    if choice.notice and tool not in cycle.notified:
        cycle.notified.append(tool)
        cycle.notices.append(choice.notice)
        reply = Reply(text=choice.notice, degraded=True)
        fx.send(USER, reply, task=cycle.task, context=cycle_context(cid, cycle))
    context: dict[str, ContextValue] = {
        **envelope.payload.context,
        FALLBACK: choice.fallback,
        "health": choice.verdict.value,
        "round": cycle.round,
    }
    if choice.latency_ms is not None:
        context["health_latency_ms"] = choice.latency_ms
    if choice.alert:
        context["health_alert"] = choice.alert  # a replay says the same notice
    if call.access:
        context[ACCESS] = call.access
    metadata = envelope.metadata.model_copy(update={"timeout_ms": left, "attempt": call.attempt})
    diag = diagnostics(len(cycle.tools), confidence=0.5 if choice.fallback else 1.0)
    fx.send(
        tool_at(tool),
        body,
        task=envelope.payload.task,
        context=context,
        causation_id=envelope.message_id,
        metadata=metadata,
        snapshot=envelope.snapshot,
        diag=diag,
    )
    call.status, call.health = CallStatus.SENT, choice.verdict.value
    call.expected_ms = choice.latency_ms


def _late(cid: str, cycle: Cycle) -> str:
    return f"cycle {cid!r} ({cycle.task}) has no time left of its budget"


def schedule_retry(fx: Effects, cid: str, cycle: Cycle, tool: str, status_code: int) -> bool:
    """Retry a transient failure (:data:`RETRYABLE`) after ``backoff_ms * 2**(attempt-1)``
    if attempts and time are left; False means fail fast now."""
    if status_code not in RETRYABLE:
        return False
    call = cycle.calls[tool]
    policy = call.envelope.metadata.retry_policy
    backoff = policy.backoff_ms * 2 ** (call.attempt - 1)
    late = max(0, cycle.memory_ms)  # the envelopes' times do not hold memory's time
    if call.attempt >= policy.max_attempts or fx.now_ms + backoff + late >= (
        cycle.deadline_ms or 0
    ):
        return False
    data = {CYCLE: cid, "tool": tool, "round": cycle.round, "attempt": call.attempt + 1}
    fx.arm(backoff, retry_purpose(cid, tool), data)
    call.status = CallStatus.RETRYING
    return True


def _advice(code: str) -> tuple[str, bool]:
    if code == str(VERIFICATION_FAILED):
        return _CHECK_TOOL, False
    return RETRY_LATER, code == "timeout" or code in {str(status) for status in RETRYABLE}


def fail(
    fx: Effects,
    cid: str,
    cycle: Cycle,
    *,
    component: str,
    code: str,
    message: str,
    advice: str | None = None,
    retryable: bool | None = None,
    context: Mapping[str, ContextValue] | None = None,
) -> None:
    """Fail fast: cancel the round's pending calls and timers, tell the requester once
    (``context``: more keys of the report's context than the cycle's)."""
    default_advice, default_retryable = _advice(code)
    for tool, call in cycle.calls.items():
        if call.status is CallStatus.RETRYING:
            fx.cancel(retry_purpose(cid, tool))
    fx.cancel(deadline_purpose(cid))
    report = ErrorReport(
        component=component,
        code=code,
        message=message,
        advice=default_advice if advice is None else advice,
        retryable=default_retryable if retryable is None else retryable,
    )
    told = cycle_context(cid, cycle) | dict(context or {})
    diag = diagnostics(len(cycle.tools), confidence=0.0)
    fx.send(cycle.requester, report, task=cycle.task, context=told, diag=diag)
    cycle.close(CycleStatus.FAILED)


def _confidence(cycle: Cycle) -> float:
    return min([1.0, *(result_confidence(r) for r in cycle.results.values())])


def answer(fx: Effects, cid: str, cycle: Cycle) -> None:
    """Every tool answered: ONE ``ToolResults`` in call order with the memory context."""
    results = tuple(cycle.results[tool] for tool in cycle.tools)
    body = ToolResults(results=results, context=cycle.memory, notice="\n".join(cycle.notices))
    latencies = list(cycle.latency_ms.values())
    latency = sum(latencies) / len(latencies) if latencies else 0.0
    diag = diagnostics(len(cycle.tools), _confidence(cycle), latency)
    fx.send(cycle.requester, body, task=cycle.task, context=cycle_context(cid, cycle), diag=diag)
    fx.cancel(deadline_purpose(cid))
    cycle.close(CycleStatus.ANSWERED)


def timer_data(data_json: str) -> dict[str, object]:
    """The data of a dispatcher timer (``{}`` when it is not a JSON object)."""
    try:
        data = json.loads(data_json)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}

"""The cycle's events: a call, memory's answer, a tool's result, a continue, a timer.

Each function takes an envelope the contract rules already accepted, updates the
session's cycle in place and records what goes out in ``Effects``. Only the round's
``MemoryQuery`` failing (``memory:context``) can answer a cycle from memory; a refused
write is a notification and never carries the cycle id onward.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Final

from hermesbus.contract.envelope import Envelope
from hermesbus.contract.fields import from_epoch_ms
from hermesbus.contract.payloads import (
    ContextValue,
    ErrorReport,
    MemoryContext,
    MemoryTier,
    Reply,
    TimerFired,
    ToolCall,
    ToolResult,
)
from hermesbus.processors.dispatcher._access import refused
from hermesbus.processors.dispatcher._dispatch import (
    answer,
    cycle_context,
    deadline_purpose,
    dispatch,
    fail,
    query_memory,
    schedule_retry,
    timer_data,
)
from hermesbus.processors.dispatcher._emit import ALERTS_ADDRESS, Effects
from hermesbus.processors.dispatcher._health import (
    BUSY,
    BUSY_ADVICE,
    bilingual,
    busy_tool,
    result_notices,
)
from hermesbus.processors.dispatcher._memory import MAX_FACTS, MAX_SYMBOLS, verified_writes
from hermesbus.processors.dispatcher._ports import Ports
from hermesbus.processors.dispatcher._state import (
    PAUSE_SLACK_MS,
    Call,
    CallStatus,
    Cycle,
    DispatcherState,
)
from hermesbus.processors.protocol import (
    BUSY_BEHIND,
    BUSY_PREFIX,
    CYCLE,
    DISPATCHER,
    INVALID_SYMBOLS,
    MEMORY_CONTEXT,
    PAUSE_EVERY,
    PAUSED_SINCE,
    SYMBOLS_HELD,
    TOOLS,
    UNAVAILABLE,
    USER,
    cycle_of,
    is_failure,
    memory_at,
    tool_at,
)

MAX_DOWNTIME_MS: Final = 300_000
"""Backend downtime a round is not charged, at most: then it fails, retryable."""

__all__ = [
    "CAPPED_WRITES",
    "REFUSED_WRITE",
    "drop_late",
    "on_call",
    "on_continue",
    "on_memory",
    "on_memory_error",
    "on_result",
    "on_timer",
]

log = logging.getLogger(__name__)

REFUSED_WRITE: Final = "refused_write"
"""Context flag of a forwarded write refusal: the conversation records it, never as an answer."""
CAPPED_WRITES: Final = "memory.writes_capped"
"""Code of the alert when a result carried more facts or symbols than memory is fed."""
_CYCLE_KEYS: Final = frozenset({CYCLE, TOOLS, "round"})


def drop_late(state: DispatcherState, ports: Ports, what: str, cid: str) -> None:
    """An envelope of a round that is over (or superseded): counted, never forwarded."""
    log.info("dispatcher: late %s for cycle %s dropped", what, cid)
    state.late += 1
    if ports.counter is not None:
        ports.counter.count_late()


def _start_round(
    fx: Effects,
    state: DispatcherState,
    cid: str,
    envelope: Envelope,
    old: Cycle | None,
    *,
    appended_ms: int,
) -> Cycle:
    """The first call of a round: its budget, its deadline timer, its one memory query."""
    tools = envelope.payload.context.get(TOOLS)
    budget = envelope.metadata.timeout_ms
    cycle = Cycle(
        requester=envelope.source,
        task=envelope.payload.task,
        tools=list(tools) if isinstance(tools, list) else [],
        round=old.round if old is not None else 1,
        deadline_ms=fx.now_ms + budget,
        budget_ms=budget,
        asked_ms=appended_ms,
    )
    state.cycles[cid] = cycle
    query_memory(fx, cid, cycle, envelope.payload.context)
    fx.arm(budget, deadline_purpose(cid), {CYCLE: cid, "round": cycle.round})
    return cycle


async def on_call(
    fx: Effects,
    state: DispatcherState,
    envelope: Envelope,
    call: ToolCall,
    ports: Ports,
    *,
    appended_ms: int = -1,
) -> None:
    """Hold the call until memory has answered the round, or send it now if it has."""
    cid = cycle_of(envelope)
    cycle = state.cycles.get(cid)
    if cycle is not None and not cycle.is_open:
        drop_late(state, ports, f"call of {call.tool}", cid)  # the round failed before it came
        return
    if cycle is None or not cycle.received:
        cycle = _start_round(fx, state, cid, envelope, cycle, appended_ms=appended_ms)
    cycle.received.append(call.tool)
    cycle.calls[call.tool] = Call(envelope=envelope)
    if cycle.memory is not None and not await refused(fx, state, cid, cycle, ports):
        await dispatch(fx, cid, cycle, call.tool, ports.need_health())


async def on_memory(
    fx: Effects,
    state: DispatcherState,
    envelope: Envelope,
    body: MemoryContext,
    ports: Ports,
    *,
    appended_ms: int = -1,
) -> None:
    """Memory answered the round: every held call goes out, in the cycle's tool order,
    unless memory took the whole budget (then the round fails naming memory)."""
    cid = cycle_of(envelope)
    cycle = state.cycles[cid]
    asked = envelope.payload.context.get("round", cycle.round)
    if not cycle.is_open or not cycle.received or cycle.memory is not None or asked != cycle.round:
        drop_late(state, ports, "memory context", cid)
        return
    if cycle.asked_ms >= 0 and appended_ms >= 0:  # a backend's downtime is not charged
        cycle.memory_ms = max(0, appended_ms - cycle.asked_ms - _downtime(cycle, appended_ms))
        if cycle.still_paused(appended_ms):  # the pause lasted until this answer
            cycle.pause_seen_ms = max(cycle.pause_seen_ms, appended_ms)
    if cycle.memory_ms >= cycle.budget_ms:
        message = (
            f"cycle {cid!r} ({cycle.task}) passed its {cycle.budget_ms} ms budget waiting "
            f"for {MEMORY_CONTEXT}, which answered after {cycle.memory_ms} ms"
        )
        if not await _failed_busy(fx, cid, cycle, message, ports, component=MEMORY_CONTEXT):
            fail(fx, cid, cycle, component=MEMORY_CONTEXT, code="timeout", message=message)
        return
    cycle.memory = body
    if doubted := _doubted(cycle, body):
        message = (
            f"cycle {cid!r} ({cycle.task}): the symbols {', '.join(doubted)} its calls read no "
            "longer hold (memory's validator refused them); nothing was dispatched"
        )
        fail(
            fx,
            cid,
            cycle,
            component=memory_at(MemoryTier.SHORT_TERM),
            code=INVALID_SYMBOLS,
            message=message,
            retryable=False,
            context={"invalid": ",".join(doubted)},
        )
        return
    if await refused(fx, state, cid, cycle, ports):  # who may call what, how often
        return
    for tool in cycle.tools:
        call = cycle.calls.get(tool)
        if cycle.is_open and call is not None and call.status is CallStatus.WAITING:
            await dispatch(fx, cid, cycle, tool, ports.need_health())


def _doubted(cycle: Cycle, memory: MemoryContext) -> list[str]:
    """The symbols a cycle's calls read (``SYMBOLS_HELD``) that memory says no longer hold."""
    first = next(iter(cycle.calls.values()), None)
    context = first.envelope.payload.context if first is not None else {}
    asked = context.get("symbols")
    if context.get(SYMBOLS_HELD) is not True or not isinstance(asked, list):
        return []
    return sorted(set(memory.invalid) & {name for name in asked if isinstance(name, str)})


def _latency(envelope: Envelope) -> float:
    diag = envelope.diagnostics
    if diag is None:
        return 0.0
    return diag.external_calls.avg_latency_ms or diag.processing_time_ms


def on_result(
    fx: Effects, state: DispatcherState, envelope: Envelope, result: ToolResult, ports: Ports
) -> None:
    """Record a result; retry or fail fast on a 5xx; answer once every tool answered."""
    cid = cycle_of(envelope)
    cycle = state.cycles[cid]
    call = cycle.calls.get(result.tool) if cycle.is_open else None
    if call is None or call.status is not CallStatus.SENT:
        drop_late(state, ports, f"result of {result.tool}", cid)
        return
    if is_failure(result.status_code):
        if not schedule_retry(fx, cid, cycle, result.tool, result.status_code):
            policy = call.envelope.metadata.retry_policy
            detail = result.error or "no detail"
            message = (
                f"{result.tool} answered {result.status_code} on attempt {call.attempt} "
                f"of {policy.max_attempts}: {detail}"
            )
            busy = _busy(result)  # its workers were all taken: the bus is busy, none failed
            fail(
                fx,
                cid,
                cycle,
                component=tool_at(result.tool),
                code=BUSY if busy else str(result.status_code),
                message=message,
                advice=BUSY_ADVICE if busy else None,
                retryable=True if busy else None,
            )
        return
    call.status = CallStatus.DONE
    cycle.results[result.tool] = result
    cycle.latency_ms[result.tool] = _latency(envelope)
    cycle.notices.extend(result_notices(result))
    _feed_memory(fx, state, envelope=envelope, cid=cid, cycle=cycle, result=result)
    if all(tool in cycle.results for tool in cycle.tools):
        answer(fx, cid, cycle)


def _busy(result: ToolResult) -> bool:
    """A 503 whose call never got one of the tool's workers in its time (see BUSY_PREFIX)."""
    error = result.error or ""
    return result.status_code == UNAVAILABLE and error.startswith(BUSY_PREFIX)


def _verified_at(envelope: Envelope, cycle: Cycle) -> datetime:
    """The result's time, but never after the deadline of the call it answers (the call
    left with the time left of the cycle): a tool's clock cannot date facts later."""
    if cycle.deadline_ms is None:
        return envelope.timestamp
    return min(envelope.timestamp, from_epoch_ms(cycle.deadline_ms))


def _feed_memory(
    fx: Effects,
    state: DispatcherState,
    *,
    envelope: Envelope,
    cid: str,
    cycle: Cycle,
    result: ToolResult,
) -> None:
    """The result's verified writes; what the caps dropped is counted and alerted once."""
    context: dict[str, ContextValue] = {CYCLE: cid, "tool": result.tool}
    written = verified_writes(
        fx, result, task=cycle.task, context=context, verified_at=_verified_at(envelope, cycle)
    )
    if not written.dropped:
        return
    state.capped_writes += written.dropped
    message = (
        f"{result.tool} returned {written.dropped_facts} facts over {MAX_FACTS} and "
        f"{written.dropped_symbols} symbols over {MAX_SYMBOLS} in cycle {cid!r}: dropped"
    )
    log.warning("dispatcher: %s", message)
    report = ErrorReport(
        component=tool_at(result.tool),
        code=CAPPED_WRITES,
        message=message,
        advice=bilingual("工具结果的事实过多，请精简", "return fewer facts and symbols per result"),
        retryable=False,
    )
    fx.send(ALERTS_ADDRESS, report, task=cycle.task, context=context)


def on_continue(state: DispatcherState, envelope: Envelope) -> None:
    """The conversation asks for one more answer in a closed cycle: a new round."""
    state.cycles[cycle_of(envelope)].reopen()


def _waiting_for(cycle: Cycle) -> tuple[str, str]:
    """The component to name for a timed-out round, and everything it waited for.

    Memory is named while it has not answered. Once it has, a pending tool is named only
    if it had a fair chance in the time memory left (:func:`_had_time`); when none had,
    memory is: the user is not told a tool failed that never had the time to answer."""
    pending = [tool for tool in cycle.tools if tool not in cycle.results]
    names = [] if cycle.memory is not None else [MEMORY_CONTEXT]
    names += [tool_at(tool) for tool in pending]
    missing = [tool for tool in cycle.tools if tool not in cycle.received]
    text = ", ".join(names) + (f" (no call yet for {missing})" if missing else "")
    if cycle.memory is None or cycle.memory_ms < 0:
        return (names[0] if names else MEMORY_CONTEXT), text
    left = cycle.budget_ms - cycle.memory_ms
    text += f" after {MEMORY_CONTEXT} answered in {cycle.memory_ms} ms ({left} ms left)"
    fair = [tool for tool in pending if _had_time(cycle, tool, left)]
    return (tool_at(fair[0]) if fair else MEMORY_CONTEXT), text


def _had_time(cycle: Cycle, tool: str, left_ms: int) -> bool:
    """At least twice the tool's usual latency (its live health when the call was sent);
    with that unknown, at least half the budget."""
    call = cycle.calls.get(tool)
    if call is None or call.expected_ms is None:
        return 2 * left_ms > cycle.budget_ms
    return left_ms >= 2 * call.expected_ms


async def on_timer(
    fx: Effects, state: DispatcherState, fired: TimerFired, ports: Ports, *, appended_ms: int = -1
) -> None:
    """The round's deadline (fail fast with ``timeout``) or a retry that is due.

    ``appended_ms`` (the timer record's Kafka time, the bus's clock) is what pauses are
    measured against: the envelope's own time is the app's clock."""
    data = timer_data(fired.data_json)
    cid = data.get(CYCLE)
    cycle = state.cycles.get(cid) if isinstance(cid, str) else None
    if (
        cycle is None
        or not isinstance(cid, str)
        or not cycle.is_open
        or data.get("round") != cycle.round
    ):
        log.debug("dispatcher: stale timer %s ignored", fired.purpose)
        return
    if fired.purpose == deadline_purpose(cid):
        bus_ms = appended_ms if appended_ms >= 0 else fx.now_ms
        if _downtime(cycle, bus_ms) > MAX_DOWNTIME_MS:  # not for ever: told, retryable
            _fail_held(fx, cid, cycle, _downtime(cycle, bus_ms))
            return
        owed = _owed_ms(cycle, fx.now_ms, bus_ms)
        if owed > 0:  # a backend outage held the round: its downtime is given back
            fx.arm(owed, deadline_purpose(cid), {CYCLE: cid, "round": cycle.round})
            return
        component, pending = _waiting_for(cycle)
        budget = f"its {cycle.budget_ms} ms budget"
        message = f"cycle {cid!r} ({cycle.task}) passed {budget} waiting for {pending}"
        if not await _failed_busy(fx, cid, cycle, message, ports, component=component):
            fail(fx, cid, cycle, component=component, code="timeout", message=message)
        return
    tool = data.get("tool")
    call = cycle.calls.get(tool) if isinstance(tool, str) else None
    if (
        call is None
        or call.status is not CallStatus.RETRYING
        or data.get("attempt") != call.attempt + 1
    ):
        log.debug("dispatcher: stale retry timer %s ignored", fired.purpose)
        return
    call.attempt += 1
    await dispatch(fx, cid, cycle, str(tool), ports.need_health())


async def _failed_busy(
    fx: Effects, cid: str, cycle: Cycle, message: str, ports: Ports, *, component: str
) -> bool:
    """Fail the round as ``busy`` if what it waits for waited in a busy bus: the user hears
    the bus is busy and the request queued, not that memory or a tool failed (else False:
    the caller tells a timeout naming ``component``).

    What the round waits for is memory (until it answered) and the tools its calls went
    to and did not answer yet (a call held for memory never reached its tool). Each is
    backlogged when work waits for a free worker of its processor now, or waited in the
    last ``budget_ms`` (the round's time: that backlog may have drained since;
    ``ports["backlog"]``, which counts no stuck processor and no record waiting behind its
    own session) or, for a tool, calls wait for its workers (its live health). The
    dispatcher itself is backlogged when work waits for its workers: the round's call
    waited there before it started, and under a burst so do the answers (measured: at
    the deadlines of 2,000 first turns at once, memory had caught up while 1,100 to 1,600
    records waited for the dispatcher).
    The first backlogged component the round waits for is named, else ``component``; the
    report's context lists them all (:data:`BUSY_BEHIND`), which a replay reads back."""
    waits = [MEMORY_CONTEXT] if cycle.memory is None else []
    waits += [tool_at(tool) for tool, call in cycle.calls.items() if call.status is CallStatus.SENT]
    behind = [c for c in waits if await _backlogged(c, ports, cycle.budget_ms)]
    if await ports.backlog(DISPATCHER, cycle.budget_ms) > 0:
        behind.append(DISPATCHER)
    if not behind:
        return False
    named = next((c for c in behind if c in waits), component)
    message += f"; the bus is busy, records waiting for: {', '.join(behind)}"
    fail(
        fx,
        cid,
        cycle,
        component=named,
        code=BUSY,
        message=message,
        advice=BUSY_ADVICE,
        retryable=True,
        context={BUSY_BEHIND: behind},
    )
    return True


async def _backlogged(component: str, ports: Ports, within_ms: int) -> bool:
    """Records wait, or waited in the round's time, for ``component``'s processor, or (a
    tool) calls wait for its workers."""
    if await ports.backlog(component, within_ms) > 0:
        return True
    kind, _, tool = component.partition(":")
    return kind == "tool" and await busy_tool([tool], ports.need_health()) is not None


def _downtime(cycle: Cycle, now_ms: int) -> int:
    """The round's downtime up to ``now_ms``: a pause still going on by its notices when an
    answer comes lasted until it came (the answer is what ended it)."""
    if cycle.still_paused(now_ms):
        return cycle.downtime_ms + max(0, now_ms - cycle.pause_seen_ms)
    return cycle.downtime_ms


def _owed_ms(cycle: Cycle, now_ms: int, bus_ms: int) -> int:
    """How much longer the round may wait at its deadline (``now_ms``, the envelopes' time):
    the downtime credited past the deadline, and while a pause may still be going on
    (``bus_ms``, the bus's clock, as the notices are), until it could have been told again."""
    owed = 0 if cycle.deadline_ms is None else cycle.deadline_ms + cycle.downtime_ms - now_ms
    if cycle.still_paused(bus_ms):
        owed = max(owed, cycle.pause_seen_ms + 2 * cycle.pause_every_ms + PAUSE_SLACK_MS - bus_ms)
    return max(0, owed)


def _fail_held(fx: Effects, cid: str, cycle: Cycle, downtime_ms: int) -> None:
    """A round held by an outage longer than MAX_DOWNTIME_MS fails, retryable, naming who
    was held: the user hears a backend is away, not that a tool timed out."""
    held = ", ".join(cycle.paused_by) or MEMORY_CONTEXT
    message = (
        f"cycle {cid!r} ({cycle.task}) waited {downtime_ms // 1000} s for {held}, held by a "
        f"backend outage (at most {MAX_DOWNTIME_MS // 1000} s are not charged)"
    )
    fail(
        fx,
        cid,
        cycle,
        component=held.split(", ")[0],
        code="unavailable",
        message=message,
        advice=bilingual("后端暂时不可用，请稍后重试", "a backend is away; retry later"),
        retryable=True,
    )


def on_paused(fx: Effects, state: DispatcherState, envelope: Envelope, report: ErrorReport) -> None:
    """Memory or a tool is held in place by a backend outage: the round it answers is not
    charged the downtime. Notices of one outage extend one pause; overlapping ones merge."""
    cid = cycle_of(envelope)
    cycle = state.cycles.get(cid)
    context = envelope.payload.context
    since, every = context.get(PAUSED_SINCE), context.get(PAUSE_EVERY)
    if (
        cycle is None
        or not cycle.is_open
        or report.component != envelope.source  # each tells only of itself
        or context.get("round", cycle.round) != cycle.round
        or not cycle.waits_on(report.component)
        or not isinstance(since, int)
        or not isinstance(every, int)
    ):
        log.debug("dispatcher: pause of %s in cycle %s: nothing waits", report.component, cid)
        return
    now = fx.now_ms
    if cycle.pause_from_ms < 0 or since > cycle.pause_seen_ms:  # a new pause
        cycle.paused_ms = cycle.downtime_ms
        cycle.pause_from_ms = min(since, now)
        cycle.paused_by = []
    if report.component not in cycle.paused_by:
        cycle.paused_by.append(report.component)
    cycle.pause_seen_ms = max(cycle.pause_seen_ms, now)
    cycle.pause_every_ms = max(0, every)
    log.info(
        "dispatcher: cycle %s waits for %s, held by a backend outage (%d ms not charged)",
        cid,
        report.component,
        cycle.downtime_ms,
    )


def on_progress(
    fx: Effects, state: DispatcherState, envelope: Envelope, report: ErrorReport
) -> None:
    """A tool's call is under way and its server reports progress: the user is told the
    tool is processing, once per tool and round (a slow tool's notice counts as that)."""
    cid = cycle_of(envelope)
    cycle = state.cycles.get(cid)
    tool = report.component.partition(":")[2]
    if (
        cycle is None
        or not cycle.is_open
        or report.component != envelope.source  # each tells only of itself
        or envelope.payload.context.get("round", cycle.round) != cycle.round
        or not cycle.waits_on(report.component)
        or tool in cycle.notified
    ):
        log.debug("dispatcher: progress of %s in cycle %s: nothing to tell", tool, cid)
        return
    notice = bilingual(f"{tool} 处理中", f"{tool} is processing")  # nothing of its words
    cycle.notified.append(tool)
    cycle.notices.append(notice)
    reply = Reply(text=notice, degraded=True)
    fx.send(USER, reply, task=cycle.task, context=cycle_context(cid, cycle))


def on_memory_error(
    fx: Effects, state: DispatcherState, envelope: Envelope, report: ErrorReport, ports: Ports
) -> None:
    """Memory refused: a failed ``MemoryQuery`` fails its round; a refused write is news."""
    if report.component != MEMORY_CONTEXT:
        _refused_write(fx, state, envelope, report, ports)
        return
    cid = cycle_of(envelope)
    cycle = state.cycles.get(cid)
    if cycle is None or not cycle.is_open or not cycle.received or cycle.memory is not None:
        drop_late(state, ports, "memory context error", cid)  # no round waits for this answer
        return
    fail(
        fx,
        cid,
        cycle,
        component=report.component,
        code=report.code,
        message=report.message,
        advice=report.advice,
        retryable=report.retryable,
    )


def _refused_write(
    fx: Effects, state: DispatcherState, envelope: Envelope, report: ErrorReport, ports: Ports
) -> None:
    """A refused memory write never answers a cycle: counted, alerted, and told to the
    conversation that last spoke WITHOUT the cycle id (``refused_write: True``)."""
    log.warning("dispatcher: memory refused a write: %s (%s)", report.code, report.component)
    state.refused_writes += 1
    if ports.counter is not None:
        ports.counter.count_refused_write()
    payload = envelope.payload
    context: dict[str, ContextValue] = {
        k: v for k, v in payload.context.items() if k not in _CYCLE_KEYS
    }
    context[REFUSED_WRITE] = True
    if state.last_speaker is not None:
        fx.send(state.last_speaker, report, task=payload.task, context=context)
    fx.send(ALERTS_ADDRESS, report, task=payload.task, context=context)

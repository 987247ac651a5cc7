"""The dispatcher's handler: check the contract, then route by body, cycle by cycle.

A broken rule refuses the envelope (nothing is executed or forwarded), reports it (to
the conversation when it offended, and always to ``alerts:dispatcher``) and counts it.
Deterministic: time is the envelope's, ids are derived, I/O only through the ports.
"""

from __future__ import annotations

import logging
from typing import Final

from hermesbus.contract.envelope import Envelope
from hermesbus.contract.payloads import (
    ContextValue,
    Continue,
    ErrorReport,
    MemoryContext,
    MemoryWrite,
    ModelAnswer,
    ModelRequest,
    StateSnapshot,
    TimerFired,
    ToolCall,
    ToolResult,
)
from hermesbus.processors.dispatcher._cycle import (
    on_call,
    on_continue,
    on_memory,
    on_memory_error,
    on_paused,
    on_progress,
    on_result,
    on_timer,
)
from hermesbus.processors.dispatcher._emit import ALERTS_ADDRESS, Effects
from hermesbus.processors.dispatcher._health import bilingual
from hermesbus.processors.dispatcher._memory import forward_snapshot, forward_write
from hermesbus.processors.dispatcher._model import is_model_timer, on_model, on_model_timer
from hermesbus.processors.dispatcher._ports import Ports
from hermesbus.processors.dispatcher._rules import Violation, first_violation, flow_snapshot
from hermesbus.processors.dispatcher._state import DispatcherState
from hermesbus.processors.flow import EXPENSE_MACHINE, machine_of
from hermesbus.processors.protocol import (
    CONVERSATION,
    CYCLE,
    DISPATCHER,
    DISPATCHER_ADDRESS,
    PAUSED,
    PROGRESS,
    FlowMachine,
    component_of,
    cycle_of,
)
from hermesbus.runtime import HandlerInput, Outcome

__all__ = ["NAME", "TOPIC", "handle"]

log = logging.getLogger(__name__)

NAME: Final = DISPATCHER
"""Processor name (consumer group and state namespace)."""
TOPIC: Final = "hermes.dispatcher"


def _refuse(fx: Effects, state: DispatcherState, violation: Violation, ports: Ports) -> None:
    envelope = fx.source
    log.warning(
        "dispatcher: refused %s from %s: %s",
        envelope.message_id,
        envelope.source,
        violation.message,
    )
    report = ErrorReport(
        component=DISPATCHER_ADDRESS,
        code=violation.code,
        message=violation.message,
        advice=bilingual("按协议修正后重发", f"fix the envelope and resend: {violation.summary}"),
        retryable=False,
    )
    context: dict[str, ContextValue] = {"refused": envelope.message_id, "rule": violation.rule}
    if cycle := cycle_of(envelope):
        context[CYCLE] = cycle
    task = envelope.payload.task
    if component_of(envelope.source) == CONVERSATION:
        fx.send(envelope.source, report, task=task, context=context)
    fx.send(ALERTS_ADDRESS, report, task=task, context=context)
    state.violations[violation.rule] = state.violations.get(violation.rule, 0) + 1
    if ports.counter is not None:
        ports.counter.count(violation.rule)


async def _route(  # noqa: PLR0912 - one case per body of the protocol
    fx: Effects, state: DispatcherState, envelope: Envelope, ports: Ports, appended_ms: int
) -> None:
    body = envelope.payload.body
    if component_of(envelope.source) == CONVERSATION:
        state.last_speaker = envelope.source
    match body:
        case ToolCall():
            await on_call(fx, state, envelope, body, ports, appended_ms=appended_ms)
        case MemoryContext():
            await on_memory(fx, state, envelope, body, ports, appended_ms=appended_ms)
        case ToolResult():
            on_result(fx, state, envelope, body, ports)
        case TimerFired() if is_model_timer(body):
            on_model_timer(fx, state, body)
        case TimerFired():
            await on_timer(fx, state, body, ports, appended_ms=appended_ms)
        case Continue():
            on_continue(state, envelope)
        case StateSnapshot():
            forward_snapshot(fx, envelope, body)
        case MemoryWrite():
            forward_write(fx, envelope, body)
        case ModelRequest() | ModelAnswer():
            on_model(fx, state, envelope, body)
        case ErrorReport() if body.code == PAUSED:
            on_paused(fx, state, envelope, body)
        case ErrorReport() if body.code == PROGRESS:
            on_progress(fx, state, envelope, body)
        case ErrorReport():
            on_memory_error(fx, state, envelope, body, ports)
        case _:  # the body rule lets nothing else through
            log.error("dispatcher: no route for %s", type(body).__name__)


async def _flow_of(envelope: Envelope, ports: Ports) -> FlowMachine | None:
    """The machine of the flow the envelope's snapshot names: the expense report's when it
    names none; None when the catalog does not hold that version."""
    snapshot = flow_snapshot(envelope)
    if snapshot is None or snapshot.flow is None:
        return EXPENSE_MACHINE
    if ports.flows is None:
        return None
    spec = await ports.flows.version(snapshot.flow, snapshot.flow_version or 0)
    return machine_of(spec) if spec is not None else None


async def handle(inp: HandlerInput) -> Outcome:
    """The dispatcher (processor ``dispatcher``): check the contract, then route."""
    ports = Ports.of(inp.ports)
    state = DispatcherState.load(inp.state.data)
    fx = Effects(inp.envelope)
    violation = first_violation(inp.envelope, state, flow=await _flow_of(inp.envelope, ports))
    if violation is not None:
        _refuse(fx, state, violation, ports)
    else:
        await _route(fx, state, inp.envelope, ports, inp.appended_ms)
    return fx.outcome(state.dump())

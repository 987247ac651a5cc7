"""Model rounds of a flow's agent state: the request out to the model, its answer back once.

The conversation's ``ModelRequest`` goes on to ``model:chat`` (the tool processor, which
calls the model) when it keeps the state's allow-list (the ``agent_tools`` rule); the
dispatcher remembers who asked under the request's cycle and arms the round's deadline
(the request's ``metadata.timeout_ms``), so the ``ModelAnswer`` goes back to that state
only, once, or, when none came in time, a ``timeout`` report does (the state's
``on_timeout`` move or its exit). An answer for a cycle nobody waits for (late, re-sent,
forged) is dropped and counted as late.
"""

from __future__ import annotations

import logging
from typing import Final

from hermesbus.contract.envelope import Envelope
from hermesbus.contract.payloads import ErrorReport, ModelAnswer, ModelRequest, TimerFired
from hermesbus.processors.dispatcher._dispatch import timer_data
from hermesbus.processors.dispatcher._emit import Effects, diagnostics
from hermesbus.processors.dispatcher._state import DispatcherState
from hermesbus.processors.protocol import CYCLE, MODEL_ADDRESS, cycle_of

__all__ = ["MAX_OPEN_ROUNDS", "is_model_timer", "on_model", "on_model_timer"]

log = logging.getLogger(__name__)

MAX_OPEN_ROUNDS: Final = 8
"""Model rounds a session may have open at once (the oldest is forgotten past it)."""
_PURPOSE: Final = "model:"
_TRY_AGAIN: Final = "请稍后重试（try again later）"


def is_model_timer(fired: TimerFired) -> bool:
    return fired.purpose.startswith(_PURPOSE)


def on_model(
    fx: Effects, state: DispatcherState, envelope: Envelope, body: ModelRequest | ModelAnswer
) -> None:
    """A round's request out to the model, or its answer back."""
    if isinstance(body, ModelRequest):
        _request(fx, state, envelope, body)
    else:
        _answer(fx, state, envelope, body)


def _request(fx: Effects, state: DispatcherState, envelope: Envelope, body: ModelRequest) -> None:
    """Forward the round to the model; remember who asked; arm its deadline."""
    cycle = cycle_of(envelope)
    state.models[cycle] = envelope.source
    while len(state.models) > MAX_OPEN_ROUNDS:
        forgotten = next(iter(state.models))
        del state.models[forgotten]
        fx.cancel(_PURPOSE + forgotten)
    payload = envelope.payload
    fx.send(
        MODEL_ADDRESS,
        body,
        task=payload.task,
        context=payload.context,
        metadata=envelope.metadata,
        snapshot=envelope.snapshot,
    )
    fx.arm(envelope.metadata.timeout_ms, _PURPOSE + cycle, {CYCLE: cycle, "task": payload.task})


def _answer(fx: Effects, state: DispatcherState, envelope: Envelope, body: ModelAnswer) -> None:
    """The model's answer back to the state that asked, once."""
    cycle = cycle_of(envelope)
    requester = state.models.pop(cycle, None)
    if requester is None:
        log.info("dispatcher: model answer for cycle %r nobody waits for: dropped", cycle)
        state.late += 1
        return
    fx.cancel(_PURPOSE + cycle)
    payload = envelope.payload
    fx.send(requester, body, task=payload.task, context=payload.context, diag=envelope.diagnostics)


def on_model_timer(fx: Effects, state: DispatcherState, fired: TimerFired) -> None:
    """A round's deadline: no answer came in time; the state that asked is told so."""
    data = timer_data(fired.data_json)
    cycle = data.get(CYCLE)
    requester = state.models.pop(cycle, None) if isinstance(cycle, str) else None
    if requester is None or not isinstance(cycle, str):
        log.debug("dispatcher: stale model timer %s ignored", fired.purpose)
        return
    task = data.get("task")
    report = ErrorReport(
        component=MODEL_ADDRESS,
        code="timeout",
        message=f"model round {cycle!r} got no answer within its budget",
        advice=_TRY_AGAIN,
        retryable=True,
    )
    context = {CYCLE: cycle}
    fx.send(requester, report, task=task if isinstance(task, str) else "", context=context,
            diag=diagnostics(1, confidence=0.0))  # fmt: skip

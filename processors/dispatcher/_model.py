"""Model rounds of a flow's agent state: the request out to the model, its answer back once.

The conversation's ``ModelRequest`` goes on to ``model:chat`` (the tool processor, which
calls the model); the dispatcher remembers who asked under the request's cycle, so the
``ModelAnswer`` goes back to that state only, once. An answer for a cycle nobody waits for
(late, re-sent, forged) is dropped and counted as late.
"""

from __future__ import annotations

import logging
from typing import Final

from hermesbus.contract.envelope import Envelope
from hermesbus.contract.payloads import ModelAnswer, ModelRequest
from hermesbus.processors.dispatcher._emit import Effects
from hermesbus.processors.dispatcher._state import DispatcherState
from hermesbus.processors.protocol import MODEL_ADDRESS, cycle_of

__all__ = ["MAX_OPEN_ROUNDS", "on_model"]

log = logging.getLogger(__name__)

MAX_OPEN_ROUNDS: Final = 8
"""Model rounds a session may have open at once (the oldest is forgotten past it)."""


def on_model(
    fx: Effects, state: DispatcherState, envelope: Envelope, body: ModelRequest | ModelAnswer
) -> None:
    """A round's request out to the model, or its answer back."""
    if isinstance(body, ModelRequest):
        _request(fx, state, envelope, body)
    else:
        _answer(fx, state, envelope, body)


def _request(fx: Effects, state: DispatcherState, envelope: Envelope, body: ModelRequest) -> None:
    """Forward the round to the model; remember who asked."""
    cycle = cycle_of(envelope)
    state.models[cycle] = envelope.source
    while len(state.models) > MAX_OPEN_ROUNDS:
        del state.models[next(iter(state.models))]
    payload = envelope.payload
    fx.send(
        MODEL_ADDRESS,
        body,
        task=payload.task,
        context=payload.context,
        metadata=envelope.metadata,
        snapshot=envelope.snapshot,
    )


def _answer(fx: Effects, state: DispatcherState, envelope: Envelope, body: ModelAnswer) -> None:
    """The model's answer back to the state that asked, once."""
    cycle = cycle_of(envelope)
    requester = state.models.pop(cycle, None)
    if requester is None:
        log.info("dispatcher: model answer for cycle %r nobody waits for: dropped", cycle)
        state.late += 1
        return
    payload = envelope.payload
    fx.send(
        requester,
        body,
        task=payload.task,
        context=payload.context,
        diag=envelope.diagnostics,
    )

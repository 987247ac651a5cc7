"""The conversation processor's handler: user turns, the dispatcher's answers, its timers.

Consumes ``hermes.conversation.in``: ``UserTurn`` (``conversation:in``), ``ToolResults`` and
``ErrorReport`` from ``mcp:dispatcher`` (``conversation:<state>``) and ``TimerFired`` from
``conversation:timer``. Stale answers (not the pending cycle) and stale timers are ignored;
an error report outside the pending cycle is kept among the session's problems.
"""

from __future__ import annotations

import logging
from typing import Final

from hermesbus.contract.payloads import ErrorReport, TimerFired, ToolResults, UserTurn
from hermesbus.processors import protocol
from hermesbus.processors.conversation._context import Step
from hermesbus.processors.conversation._results import (
    current_cycle,
    on_error,
    on_stray_error,
    on_tool_results,
)
from hermesbus.processors.conversation._session import load_session
from hermesbus.processors.conversation._timers import on_timer, timer_is_current
from hermesbus.processors.conversation._turns import on_user_turn
from hermesbus.runtime import HandlerInput, Outcome

__all__ = ["NAME", "TIMER_SOURCE", "TOPIC", "handle"]

log = logging.getLogger(__name__)

NAME: Final = protocol.CONVERSATION
TOPIC: Final = "hermes.conversation.in"
TIMER_SOURCE: Final = f"{protocol.CONVERSATION}:timer"


async def handle(inp: HandlerInput) -> Outcome:
    """One envelope in, the conversation's envelopes, state and timers out (deterministic)."""
    envelope = inp.envelope
    body = envelope.payload.body
    step = Step(inp, load_session(inp.state.data, envelope.session_id))
    from_dispatcher = envelope.source == protocol.DISPATCHER_ADDRESS
    if isinstance(body, UserTurn):
        await on_user_turn(step, body)
    elif isinstance(body, ToolResults) and from_dispatcher and current_cycle(step, envelope):
        on_tool_results(step, body)
    elif isinstance(body, ErrorReport) and from_dispatcher:
        if current_cycle(step, envelope):
            on_error(step, body)
        else:  # e.g. memory refused a write: kept among the session's problems
            on_stray_error(step, body)
    elif isinstance(body, TimerFired) and envelope.source == TIMER_SOURCE:
        if not timer_is_current(step, body):
            log.info("session %s: stale timer %s", envelope.session_id, body.purpose)
            return Outcome()
        on_timer(step, body)
    else:
        log.info(
            "session %s: ignored %s from %s",
            envelope.session_id,
            type(body).__name__,
            envelope.source,
        )
        return Outcome()
    return step.outcome()

"""The conversation processor's handler: user turns, the dispatcher's answers, its timers.

A session runs a registered flow (``_engine``) or the built-in expense report. Consumes
``hermes.conversation.in``: ``UserTurn`` (``conversation:in``), ``ToolResults`` and
``ErrorReport`` from ``mcp:dispatcher`` (``conversation:<state>``) and ``TimerFired`` from
``conversation:timer``. Stale answers (not the pending cycle) and stale timers are ignored;
an error report outside the pending cycle is kept among the session's problems.
"""

from __future__ import annotations

import json
import logging
from typing import Final

from hermesbus.contract.payloads import ErrorReport, TimerFired, ToolResults, UserTurn
from hermesbus.processors import protocol
from hermesbus.processors.conversation._context import Step
from hermesbus.processors.conversation._engine import (
    FlowLost,
    choose_flow,
    count_completed,
    ended,
    flow_of,
    lost,
    not_registered,
    on_flow_error,
    on_flow_results,
    on_flow_timer,
    on_flow_turn,
    prepare,
    start_flow,
)
from hermesbus.processors.conversation._engine import timer_is_current as flow_timer_is_current
from hermesbus.processors.conversation._machine import EXPENSE_FLOW, TERMINAL
from hermesbus.processors.conversation._results import (
    current_cycle,
    on_error,
    on_stray_error,
    on_tool_results,
)
from hermesbus.processors.conversation._session import Session, load_session
from hermesbus.processors.conversation._timers import on_timer, timer_is_current
from hermesbus.processors.conversation._turns import on_user_turn
from hermesbus.processors.flow import EXPENSE_SPEC, FlowSpec
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
    try:
        spec = await _flow(step)  # None: the expense report, or a flow that has ended
    except FlowLost as exc:
        lost(step, exc)
        return step.outcome()
    from_dispatcher = envelope.source == protocol.DISPATCHER_ADDRESS
    if isinstance(body, UserTurn):
        await _on_turn(step, body, spec)
    elif isinstance(body, ToolResults) and from_dispatcher and current_cycle(step, envelope):
        if spec is not None:
            on_flow_results(step, spec, body)
        else:
            on_tool_results(step, body)
    elif isinstance(body, ErrorReport) and from_dispatcher:
        if not current_cycle(step, envelope):  # e.g. memory refused a write: kept as a problem
            on_stray_error(step, body)
        elif spec is not None:
            on_flow_error(step, spec, body)
        else:
            on_error(step, body)
    elif isinstance(body, TimerFired) and envelope.source == TIMER_SOURCE:
        if not _on_timer(step, spec, body):
            return Outcome()
    else:
        log.info(
            "session %s: ignored %s from %s",
            envelope.session_id,
            type(body).__name__,
            envelope.source,
        )
        return Outcome()
    await count_completed(step)
    return step.outcome()


async def _flow(step: Step) -> FlowSpec | None:
    """The spec the session runs, with what the engine needs read before it runs."""
    spec = await flow_of(step)
    if spec is not None:
        await prepare(step, spec)
    elif step.session.flow is None:  # the expense report's frequent paths
        await prepare(step, EXPENSE_SPEC)
    return spec


async def _on_turn(step: Step, turn: UserTurn, spec: FlowSpec | None) -> None:
    """A session under way keeps its flow; a new (or finished) one takes the flow the app
    names, else the registered flow the turn's intent matches, else the expense report
    (whose own parser ends an unclear intent)."""
    session = step.session
    if spec is not None and not ended(step, spec):
        await on_flow_turn(step, spec, turn)
        return
    if session.flow is None and session.state is not None and session.state != TERMINAL:
        await on_user_turn(step, turn)
        return
    chosen = await choose_flow(step, turn)
    if isinstance(chosen, FlowSpec):
        await prepare(step, chosen)
        await start_flow(step, chosen, turn)
    elif chosen is not None and chosen != EXPENSE_FLOW:
        not_registered(step, chosen)
    else:
        if session.flow is not None:  # a finished flow's session starts over as an expense
            step.session = Session(preferences=session.preferences, declined=session.declined)
        await on_user_turn(step, turn)


def _on_timer(step: Step, spec: FlowSpec | None, fired: TimerFired) -> bool:
    """A current timer fires its wait; a stale one says nothing (False)."""
    if not _timer_current(step, spec, fired):
        log.info("session %s: stale timer %s", step.env.session_id, fired.purpose)
        return False
    if spec is not None:
        on_flow_timer(step, spec, fired)
    else:
        on_timer(step, fired)
    return True


def _timer_current(step: Step, spec: FlowSpec | None, fired: TimerFired) -> bool:
    if spec is None:
        return timer_is_current(step, fired)
    try:
        data = json.loads(fired.data_json)
    except ValueError:
        return False
    if not isinstance(data, dict) or data.get("state") != step.session.state:
        return False
    token = data.get("token")
    return flow_timer_is_current(step, spec, fired, token if isinstance(token, str) else None)

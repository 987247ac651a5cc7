"""The conversation processor's handler: user turns, the dispatcher's answers, its timers.

Every session runs a flow on the engine (``_engine``): a registered one, or the built-in
expense report (``processors/flow/expense.yaml``, named by no snapshot: the dispatcher
knows it). Consumes ``hermes.conversation.in``: ``UserTurn`` (``conversation:in``),
``ToolResults`` and ``ErrorReport`` from ``mcp:dispatcher`` (``conversation:<state>``) and
``TimerFired`` from ``conversation:timer``; an agent state's ``ModelAnswer`` from the
dispatcher too. Stale answers (not the pending cycle) and stale timers are ignored; an
error report outside the pending cycle is kept among the session's problems.
"""

from __future__ import annotations

import json
import logging
from typing import Final

from hermesbus.contract.envelope import Envelope
from hermesbus.contract.payloads import ErrorReport, ModelAnswer, TimerFired, ToolResults, UserTurn
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
    on_flow_answer,
    on_flow_error,
    on_flow_timer,
    on_flow_turn,
    prepare,
    start_flow,
    timer_is_current,
)
from hermesbus.processors.conversation._session import load_session
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
        spec = await flow_of(step)  # None: no session under way (a turn starts one)
    except FlowLost as exc:
        lost(step, exc)
        return step.outcome()
    if spec is not None:
        await prepare(step, spec)
    from_dispatcher = envelope.source == protocol.DISPATCHER_ADDRESS
    if isinstance(body, UserTurn):
        await _on_turn(step, body, spec)
    elif isinstance(body, ToolResults | ModelAnswer) and from_dispatcher:
        if not _current(step, envelope):
            return Outcome()  # a stale answer: nothing of the session changes
        if spec is not None:
            on_flow_answer(step, spec, body)
    elif isinstance(body, ErrorReport) and from_dispatcher:
        if spec is None or not _current(step, envelope):  # e.g. memory refused a write
            step.problem(body.component, body.code, body.message)  # kept, never dropped
        else:
            on_flow_error(step, spec, body)
    elif isinstance(body, TimerFired) and envelope.source == TIMER_SOURCE:
        if spec is None or not _timer_current(step, spec, body):
            log.info("session %s: stale timer %s", step.env.session_id, body.purpose)
            return Outcome()
        on_flow_timer(step, spec, body)
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


def _current(step: Step, envelope: Envelope) -> bool:
    """An answer for the cycle the conversation waits for; anything else is stale."""
    pending = step.session.pending
    cycle = envelope.payload.context.get(protocol.CYCLE)
    if pending is None or cycle != pending.cycle:
        log.info("session %s: stale answer for cycle %s", envelope.session_id, cycle)
        return False
    return True


async def _on_turn(step: Step, turn: UserTurn, spec: FlowSpec | None) -> None:
    """A session under way keeps its flow; a new (or finished) one takes the flow the app
    names, else the registered flow the turn's intent matches, else the expense report
    (which ends an unclear intent)."""
    if spec is not None and not ended(step, spec):
        await on_flow_turn(step, spec, turn)
        return
    chosen = await choose_flow(step, turn)
    if isinstance(chosen, FlowSpec):
        await prepare(step, chosen)
        await start_flow(step, chosen, turn)
    elif chosen is not None and chosen != EXPENSE_SPEC.flow:
        not_registered(step, chosen)
    else:
        await prepare(step, EXPENSE_SPEC)
        await start_flow(step, EXPENSE_SPEC, turn, builtin=True)


def _timer_current(step: Step, spec: FlowSpec, fired: TimerFired) -> bool:
    try:
        data = json.loads(fired.data_json)
    except ValueError:
        return False
    if not isinstance(data, dict) or data.get("state") != step.session.state:
        return False
    token = data.get("token")
    return timer_is_current(step, spec, fired, token if isinstance(token, str) else None)

"""The state machine's durable waits when they fire: each purpose its own move and text.

A fired timer counts only while it is the one armed (same token), in the state that armed
it, and a wait that state has in ``MACHINE``; anything else is stale and says nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Final

from hermesbus.contract.payloads import TimerFired
from hermesbus.processors.conversation import _flow as flow
from hermesbus.processors.conversation import _texts as texts
from hermesbus.processors.conversation._context import Step
from hermesbus.processors.conversation._machine import (
    GAVE_UP_WAIT,
    MACHINE,
    MATERIALS_WAIT,
    START,
    SUMMARY_WAIT,
    VALIDATION_WAIT,
    Timeout,
)

__all__ = ["ON_TIMEOUT", "on_timer", "timer_is_current"]


def timer_is_current(step: Step, fired: TimerFired) -> bool:
    """Armed for the current state, not re-armed or cancelled since, and a wait of it."""
    try:
        data = json.loads(fired.data_json)
    except ValueError:
        return False
    if not isinstance(data, dict):
        return False
    session, token = step.session, data.get("token")
    return (
        isinstance(token, str)
        and session.timers.get(fired.purpose) == token
        and data.get("state") == session.state
        and MACHINE.applies(session.state, fired.purpose)
        and fired.purpose in ON_TIMEOUT
    )


def on_timer(step: Step, fired: TimerFired) -> None:
    """A current timer: the table's trigger for its purpose, with the purpose's own text."""
    timeout = MACHINE.timeout(step.session.state or START, fired.purpose)
    step.update(timers={k: v for k, v in step.session.timers.items() if k != fired.purpose})
    ON_TIMEOUT[timeout.purpose](step, timeout, fired)


def _ask_gave_up(step: Step, timeout: Timeout, _: TimerFired) -> None:
    """S2 waited 5 minutes: S4 asks whether the user gives up, 10 more minutes to answer."""
    step.update(ask="gave_up")
    step.move(timeout.trigger)
    step.arm(GAVE_UP_WAIT.purpose)
    step.reply(texts.TIMEOUT_TEXTS[timeout.purpose], choices=texts.CHOICES_GAVE_UP)


def _review_timeout(step: Step, timeout: Timeout, _: TimerFired) -> None:
    """S3 took over 30 seconds: human review (S3.1); late answers are stale from now on."""
    flow.to_review_timeout(step, timeout.trigger, texts.TIMEOUT_TEXTS[timeout.purpose])


def _expired(step: Step, timeout: Timeout, fired: TimerFired) -> None:
    """S4's summary unanswered for 10 minutes: the session expires (S5), progress saved."""
    text = texts.TIMEOUT_TEXTS[timeout.purpose]
    flow.end(step, timeout.trigger, "expired", text, confirmed_by=fired.timer_id)


def _gave_up(step: Step, timeout: Timeout, fired: TimerFired) -> None:
    """S4's "continue or give up?" unanswered for 10 minutes: given up (S5), progress saved."""
    text = texts.TIMEOUT_TEXTS[timeout.purpose]
    flow.end(step, timeout.trigger, "gave_up", text, confirmed_by=fired.timer_id)


ON_TIMEOUT: Final[Mapping[str, Callable[[Step, Timeout, TimerFired], None]]] = MappingProxyType(
    {
        MATERIALS_WAIT.purpose: _ask_gave_up,
        VALIDATION_WAIT.purpose: _review_timeout,
        SUMMARY_WAIT.purpose: _expired,
        GAVE_UP_WAIT.purpose: _gave_up,
    }
)
"""What a fired wait does, by purpose (a test checks every purpose of ``MACHINE``)."""

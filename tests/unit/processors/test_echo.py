"""The echo stand-in is a pure handler: same input and state, same outcome."""

from __future__ import annotations

from datetime import UTC, datetime

from hermesbus import Envelope, Payload, Reply, TimerFired, UserTurn
from hermesbus.processors.echo import echo
from hermesbus.runtime import HandlerInput, SessionState
from tests import builders

T0 = datetime(2024, 5, 16, 9, 30, tzinfo=UTC)


def turn(body: UserTurn | TimerFired) -> Envelope:
    return builders.turn(span_id="sp1", payload=Payload(task="expense", body=body))


async def test_answers_a_user_turn_and_counts_turns() -> None:
    state = SessionState(version=3, data={"turns": 2})
    inp = HandlerInput(turn(UserTurn(text="不用，就这三张")), state, "echo")
    outcome = await echo(inp)
    assert outcome == await echo(inp)
    (reply,) = outcome.emit
    assert reply.payload.body == Reply(text="echo: 不用，就这三张")
    assert (reply.target, reply.trace_id, reply.timestamp) == ("user:app", "t1", T0)
    assert reply.parent_span_id == "sp1"
    assert outcome.state == {"turns": 3}


async def test_leaves_other_bodies_alone() -> None:
    fired = TimerFired(timer_id="x", due_at=T0, purpose="p")
    outcome = await echo(HandlerInput(turn(fired), SessionState(), "echo"))
    assert outcome.emit == ()
    assert outcome.state is None

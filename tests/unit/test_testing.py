"""hermesbus.testing.Harness: handlers in memory, as the runtime runs them.

First small handlers of our own (state, ids, timers, duplicates, routing, policy), then
the four real processors together on the walkthrough's first turns, with scripted tools.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

from hermesbus import Envelope, Payload, Reply, TimerFired, UserTurn
from hermesbus.compose.stack import in_memory
from hermesbus.errors import ConfigError
from hermesbus.processors import conversation, protocol
from hermesbus.runtime import (
    HandlerInput,
    ModelState,
    Outcome,
    TimerRequest,
    carried_model,
    derive_id,
    timer_fired,
)
from hermesbus.testing import Harness

from .processors.conversation.demo import demo_tools

T0 = datetime(2024, 6, 3, 1, 0, tzinfo=UTC)
IN = "hermes.conversation.in"
OUT = "hermes.conversation.out"


def turn(text: str, message_id: str = "m1", *, at: datetime = T0, session: str = "s1") -> Envelope:
    return Envelope(
        message_id=message_id,
        timestamp=at,
        source="app:web",
        target="conversation:in",
        session_id=session,
        user_id="u1",
        trace_id=f"trace-{message_id}",
        payload=Payload(body=UserTurn(text=text)),
    )


async def counter(inp: HandlerInput) -> Outcome:
    """Counts turns, answers each, waits 5 minutes for the next (a timer cancels on 'stop')."""
    body = inp.envelope.payload.body
    if isinstance(body, TimerFired):
        reply = Reply(text=f"still there? ({body.purpose})")
        return Outcome(emit=(_reply(inp, reply),), state={**inp.state.data, "nudged": True})
    assert isinstance(body, UserTurn)
    turns = int(inp.state.data.get("turns", 0)) + 1
    if body.text == "stop":
        return Outcome(state={"turns": turns}, cancel=("wait",))
    wait = TimerRequest(inp.envelope.timestamp + timedelta(minutes=5), "wait")
    answer = _reply(inp, Reply(text=f"turn {turns}"))
    return Outcome(emit=(answer,), state={"turns": turns}, timers=(wait,))


def _reply(inp: HandlerInput, reply: Reply) -> Envelope:
    return inp.envelope.model_copy(
        update={"source": "conversation:S1", "target": "user:app", "payload": Payload(body=reply)}
    )


def texts(harness: Harness) -> list[str]:
    return [
        s.envelope.payload.body.text
        for s in harness.sent
        if isinstance(s.envelope.payload.body, Reply)
    ]


async def test_state_is_carried_and_outputs_get_the_runtimes_ids() -> None:
    harness = Harness().processor("conversation", counter, [IN])
    (first,) = await harness.send(turn("hi", "m1"))
    (second,) = await harness.send(turn("again", "m2"))
    assert (first.state.data, second.state.data) == ({"turns": 1}, {"turns": 2})
    assert (first.state.version, second.state.version) == (1, 2)
    assert second.state.applied == ("m1", "m2")
    (reply,) = second.emitted
    assert reply.message_id == derive_id("m2", "out", 0) and reply.causation_id == "m2"
    assert [(s.topic, s.envelope.message_id) for s in harness.sent] == [
        (OUT, derive_id("m1", "out", 0)),
        (OUT, derive_id("m2", "out", 0)),
    ]
    assert texts(harness) == ["turn 1", "turn 2"]


async def test_a_redelivered_envelope_is_skipped_as_the_runtime_skips_it() -> None:
    harness = Harness().processor("conversation", counter, [IN])
    await harness.send(turn("hi", "m1"))
    (again,) = await harness.send(turn("hi", "m1"))
    assert again.duplicate and again.emitted == ()
    assert harness.state("conversation", "s1").data == {"turns": 1}


async def test_timers_fire_when_the_clock_reaches_them_and_a_new_one_replaces_the_old() -> None:
    harness = Harness().processor("conversation", counter, [IN])
    await harness.send(turn("hi", "m1"))
    await harness.send(turn("again", "m2", at=T0 + timedelta(minutes=2)))
    (armed,) = harness.timers()  # one per session and purpose: m2's replaced m1's
    assert armed.due_at == T0 + timedelta(minutes=7)
    assert armed.envelope == timer_fired("conversation", turn("again", "m2"), armed.request)
    assert await harness.advance(minutes=4) == []  # 6 minutes after T0: not yet
    (fired,) = await harness.advance(minutes=1)
    assert fired.envelope.message_id == derive_id("m2", "timer", "wait")
    assert texts(harness)[-1] == "still there? (wait)"
    assert harness.timers() == [] and harness.now == T0 + timedelta(minutes=7)


async def test_a_cancelled_timer_never_fires() -> None:
    harness = Harness().processor("conversation", counter, [IN])
    await harness.send(turn("hi", "m1"))
    await harness.send(turn("stop", "m2"))
    assert harness.timers() == [] and await harness.advance(hours=1) == []
    with pytest.raises(ConfigError, match="no timer 'wait' is armed"):
        await harness.fire("wait")


async def test_sessions_keep_their_own_state() -> None:
    harness = Harness().processor("conversation", counter, [IN])
    await harness.send(turn("a", "m1", session="s1"))
    await harness.send(turn("b", "m2", session="s2", at=T0 + timedelta(minutes=1)))
    await harness.send(turn("c", "m3", session="s1", at=T0 + timedelta(minutes=2)))
    assert harness.state("conversation", "s1").data == {"turns": 2}
    assert harness.state("conversation", "s2").data == {"turns": 1}
    assert [a.session_id for a in harness.timers()] == ["s2", "s1"]  # soonest first


async def test_state_that_json_cannot_hold_fails_as_it_would_in_production() -> None:
    async def keeps_a_set(inp: HandlerInput) -> Outcome:
        return Outcome(state={"seen": {inp.envelope.message_id}})

    harness = Harness().processor("conversation", keeps_a_set, [IN])
    with pytest.raises(TypeError, match="not JSON serializable: set"):
        await harness.send(turn("hi"))


class Tally(BaseModel):
    model_config = ConfigDict(frozen=True)
    turns: int = 0
    said: dict[str, int] = {}


async def test_a_model_state_comes_back_as_the_model_the_handler_left() -> None:
    seen: list[Tally | None] = []
    left: list[Tally] = []

    async def tally(inp: HandlerInput) -> Outcome:
        before = carried_model(inp.state.data, Tally)
        seen.append(before)
        now = before or Tally.model_validate(dict(inp.state.data))
        text = str(getattr(inp.envelope.payload.body, "text", ""))
        said = {text: now.said.get(text, 0) + 1, **now.said}
        left.append(Tally(turns=now.turns + 1, said=said))
        return Outcome(state=ModelState(left[-1]))

    harness = Harness().processor("conversation", tally, [IN])
    await harness.send(turn("b", "m1"))
    await harness.send(turn("a", "m2"))
    first, second = seen
    assert first is None  # nothing saved yet: validated from the empty state
    assert second is left[0]  # the very model, not validated again
    assert second == Tally(turns=1, said={"b": 1})
    saved = harness.state("conversation", "s1").data
    assert dict(saved) == {"turns": 2, "said": {"a": 1, "b": 1}}  # reads as its JSON dump
    assert list(saved["said"]) == ["a", "b"]
    assert carried_model(saved, Reply) is None and carried_model({"turns": 2}, Tally) is None


async def test_emitted_envelopes_reach_the_processors_of_their_topics_until_quiet() -> None:
    async def relay(inp: HandlerInput) -> Outcome:
        """The dispatcher's part: pass the turn's text on to the user."""
        text = inp.envelope.payload.body.text  # type: ignore[union-attr]
        out = inp.envelope.model_copy(
            update={
                "source": "mcp:dispatcher",
                "target": "user:app",
                "payload": Payload(body=Reply(text=text.upper())),
            }
        )
        return Outcome(emit=(out,))

    async def ask(inp: HandlerInput) -> Outcome:
        out = inp.envelope.model_copy(
            update={"source": "conversation:S1", "target": "mcp:dispatcher"}
        )
        return Outcome(emit=(out,))

    harness = (
        Harness()
        .processor("conversation", ask, [IN])
        .processor("dispatcher", relay, [protocol.DISPATCHER_TOPIC])
    )
    handled = await harness.send(turn("hi"))
    assert [(h.processor, h.topic) for h in handled] == [
        ("conversation", IN),
        ("dispatcher", protocol.DISPATCHER_TOPIC),
    ]
    assert texts(harness) == ["HI"] and harness.sent[0].topic == OUT


async def test_the_write_policy_refuses_what_a_runtime_would_dead_letter() -> None:
    harness = Harness(policy=protocol.ProtocolPolicy()).processor("conversation", counter, [IN])
    forged = turn("hi").model_copy(update={"source": "tool:org_tool"})
    assert await harness.send(forged) == []
    (refused,) = harness.refused
    assert refused.topic == IN and "'tool' may not write hermes.conversation.in" in refused.reason


async def test_a_loop_between_processors_is_stopped_with_an_error() -> None:
    async def echo(inp: HandlerInput) -> Outcome:
        again = inp.envelope.model_copy(update={"message_id": inp.envelope.message_id + "'"})
        return Outcome(emit=(again,))

    harness = Harness().processor("conversation", echo, [IN])
    with pytest.raises(ConfigError, match="a loop"):
        await harness.send(turn("hi"))


async def test_a_prefix_names_the_topics_as_up_does() -> None:
    harness = Harness(prefix="sandbox.").processor("conversation", counter, [IN])
    (handled,) = await harness.send(turn("hi"))
    assert handled.topic == "sandbox." + IN
    assert [s.topic for s in harness.sent] == ["sandbox." + OUT]


# -- the four processors on the walkthrough's first turns ---------------------------------


async def test_the_four_processors_answer_the_first_turn_with_the_budget(tmp_path: Path) -> None:
    tools, healthy = demo_tools("org_tool", "finance_tool")
    async with in_memory(
        tmp_path, tools=tools, health=healthy, policy=protocol.ProtocolPolicy()
    ) as harness:
        handled = await harness.send(
            turn("我要报上个月去深圳的差旅费", "turn-1", session="sess_456")
        )
        assert harness.refused == []
        path = [(h.processor, type(h.envelope.payload.body).__name__) for h in handled]
        assert path == [  # breadth first, as the protocol says (processors/protocol.py)
            ("conversation", "UserTurn"),
            ("dispatcher", "StateSnapshot"),  # None -> S1
            ("dispatcher", "ToolCall"),  # org_tool
            ("dispatcher", "ToolCall"),  # finance_tool
            ("memory", "StateSnapshot"),  # forwarded
            ("memory", "MemoryQuery"),  # memory first
            ("dispatcher", "MemoryContext"),
            ("tool", "ToolCall"),
            ("tool", "ToolCall"),
            ("dispatcher", "ToolResult"),
            ("dispatcher", "ToolResult"),
            ("memory", "MemoryWrite"),  # org_tool's verified fact
            ("memory", "MemoryWrite"),  # and its symbol
            ("conversation", "ToolResults"),  # the cycle's one answer
            ("dispatcher", "StateSnapshot"),  # S1 -> S2
            ("memory", "StateSnapshot"),
        ]
        assert [c.tool for c, _ in tools.calls] == ["org_tool", "finance_tool"]
        assert tools.asked("finance_tool") == [{"action": "budget", "user_id": "u1"}]
        (budget,) = texts(harness)
        assert "采购部" in budget and "125,000 CNY" in budget
        assert harness.state("conversation", "sess_456").data["state"] == "S2"
        # the walk remembered the user's department (a short-term symbol from org_tool)
        assert "user_dept" in harness.state("memory", "sess_456").data["symbols"]
        # S2 waits 5 minutes for the invoices, then asks whether the user gave up
        (wait,) = harness.timers(conversation.NAME)
        fired = await harness.advance(minutes=5)
        assert fired[0].envelope.message_id == wait.envelope.message_id
        assert harness.state("conversation", "sess_456").data["state"] == "S4"
        assert len(texts(harness)) == 2

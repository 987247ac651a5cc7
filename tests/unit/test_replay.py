"""Shadow replay over hand-made recordings: what is compared, what diverges, what is skipped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hermesbus import Diagnostics, Envelope, Payload, Reply, UserTurn
from hermesbus.processors.protocol import ProtocolPolicy
from hermesbus.replay.shadow import (
    Recording,
    Shadow,
    consumed_order,
    dead_places,
    difference,
    shadow,
)
from hermesbus.runtime import HandlerInput, Outcome, derive_id
from hermesbus.trace.spans import Hop

T0 = datetime(2024, 6, 3, 1, 0, tzinfo=UTC)
IN, OUT = "hermes.conversation.in", "hermes.conversation.out"


def turn(n: int, text: str = "hi", *, session: str = "s1", source: str = "app:web") -> Envelope:
    return Envelope(
        message_id=f"m{n}",
        timestamp=T0 + timedelta(seconds=n),
        source=source,
        target="conversation:in",
        session_id=session,
        user_id="u1",
        trace_id=f"t{n}",
        payload=Payload(body=UserTurn(text=text)),
    )


def numbered(words: str = "turn") -> Shadow:
    """Replies ``<words> <count of turns so far>``: its state carries the count."""

    async def handle(inp: HandlerInput) -> Outcome:
        count = int(inp.state.data.get("count", 0)) + 1
        reply = inp.envelope.model_copy(
            update={
                "source": "conversation:S1",
                "target": "user:app",
                "payload": Payload(body=Reply(text=f"{words} {count}")),
            }
        )
        return Outcome(emit=(reply,), state={"count": count})

    return Shadow("conversation", handle, (IN,))


def record(*inputs: Envelope, words: str = "turn") -> Recording:
    """What the processor did then: its inputs and outputs, as the log holds them."""
    hops: list[Hop] = []
    state: dict[str, int] = {}
    for offset, env in enumerate(inputs):
        hops.append(Hop(env, IN, 0, offset, offset * 10))
        count = state.get(env.session_id, 0) + 1
        state[env.session_id] = count
        out = env.model_copy(
            update={
                "message_id": derive_id(env.message_id, "out", 0),
                "causation_id": env.message_id,
                "source": "conversation:S1",
                "target": "user:app",
                "payload": Payload(body=Reply(text=f"{words} {count}")),
            }
        )
        hops.append(Hop(out, OUT, 0, offset, offset * 10 + 1))
    return Recording.of(hops, "test")


async def test_the_same_code_replays_without_divergence() -> None:
    recording = record(turn(1), turn(2), turn(3))
    report = await shadow(recording, [numbered()])
    assert not report.diverged
    assert report.replayed == report.compared == {"conversation": 3}
    assert report.outputs == 3


async def test_a_changed_text_is_the_first_divergence_with_its_field_path() -> None:
    recording = record(turn(1), turn(2))
    report = await shadow(recording, [numbered("reply")])
    (found,) = report.divergences  # only the first: after it the state differs too
    assert (found.processor, found.input.envelope.message_id, found.index) == (
        "conversation",
        "m1",
        0,
    )
    assert found.message_id == derive_id("m1", "out", 0)
    assert (found.path, found.recorded, found.replayed) == (
        "payload.body.text",
        "turn 1",
        "reply 1",
    )
    assert found.as_json()["input"] == {
        "message_id": "m1",
        "topic": IN,
        "partition": 0,
        "offset": 0,
        "timestamp": 0,
        "body": "UserTurn",
    }
    assert "field payload.body.text" in "\n".join(found.lines())


async def test_only_the_slice_is_compared_but_the_state_is_rebuilt_from_before_it() -> None:
    recording = record(turn(1), turn(2), turn(3))
    report = await shadow(recording, [numbered()], selected=lambda hop: hop.offset == 2)
    assert not report.diverged  # "turn 3": the count came from the two turns before
    assert report.compared == {"conversation": 1} and report.replayed == {"conversation": 3}


async def test_a_missing_or_extra_output_is_a_divergence_of_the_whole_envelope() -> None:
    recording = record(turn(1))

    async def silent(inp: HandlerInput) -> Outcome:
        return Outcome(state={"count": 1})

    report = await shadow(recording, [Shadow("conversation", silent, (IN,))])
    (found,) = report.divergences
    assert found.path == "" and found.replayed is None
    assert found.recorded["payload"]["body"]["@type"] == "hermes.mcp.Reply"
    assert found.recorded["payload"]["body"]["text"] == "turn 1"


async def test_a_handler_that_raises_is_reported_with_its_error() -> None:
    recording = record(turn(1))

    async def broken(inp: HandlerInput) -> Outcome:
        raise KeyError("count")

    (found,) = (await shadow(recording, [Shadow("conversation", broken, (IN,))])).divergences
    assert found.error == "KeyError: 'count'"
    assert found.lines()[1] == "  the handler raised: KeyError: 'count'"


async def test_what_was_refused_or_dead_lettered_then_does_not_run_now() -> None:
    good = record(turn(1))
    forged = turn(2, source="tool:org_tool")  # a tool may not speak as the user
    dead = turn(3)
    hops = [*good.hops, Hop(forged, IN, 0, 1, 20), Hop(dead, IN, 0, 2, 30)]
    recording = Recording.of(hops, "test", dead=[(IN, 0, 2)])
    report = await shadow(recording, [numbered()], policy=ProtocolPolicy())
    assert not report.diverged and report.replayed == {"conversation": 1}


async def test_other_sessions_are_run_only_by_a_processor_whose_state_spans_them() -> None:
    recording = record(turn(1, session="s1"), turn(2, session="s2"))
    mine = await shadow(recording, [numbered()], sessions=["s2"])
    assert mine.replayed == {"conversation": 1} and not mine.diverged
    spanning = Shadow("conversation", numbered().handler, (IN,), sessions="all")
    every = await shadow(recording, [spanning], sessions=["s2"])
    assert every.replayed == {"conversation": 2} and every.compared == {"conversation": 1}


def test_difference_ignores_diagnostics_and_names_a_changed_kind() -> None:
    a = turn(1)
    later = a.model_copy(update={"diagnostics": Diagnostics(processing_time_ms=99.0)})
    assert difference(a, later) is None
    other = a.model_copy(update={"payload": Payload(body=Reply(text="hi"))})
    assert difference(a, other) == ("payload.body.@type", "hermes.mcp.UserTurn", "hermes.mcp.Reply")


def test_a_dead_letter_says_where_it_came_from() -> None:
    headers = [
        ("hermes.origin.topic", b"hermes.tool"),
        ("hermes.origin.partition", b"3"),
        ("hermes.origin.offset", b"41"),
    ]
    assert dead_places(headers) == ("hermes.tool", 3, 41)
    assert dead_places([("hermes.origin.topic", b"x")]) is None


def test_inputs_run_in_offset_order_per_partition_whatever_their_times() -> None:
    """Two producers' records on one partition can be timed out of offset order."""
    a, b, c = (
        Hop(turn(n), IN, part, offset, at)
        for n, part, offset, at in ((1, 0, 0, 50), (2, 0, 1, 10), (3, 1, 0, 20))
    )
    assert consumed_order([c, b, a]) == [c, a, b]  # partition 0 keeps 0 then 1; 1 fits by time


def test_a_partition_logged_twice_is_read_one_log_after_the_other() -> None:
    """The archive keeps two embedded-broker runs of a partition, both from offset 0."""
    first = [Hop(turn(n), IN, 0, n, 100 + n) for n in range(3)]
    second = [Hop(turn(10 + n), IN, 0, n, 900 + n) for n in range(2)]
    late = Hop(turn(20), IN, 0, 3, 101)  # timed before offset 2 by its producer's clock
    ordered = consumed_order([*second, late, *first])
    assert [(h.offset, h.appended_ms) for h in ordered] == [
        (0, 100),
        (1, 101),
        (2, 102),
        (3, 101),
        (0, 900),
        (1, 901),
    ]

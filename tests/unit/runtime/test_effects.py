"""Outcome -> records is pure: the same input gives byte-identical records."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from hermesbus import Envelope, Payload, Reply, TimerFired, UserTurn
from hermesbus.codec import Codec
from hermesbus.contract import headers as h
from hermesbus.contract.envelope import Metadata, RetryPolicy
from hermesbus.errors import DecodeError
from hermesbus.identity import PUBLIC_SIGNATURE, SIGNATURE
from hermesbus.runtime import Outcome, TimerRequest, derive_id
from hermesbus.runtime import _effects as fx
from tests import builders, signing

T0 = datetime(2024, 5, 16, 9, 30, tzinfo=UTC)
CODEC = Codec()
GUARD = signing.guard("conversation")
SIGN = GUARD.sign


def turn(attempt: int = 1) -> Envelope:
    return builders.turn(
        UserTurn(text="我要报上个月去深圳的差旅费"),
        session_id="sess_456",
        trace_id="trace_789",
        metadata=Metadata(
            retry_policy=RetryPolicy(max_attempts=5, backoff_ms=100), attempt=attempt
        ),
    )


def reply(text: str) -> Envelope:
    return turn().model_copy(
        update={"target": "user:app", "payload": Payload(body=Reply(text=text))}
    )


def test_outputs_get_ids_derived_from_the_input_and_their_index() -> None:
    outcome = Outcome(emit=(reply("a"), reply("b")))
    first = fx.outputs(CODEC, SIGN, turn(), outcome, "p.")
    again = fx.outputs(CODEC, SIGN, turn(), outcome, "p.")
    assert first == again  # byte for byte
    decoded = [CODEC.decode(r.value) for r in first]
    assert [e.message_id for e in decoded] == [derive_id("m1", "out", 0), derive_id("m1", "out", 1)]
    assert {e.causation_id for e in decoded} == {"m1"}
    assert {r.topic for r in first} == {"p.hermes.conversation.out"}
    assert {r.key for r in first} == {b"sess_456"}
    names = [name for name, _ in first[0].headers]  # what apps read is also signed for them
    assert names == [h.TRACE_ID, h.MESSAGE_ID, h.TRACEPARENT, SIGNATURE, PUBLIC_SIGNATURE]
    for r in first:  # signed by the processor, over the topic, key and value
        assert GUARD.verify(r.topic, r.key, r.value, r.headers) == "conversation"


def test_a_handler_may_name_the_causation_itself() -> None:
    explicit = reply("a").model_copy(update={"causation_id": "m0"})
    (record,) = fx.outputs(CODEC, SIGN, turn(), Outcome(emit=(explicit,)), "")
    assert CODEC.decode(record.value).causation_id == "m0"


def test_timers_fire_on_the_session_partition_at_envelope_time() -> None:
    due = T0 + timedelta(minutes=5)
    request = TimerRequest(due_at=due, purpose="S2.wait", data_json='{"state":"S2"}')
    now_ms = 1_900_000_000_000  # the runtime's clock, far from the envelope's time
    (timer,) = fx.timers(
        CODEC, SIGN, "conversation", turn(), [request], topic="in", partition=3, now_ms=now_ms
    )
    assert turn().timestamp == T0
    assert timer.due_at_ms == now_ms + 5 * 60_000  # five minutes after it was scheduled
    assert timer.record.partition == 3
    assert timer.record.topic == "in"
    fired = CODEC.decode(timer.record.value)
    assert fired.timestamp == due  # the envelope's time, never the clock
    assert fired.message_id == timer.timer_id == derive_id("m1", "timer", "S2.wait")
    assert fired.payload.body == TimerFired(
        timer_id=timer.timer_id, due_at=due, purpose="S2.wait", data_json='{"state":"S2"}'
    )
    assert fired.causation_id == "m1"
    assert fired.source == "conversation:timer"
    assert fired.target == "conversation:in"


def test_retries_back_off_exponentially_with_a_cap() -> None:
    delays = [
        fx.retry_timer(
            CODEC, SIGN, "c", turn(attempt), now_ms=0, max_backoff_ms=350, topic="in", partition=0
        ).due_at_ms
        for attempt in (1, 2, 3, 4)
    ]
    assert delays == [100, 200, 350, 350]
    timer = fx.retry_timer(
        CODEC, SIGN, "c", turn(2), now_ms=0, max_backoff_ms=10**6, topic="in", partition=0
    )
    again = CODEC.decode(timer.record.value)
    assert again.metadata.attempt == 3
    assert again.message_id == "m1"  # the same envelope, so its outputs keep their ids
    assert h.header(list(timer.record.headers), h.DLQ_ATTEMPT) == "3"


def test_dead_letters_keep_the_bytes_and_say_where_they_came_from() -> None:
    letter = fx.dead_letter(
        topic="hermes.tool",
        partition=4,
        offset=1234,
        key=b"sess_456",
        value=b"\xc3\x01garbage",
        headers=[("trace_id", b"t1"), (h.DLQ_ATTEMPT, b"9")],
        error=DecodeError("truncated body"),
        processor="tool",
        attempt=2,
        dlq_topic="hermes.dlq",
    )
    assert letter.value == b"\xc3\x01garbage"
    assert letter.key == b"sess_456"
    headers = dict(letter.headers)
    assert headers == {
        "trace_id": b"t1",
        h.DLQ_ORIGIN_TOPIC: b"hermes.tool",
        h.DLQ_ORIGIN_PARTITION: b"4",
        h.DLQ_ORIGIN_OFFSET: b"1234",
        h.DLQ_ERROR_CLASS: b"hermesbus.errors.DecodeError",
        h.DLQ_ERROR_MESSAGE: b"truncated body",
        h.DLQ_PROCESSOR: b"tool",
        h.DLQ_ATTEMPT: b"2",
    }


def test_derived_ids_are_the_uuid5_of_the_joined_parts() -> None:
    # the fast path must mint exactly the ids every earlier run (and every log) holds
    namespace = uuid.UUID("6f1c7a52-3f0e-4c55-9a77-6d3b2f8e1c40")
    cases = [("m1", "out", 0), ("会话", "span", 12), ("x",), (), ("a/b", None, 3.5)]
    cases += [(str(uuid.UUID(int=n * 7919)), "timer", f"S{n}.wait") for n in range(200)]
    for parts in cases:
        expected = uuid.uuid5(namespace, "/".join(str(p) for p in parts))
        assert derive_id(*parts) == str(expected)
    assert derive_id("m1", "out", 0) == "cdba59bc-390c-5399-8f65-408829b7aceb"

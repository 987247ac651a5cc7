"""Turn a handler's outcome into records: outputs, timers, retries and dead letters.

Everything here is a pure function of its inputs, so the same input envelope and
state produce byte-identical records on every replay.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from aiokafka import ConsumerRecord

from hermesbus.codec import Codec
from hermesbus.contract import headers as h
from hermesbus.contract.envelope import Envelope
from hermesbus.contract.fields import epoch_ms
from hermesbus.contract.payloads import ContextValue, ErrorReport, Payload, TimerFired
from hermesbus.errors import IdentityError, StoreLost
from hermesbus.topics import topic_for

from ._model import Outcome, TimerRequest, derive_id
from ._store import OutRecord, StoredTimer

__all__ = [
    "IDENTITY_ALERT_TARGET",
    "RETRY_PREFIX",
    "STORE_ALERT_TARGET",
    "Sign",
    "dead_letter",
    "emitted",
    "identity_alert",
    "notice",
    "outputs",
    "retry_timer",
    "store_alert",
    "timer_fired",
    "timers",
]

RETRY_PREFIX = "retry:"
"""Purpose of the durable timer that re-sends a failed envelope."""
_MAX_ERROR_HEADER = 2000
IDENTITY_ALERT_TARGET = "alerts:identity"
"""Where a refused signer is reported (``hermes.alerts``)."""
STORE_ALERT_TARGET = "alerts:store"
"""Where a lost store is reported (``hermes.alerts``)."""
_UNKNOWN = "unknown"

Sign = Callable[
    [str, bytes | None, bytes, Sequence[tuple[str, bytes]]], tuple[tuple[str, bytes], ...]
]
"""``(topic, key, value, headers) -> headers`` with the processor's signature added."""


def _record(
    codec: Codec, sign: Sign, envelope: Envelope, topic: str, partition: int | None
) -> OutRecord:
    value = codec.encode(envelope)
    key = envelope.session_id.encode()
    headers = sign(topic, key, value, h.envelope_headers(envelope))
    return OutRecord(topic, key, value, headers, partition)


def outputs(
    codec: Codec, sign: Sign, source: Envelope, outcome: Outcome, prefix: str
) -> tuple[OutRecord, ...]:
    """The emitted envelopes with ids derived from the input id and their index."""
    records = []
    for final in emitted(source, outcome):
        records.append(_record(codec, sign, final, topic_for(final.target, prefix), None))
    return tuple(records)


def notice(codec: Codec, sign: Sign, envelope: Envelope, prefix: str) -> OutRecord:
    """A processor's news to another (a pause notice), on its target's topic."""
    return _record(codec, sign, envelope, topic_for(envelope.target, prefix), None)


def emitted(source: Envelope, outcome: Outcome) -> tuple[Envelope, ...]:
    """The envelopes as they go out: ids derived from ``source``'s id and their index,
    causation ``source`` unless the handler named one (the same on every replay)."""
    return tuple(_final(source, index, envelope) for index, envelope in enumerate(outcome.emit))


def _final(source: Envelope, index: int, envelope: Envelope) -> Envelope:
    message_id = derive_id(source.message_id, "out", index)
    if envelope.message_id == message_id and envelope.causation_id:
        return envelope  # made so already (``protocol.answer`` does): no copy
    update = {"message_id": message_id, "causation_id": envelope.causation_id or source.message_id}
    return envelope.model_copy(update=update)


def timer_fired(processor: str, source: Envelope, request: TimerRequest) -> Envelope:
    """The ``timer_fired`` envelope ``request`` (set while handling ``source``) sends: to
    ``source``'s target, dated ``due_at``, its id derived from ``source`` and the purpose."""
    timer_id = derive_id(source.message_id, "timer", request.purpose)
    return Envelope(
        message_id=timer_id,
        timestamp=request.due_at,
        source=f"{processor}:timer",
        target=source.target,
        session_id=source.session_id,
        user_id=source.user_id,
        trace_id=source.trace_id,
        causation_id=source.message_id,
        payload=Payload(
            task="timer",
            body=TimerFired(
                timer_id=timer_id,
                due_at=request.due_at,
                purpose=request.purpose,
                data_json=request.data_json,
            ),
        ),
    )


def timers(
    codec: Codec,
    sign: Sign,
    processor: str,
    source: Envelope,
    requests: Sequence[TimerRequest],
    *,
    topic: str,
    partition: int,
    now_ms: int,
) -> tuple[StoredTimer, ...]:
    """Durable timers that fire ``timer_fired`` envelopes on the session's own partition.

    A timer is due ``due_at - envelope time`` after ``now_ms`` (the runtime's clock when
    it was scheduled): an app's skewed clock, an old envelope in a backlog or a replayed
    conversation keep a 5-minute wait a 5-minute wait. The fired envelope carries
    ``due_at`` as asked, so its bytes are the same on every replay.
    """
    result = []
    for request in requests:
        fired = timer_fired(processor, source, request)
        record = _record(codec, sign, fired, topic, partition)
        due_ms = now_ms + max(0, epoch_ms(fired.timestamp) - epoch_ms(source.timestamp))
        result.append(
            StoredTimer(
                fired.message_id, processor, source.session_id, request.purpose, due_ms, record
            )
        )
    return tuple(result)


def retry_timer(
    codec: Codec,
    sign: Sign,
    processor: str,
    envelope: Envelope,
    *,
    now_ms: int,
    max_backoff_ms: int,
    topic: str,
    partition: int,
) -> StoredTimer:
    """Re-send ``envelope`` with ``attempt + 1`` after ``backoff_ms * 2^(attempt-1)``."""
    attempt = envelope.metadata.attempt
    backoff = min(envelope.metadata.retry_policy.backoff_ms * 2 ** (attempt - 1), max_backoff_ms)
    again = envelope.model_copy(
        update={"metadata": envelope.metadata.model_copy(update={"attempt": attempt + 1})}
    )
    record = _record(codec, sign, again, topic, partition)
    record = OutRecord(
        record.topic,
        record.key,
        record.value,
        (*record.headers, (h.DLQ_ATTEMPT, str(attempt + 1).encode())),
        partition,
    )
    timer_id = derive_id(envelope.message_id, "retry", attempt)
    purpose = f"{RETRY_PREFIX}{envelope.message_id}"
    return StoredTimer(timer_id, processor, envelope.session_id, purpose, now_ms + backoff, record)


def dead_letter(
    *,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes,
    headers: Sequence[tuple[str, bytes]],
    error: BaseException,
    processor: str,
    attempt: int,
    dlq_topic: str,
) -> OutRecord:
    """The dead letter of a record (for ``dlq_topic``): its original bytes, unchanged, with
    headers saying where it came from, who failed it and why."""
    message = str(error) or type(error).__name__
    extra = (
        (h.DLQ_ORIGIN_TOPIC, topic.encode()),
        (h.DLQ_ORIGIN_PARTITION, str(partition).encode()),
        (h.DLQ_ORIGIN_OFFSET, str(offset).encode()),
        (h.DLQ_ERROR_CLASS, _qualname(error).encode()),
        (h.DLQ_ERROR_MESSAGE, message[:_MAX_ERROR_HEADER].encode()),
        (h.DLQ_PROCESSOR, processor.encode()),
        (h.DLQ_ATTEMPT, str(attempt).encode()),
    )
    names = {name for name, _ in extra}
    kept = tuple((k, bytes(v)) for k, v in headers if k not in names)
    return OutRecord(dlq_topic, key, value, kept + extra)


def _qualname(error: BaseException) -> str:
    kind = type(error)
    return f"{kind.__module__}.{kind.__qualname__}"


def identity_alert(
    codec: Codec,
    sign: Sign,
    *,
    processor: str,
    identity: str,
    record: ConsumerRecord[bytes, bytes],
    envelope: Envelope | None,
    error: IdentityError,
    topic: str,
) -> OutRecord:
    """An ``ErrorReport`` on ``hermes.alerts``: who was refused, where, and why.

    Its id is derived from the refused record's position, so a redelivery of the refused
    record raises the same alert again (deduplicated downstream), never a new one.
    """
    origin = f"{record.topic}/{record.partition}/{record.offset}"
    key = record.key.decode("utf-8", "replace") if record.key else ""
    context: dict[str, ContextValue] = {
        "origin_topic": record.topic,
        "origin_partition": record.partition,
        "origin_offset": record.offset,
        "refused_by": processor,
    }
    if envelope is not None:
        context["claimed_source"] = envelope.source
        context["refused"] = envelope.message_id
    report = ErrorReport(
        component=f"{identity}:{processor}",
        code=error.code,
        message=f"{error.reason} (record {origin})",
        advice="the record was dead-lettered and did not run; find its producer "
        "(origin in hermes.dlq) and give it its component's key, or revoke the key it used",
        retryable=False,
    )
    alert = Envelope(
        message_id=derive_id("refused", origin),
        timestamp=envelope.timestamp if envelope is not None else max(record.timestamp, 0),
        source=f"{identity}:{processor}",
        target=IDENTITY_ALERT_TARGET,
        session_id=envelope.session_id if envelope is not None else key or _UNKNOWN,
        user_id=envelope.user_id if envelope is not None else "",
        trace_id=envelope.trace_id if envelope is not None else derive_id("refused", origin),
        causation_id=envelope.message_id if envelope is not None else None,
        payload=Payload(task="identity", context=context, body=report),
    )
    return _record(codec, sign, alert, topic, None)


def store_alert(
    codec: Codec,
    sign: Sign,
    *,
    processor: str,
    identity: str,
    record: ConsumerRecord[bytes, bytes],
    session_id: str,
    lost: StoreLost,
    at_ms: int,
    topic: str,
) -> OutRecord:
    """An ``ErrorReport`` on ``hermes.alerts``: a store the bus uses is lost (its mark is
    gone or another), and what it holds (the first held record) until it is adopted.

    Its id and trace are derived from the store and the mark it lost, so every process
    that meets the same loss raises the same alert (one in the trace index); the next
    loss of the store (after an adoption) is a new one.
    """
    alert_id = derive_id("store-lost", lost.store, lost.epoch)
    context: dict[str, ContextValue] = {
        "store": lost.store,
        "lost_mark": lost.epoch,
        "held_by": processor,
        "held_topic": record.topic,
        "held_partition": record.partition,
        "held_offset": record.offset,
    }
    report = ErrorReport(
        component=f"{identity}:{processor}",
        code="store_lost",
        message=lost.said,
        advice="processing that uses this store is paused in place, nothing is lost or "
        "committed past it; run `hermesbus doctor` to see it, then `hermesbus stores adopt` "
        "once the loss is accepted (sessions start afresh), or restore the store's data",
        retryable=True,
    )
    alert = Envelope(
        message_id=alert_id,
        timestamp=at_ms,
        source=f"{identity}:{processor}",
        target=STORE_ALERT_TARGET,
        session_id=session_id or _UNKNOWN,
        user_id="",
        trace_id=alert_id,
        payload=Payload(task="store", context=context, body=report),
    )
    return _record(codec, sign, alert, topic, None)

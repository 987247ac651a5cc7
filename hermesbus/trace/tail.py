"""The log as it is, record by record: what ``hermesbus tail`` prints.

Reads topics by plain assignment (no consumer group: no processor's offsets are read,
moved or committed), from a start to an end given as the beginning, the end, an offset,
an append time or a time before now, and decodes each record in either framing. A
record that does not decode is listed with the reason, never skipped. Without
``follow`` the slice is read up to the ends the topics had when it started and listed
in log order (by append time, then topic, partition and offset); with ``follow`` new
records are listed as they come.
"""

from __future__ import annotations

import asyncio
import base64
import re
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError

from hermesbus.client import partition_for_key
from hermesbus.codec import Codec, default_codec
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig, kafka_reason, start_or_close
from hermesbus.contract.envelope import Envelope
from hermesbus.contract.headers import TRACE_ID, header
from hermesbus.errors import BrokerError, HermesError
from hermesbus.topics import Catalog

__all__ = [
    "Filters",
    "Position",
    "Tailed",
    "catalog_topics",
    "drain",
    "ends",
    "partitions",
    "position",
    "tail",
]

_UNITS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_BEFORE = re.compile(r"^-(\d+)(ms|s|m|h|d)$")
_COMPONENTS = {"mcp": "dispatcher"}
"""The dispatcher signs as ``mcp:dispatcher``: ``--component dispatcher`` finds it too."""
_POLL_MS = 250


@dataclass(frozen=True, slots=True)
class Position:
    """Where a slice starts or ends in each partition: ``beginning``, ``end``, an
    ``offset`` (the same in every partition) or a ``time`` (epoch ms: the first record
    appended at or after it)."""

    kind: Literal["beginning", "end", "offset", "time"]
    value: int = 0


def position(text: str, now_ms: int | None = None) -> Position:
    """``beginning``, ``end``, ``OFFSET``, ``@EPOCH_MS`` or ``-DURATION`` (``-15m``: that
    long before now). A ValueError says what is accepted."""
    value = text.strip().lower()
    if value in ("beginning", "end"):
        return Position(value)  # type: ignore[arg-type]
    if value.isdigit():
        return Position("offset", int(value))
    if value.startswith("@") and value[1:].isdigit():
        return Position("time", int(value[1:]))
    before = _BEFORE.match(value)
    if before:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return Position("time", now - int(before.group(1)) * _UNITS[before.group(2)])
    raise ValueError(
        f"{text!r} is not a position: use beginning, end, an offset (42), an append time "
        "in epoch ms (@1764669600000) or a time before now (-15m, -2h, -1d, -30s)"
    )


@dataclass(frozen=True, slots=True)
class Tailed:
    """One record: where it is in the log, its key and headers, and its envelope (or why
    it has none)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    envelope: Envelope | None
    error: str | None = None
    value: bytes = b""
    """The record's bytes as the broker has them."""

    def as_json(self) -> dict[str, Any]:
        """One JSON object: coordinates, headers (text, or base64 when not UTF-8), the key
        and the envelope as its JSON (or null, with ``error``)."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "timestamp": self.timestamp_ms,
            "key": _text(self.key) if self.key is not None else None,
            "headers": [{"key": k, **_header_value(v)} for k, v in self.headers],
            "envelope": self.envelope.model_dump(mode="json") if self.envelope else None,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class Filters:
    """Which records are listed: of one session, one trace, one component (its source)."""

    session: str | None = None
    trace: str | None = None
    component: str | None = None

    def keeps(self, tailed: Tailed) -> bool:
        envelope = tailed.envelope
        if envelope is None:  # undecodable: its key is the session, a header the trace
            session = _text(tailed.key) if tailed.key is not None else None
            trace = header(list(tailed.headers), TRACE_ID)
            return (
                self.component is None
                and self.session in (None, session)
                and self.trace in (None, trace)
            )
        if self.session is not None and envelope.session_id != self.session:
            return False
        if self.trace is not None and envelope.trace_id != self.trace:
            return False
        if self.component is None:
            return True
        source = envelope.source
        component = source.partition(":")[0]
        return self.component in (source, component, _COMPONENTS.get(component))


def catalog_topics(prefix: str = "") -> list[str]:
    """Every topic of the catalog that carries envelopes, prefixed."""
    return [prefix + spec.name for spec in Catalog.load() if spec.value_schema]


def partitions(counts: Mapping[str, int], session_id: str | None) -> list[TopicPartition]:
    """Every partition, or the session's one of each topic (co-partitioned by key)."""
    parts = []
    for topic, count in counts.items():
        numbers = list(range(count))
        if session_id is not None and numbers:
            numbers = [partition_for_key(session_id.encode(), numbers)]
        parts += [TopicPartition(topic, n) for n in numbers]
    return parts


async def tail(
    kafka: KafkaConfig,
    topics: Sequence[str],
    *,
    start: Position,
    end: Position | None = None,
    follow: bool = False,
    filters: Filters | None = None,
    codec: Codec | None = None,
    missing_ok: bool = False,
) -> AsyncIterator[Tailed]:
    """The records of ``topics`` from ``start`` to ``end`` (excluded) that ``filters``
    keeps. With a session filter only its partition of each topic is read (a session is
    on the same partition number of every topic). A missing topic is a BrokerError,
    unless ``missing_ok`` (then only those that exist are read; none is still an error)."""
    codec, filters = codec or default_codec(), filters or Filters()
    async with KafkaAdmin(kafka) as admin:
        counts = {name: t.partitions for name, t in (await admin.describe(list(topics))).items()}
    missing = [name for name in topics if name not in counts]
    if missing and not (missing_ok and counts):
        raise BrokerError(
            f"no topic {', '.join(missing)} on {kafka.bootstrap}: "
            "`hermesbus topics list` shows what exists (another --prefix?)",
            retriable=False,
        )
    parts = partitions(counts, filters.session)
    consumer = AIOKafkaConsumer(**kafka.client_kwargs(), group_id=None, enable_auto_commit=False)
    await start_or_close(consumer.start, consumer.stop, f"tail: cannot reach {kafka.address}")
    try:
        consumer.assign(parts)
        within_s = kafka.request_timeout_ms / 1000
        firsts, stops = await _bounds(consumer, parts, start, end, follow=follow, within_s=within_s)
        for tp, at in firsts.items():
            consumer.seek(tp, at)
        times = (
            start.value if start.kind == "time" else None,
            end.value if end is not None and end.kind == "time" else None,
        )
        reading = _read(consumer, firsts, stops, codec, filters, times=times)
        if follow:
            async for batch in reading:
                for tailed in batch:
                    yield tailed
            return
        found = [tailed async for batch in reading for tailed in batch]
        for tailed in sorted(found, key=_log_order):
            yield tailed
    except KafkaError as exc:
        raise BrokerError(f"tail: {kafka_reason(exc)}") from exc
    finally:
        await consumer.stop()


def _log_order(tailed: Tailed) -> tuple[int, str, int, int]:
    return tailed.timestamp_ms, tailed.topic, tailed.partition, tailed.offset


async def _bounds(
    consumer: AIOKafkaConsumer,
    parts: list[TopicPartition],
    start: Position,
    end: Position | None,
    *,
    follow: bool,
    within_s: float,
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int | None]]:
    """Per partition, the first offset to read and the one to stop before (None: never)."""
    if not parts:
        return {}, {}
    beginnings = await consumer.beginning_offsets(parts)
    last = await ends(consumer, parts, within_s=within_s)
    firsts = await _offsets(consumer, parts, start, beginnings, last)
    stops: dict[TopicPartition, int | None]
    if end is not None:
        stops = dict(await _offsets(consumer, parts, end, beginnings, last))
    elif follow:
        stops = dict.fromkeys(parts)
    else:
        stops = dict(last)
    return firsts, stops


async def ends(
    consumer: AIOKafkaConsumer, parts: list[TopicPartition], *, within_s: float
) -> dict[TopicPartition, int]:
    """Each partition's end: the offset its next record will get. ``parts`` are assigned
    to ``consumer`` and not fetched yet (a fetch's high watermark is kept).

    The end ListOffsets reports is not taken as it is: tansu answers the first offset of
    the partition's last batch plus one, short of the batch's other records (Kafka
    answers the end). A fetch's high watermark is the end on both, so each partition
    with a record is fetched once from its last reported record and its end is the high
    watermark that fetch reports. The consumer is left where that fetch left it: seek
    before reading. A broker that answers no fetch within ``within_s`` is a BrokerError."""
    reported = await consumer.end_offsets(parts)
    beginnings = await consumer.beginning_offsets(parts)
    fetched = [tp for tp in parts if reported[tp] > beginnings[tp]]
    for tp in fetched:
        consumer.seek(tp, reported[tp] - 1)  # a record there: the fetch answers at once
    try:
        async with asyncio.timeout(within_s):
            while any(consumer.highwater(tp) is None for tp in fetched):
                await consumer.getmany(*fetched, timeout_ms=_POLL_MS)
    except TimeoutError:
        unanswered = sorted(
            f"{tp.topic}/{tp.partition}" for tp in fetched if consumer.highwater(tp) is None
        )
        raise BrokerError(
            f"tail: no fetch of {', '.join(unanswered)} was answered within {within_s:g} s"
        ) from None
    return {tp: max(reported[tp], consumer.highwater(tp) or 0) for tp in parts}


async def _offsets(
    consumer: AIOKafkaConsumer,
    parts: list[TopicPartition],
    where: Position,
    beginnings: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
) -> dict[TopicPartition, int]:
    if where.kind == "beginning":
        return dict(beginnings)
    if where.kind == "end":
        return dict(ends)
    if where.kind == "offset":
        return {tp: min(max(where.value, beginnings[tp]), ends[tp]) for tp in parts}
    found = await consumer.offsets_for_times(dict.fromkeys(parts, where.value))
    # no record at or after the time: the end. Kafka answers None; tansu answers an
    # earlier record (offset 0 with timestamp -1, or the last one): so the time decides
    return {
        tp: at.offset if at is not None and at.timestamp >= where.value else ends[tp]
        for tp, at in found.items()
    }


async def _read(
    consumer: AIOKafkaConsumer,
    firsts: Mapping[TopicPartition, int],
    stops: Mapping[TopicPartition, int | None],
    codec: Codec,
    filters: Filters,
    *,
    times: tuple[int | None, int | None],
) -> AsyncIterator[list[Tailed]]:
    """Batches of kept records until every partition reached its stop (or for ever).

    ``times``: a time range's bounds, checked on each record's own time too, because
    tansu's offset for a time can be a millisecond off (it rounds the record's time)."""
    after, before = times
    async for batch in drain(consumer, firsts, stops, set()):  # ends verified
        kept = []
        for records in batch.values():
            for record in records:
                if (after is not None and record.timestamp < after) or (
                    before is not None and record.timestamp >= before
                ):
                    continue
                tailed = _tailed(record, codec)
                if filters.keeps(tailed):
                    kept.append(tailed)
        if kept:
            yield sorted(kept, key=_log_order)


_QUIET_POLLS = 2
"""Polls in a row that bring nothing for a partition read to its end: it is there."""
_LATE_MS = 1_000
"""A record timed this long after the read started was appended after it: past the end."""


async def drain(
    consumer: AIOKafkaConsumer,
    firsts: Mapping[TopicPartition, int],
    stops: Mapping[TopicPartition, int | None],
    at_end: set[TopicPartition],
) -> AsyncIterator[dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]]:
    """Fetched records of the assigned partitions (seeked to ``firsts``), until each
    reached its stop (excluded; None: for ever). Batches come as fetched.

    The partitions of ``at_end`` stop at the end the broker reported, and that end is not
    trusted: tansu reports the first offset of a partition's last batch plus one, so a
    batch of several records ends past it. Those are read on until they are quiet (no
    record in :data:`_QUIET_POLLS` polls in a row once past the reported end) or a
    record comes that was timed after the read began (appended since: past the end)."""
    started_ms = int(time.time() * 1000)  # the log's own clock: record times are wall times
    reported = {tp: stop for tp, stop in stops.items() if tp in at_end}
    bounded = {tp: None if tp in at_end else stop for tp, stop in stops.items()}
    left = {
        tp for tp, at in firsts.items() if tp in at_end or (stop := stops[tp]) is None or at < stop
    }
    quiet = dict.fromkeys(left, 0)
    while left:
        batch = await consumer.getmany(*left, timeout_ms=_POLL_MS)
        out: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]] = {}
        for tp, records in batch.items():
            if tp not in left:
                continue
            stop, taken = bounded[tp], []
            for record in records:
                late = tp in at_end and record.timestamp > started_ms + _LATE_MS
                if (stop is not None and record.offset >= stop) or late:
                    left.discard(tp)
                    break
                taken.append(record)
            if taken:
                out[tp] = taken
        if out:
            yield out
        for tp in list(left):
            quiet[tp] = 0 if batch.get(tp) else quiet[tp] + 1
            stop = bounded[tp]
            position = await consumer.position(tp)
            if stop is not None and position >= stop:
                left.discard(tp)
            elif tp in at_end and quiet[tp] >= _QUIET_POLLS and position >= (reported[tp] or 0):
                left.discard(tp)
        await asyncio.sleep(0)


def _tailed(record: ConsumerRecord[bytes, bytes], codec: Codec) -> Tailed:
    headers = tuple((k, bytes(v)) for k, v in record.headers or ())
    envelope, error = None, None
    try:
        envelope = codec.decode(record.value or b"")
    except HermesError as exc:
        error = str(exc)
    return Tailed(
        record.topic,
        record.partition,
        record.offset,
        record.timestamp,
        record.key,
        headers,
        envelope,
        error,
        record.value or b"",
    )


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _header_value(value: bytes) -> dict[str, str]:
    try:
        return {"value": value.decode("utf-8")}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(value).decode("ascii")}

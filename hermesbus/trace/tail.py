"""The log as it is, record by record: what ``hermesbus tail`` prints.

Reads topics with the Kafka connector's :class:`LogReader` (plain assignment, no
consumer group: no processor's offsets are read, moved or committed), from a start to
an end given as the beginning, the end, an offset, an append time or a time before now,
and decodes each record in either framing. A record that does not decode is listed
with the reason, never skipped. Without ``follow`` the slice is read up to the ends the
topics had when it started and listed in log order (by append time, then topic,
partition and offset); with ``follow`` new records are listed as they come.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition

from hermesbus.client import partition_for_key
from hermesbus.codec import Codec, default_codec
from hermesbus.connectors.kafka import (
    END,
    KafkaConfig,
    LogReader,
    Position,
    Record,
    partition_counts,
)
from hermesbus.contract.envelope import Envelope
from hermesbus.contract.headers import TRACE_ID, header
from hermesbus.errors import BrokerError, HermesError
from hermesbus.topics import SESSION_KEY, Catalog

__all__ = [
    "Filters",
    "Position",
    "Tailed",
    "catalog_topics",
    "existing_partitions",
    "partitions",
    "position",
    "session_topics",
    "tail",
]

_UNITS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_BEFORE = re.compile(r"^-(\d+)(ms|s|m|h|d)$")
_COMPONENTS = {"mcp": "dispatcher"}
"""The dispatcher signs as ``mcp:dispatcher``: ``--component dispatcher`` finds it too."""


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


def session_topics(prefix: str = "") -> list[str]:
    """The topics of the catalog keyed by session, prefixed: where a session's envelopes
    are (the rollup's closed windows and the alerts are keyed by rollup key, component)."""
    return [
        prefix + spec.name
        for spec in Catalog.load()
        if spec.value_schema and spec.key == SESSION_KEY
    ]


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
    counts = await existing_partitions(kafka, topics, missing_ok=missing_ok)
    until = end if end is not None else (None if follow else END)
    reader = LogReader(
        kafka, partitions(counts, filters.session), start=start, end=until, what="tail"
    )
    async with reader:
        if follow:
            async for batch in reader:
                for tailed in _kept(batch, codec, filters):
                    yield tailed
            return
        found = [tailed async for batch in reader for tailed in _kept(batch, codec, filters)]
    for tailed in sorted(found, key=_log_order):
        yield tailed


async def existing_partitions(
    kafka: KafkaConfig, topics: Sequence[str], *, missing_ok: bool = False
) -> dict[str, int]:
    """The partition count of each of ``topics``. A missing topic is a BrokerError, unless
    ``missing_ok`` (then it is left out; none left is still an error)."""
    counts = await partition_counts(kafka, topics)
    missing = [name for name in topics if name not in counts]
    if missing and not (missing_ok and counts):
        raise BrokerError(
            f"no topic {', '.join(missing)} on {kafka.bootstrap}: "
            "`hermesbus topics list` shows what exists (another --prefix?)",
            retriable=False,
        )
    return counts


def _log_order(tailed: Tailed) -> tuple[int, str, int, int]:
    return tailed.timestamp_ms, tailed.topic, tailed.partition, tailed.offset


def _kept(batch: Sequence[Record], codec: Codec, filters: Filters) -> list[Tailed]:
    """The batch's records that ``filters`` keeps, decoded, in log order."""
    kept = [tailed for record in batch if filters.keeps(tailed := _tailed(record, codec))]
    return sorted(kept, key=_log_order)


def _tailed(record: Record, codec: Codec) -> Tailed:
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

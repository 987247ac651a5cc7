"""A trace read back from the log, as spans and a waterfall (component, state, duration, outcome).

Every envelope of a trace is on the topics already, with the time the broker got it;
a span is one envelope handled by one processor, from the moment its input was
appended to the moment its last output was (queueing and handling, as a user feels
it). Nothing here is recorded on the side: replaying the topics gives the same picture.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from hermesbus.client import partition_for_key
from hermesbus.codec import Codec, default_codec
from hermesbus.connectors.kafka import KafkaConfig, start_or_close
from hermesbus.envelope import Envelope
from hermesbus.errors import BrokerError, HermesError
from hermesbus.headers import TRACE_ID, header
from hermesbus.payloads import ErrorReport, ToolResult, ToolResults
from hermesbus.topics import Catalog

__all__ = ["Hop", "Span", "collect", "spans", "waterfall"]

_PROCESSORS = {"conversation": "conversation", "mcp": "dispatcher", "dispatcher": "dispatcher"}
_PROCESSORS |= {"tool": "tool", "memory": "memory"}
_BAR = 32


@dataclass(frozen=True, slots=True)
class Hop:
    """One envelope of the trace where it was appended: topic, partition, offset, time."""

    envelope: Envelope
    topic: str
    partition: int
    offset: int
    appended_ms: int


@dataclass(frozen=True, slots=True)
class Span:
    """One envelope handled by one processor, until its last output was appended."""

    component: str
    state: str
    what: str
    start_ms: int
    end_ms: int
    outcome: str

    @property
    def duration_ms(self) -> int:
        return self.end_ms - self.start_ms


async def collect(
    kafka: KafkaConfig,
    trace_id: str,
    *,
    session_id: str | None = None,
    prefix: str = "",
    codec: Codec | None = None,
) -> list[Hop]:
    """Every envelope of ``trace_id`` on the catalog's topics, in the order appended.

    With ``session_id`` only that session's partition of each topic is read (a session
    is on the same partition number everywhere); without it, every partition.
    """
    codec = codec or default_codec()
    names = [prefix + spec.name for spec in Catalog.load() if spec.value_schema]
    consumer = AIOKafkaConsumer(**kafka.client_kwargs(), group_id=None, enable_auto_commit=False)
    await start_or_close(consumer.start, consumer.stop, "trace: cannot reach Kafka")
    try:
        parts = _partitions(consumer, names, session_id)
        hops = await _read(consumer, parts, trace_id, codec)
    except KafkaError as exc:
        raise BrokerError(f"trace {trace_id}: {type(exc).__name__}: {exc}") from exc
    finally:
        await consumer.stop()
    return sorted(hops, key=lambda hop: (hop.appended_ms, hop.topic, hop.offset))


def _partitions(
    consumer: AIOKafkaConsumer, topics: Sequence[str], session_id: str | None
) -> list[TopicPartition]:
    parts = []
    for topic in topics:
        numbers = consumer.partitions_for_topic(topic) or set()
        if session_id is not None and numbers:
            numbers = {partition_for_key(session_id.encode(), numbers)}
        parts += [TopicPartition(topic, n) for n in sorted(numbers)]
    return parts


async def _read(
    consumer: AIOKafkaConsumer, parts: list[TopicPartition], trace: str, codec: Codec
) -> list[Hop]:
    if not parts:
        return []
    consumer.assign(parts)
    await consumer.seek_to_beginning(*parts)
    ends = await consumer.end_offsets(parts)
    left = {tp for tp in parts if ends[tp] > 0}
    hops: list[Hop] = []
    while left:
        batch = await consumer.getmany(*left, timeout_ms=500)
        for tp, records in batch.items():
            hops += [h for r in records if (h := _hop(r, trace, codec)) is not None]
            if records and records[-1].offset + 1 >= ends[tp]:
                left.discard(tp)
        for tp in list(left):
            if await consumer.position(tp) >= ends[tp]:
                left.discard(tp)
        await asyncio.sleep(0)
    return hops


def _hop(record: object, trace: str, codec: Codec) -> Hop | None:
    headers = list(getattr(record, "headers", ()) or ())
    if header(headers, TRACE_ID) not in (None, trace):
        return None  # another trace: not decoded at all
    try:
        envelope = codec.decode(getattr(record, "value", b"") or b"")
    except HermesError:
        return None
    if envelope.trace_id != trace:
        return None
    r = record
    return Hop(envelope, r.topic, r.partition, r.offset, r.timestamp)  # type: ignore[attr-defined]


def spans(hops: Iterable[Hop]) -> list[Span]:
    """One span per envelope a processor handled, ordered by start."""
    hops = list(hops)
    children: dict[str, list[Hop]] = {}
    for hop in hops:
        if hop.envelope.causation_id:
            children.setdefault(hop.envelope.causation_id, []).append(hop)
    result = []
    for hop in hops:
        component = _PROCESSORS.get(hop.envelope.target.split(":", 1)[0])
        if component is None:
            continue  # a reply to the user, an audit record or an alert: not handled here
        outputs = children.get(hop.envelope.message_id, [])
        end = max((o.appended_ms for o in outputs), default=hop.appended_ms)
        result.append(
            Span(
                component, _state(hop, outputs), _what(hop), hop.appended_ms, end, _outcome(outputs)
            )
        )
    return sorted(result, key=lambda s: (s.start_ms, s.end_ms))


def _state(hop: Hop, outputs: Sequence[Hop]) -> str:
    """The state a conversation went to (``S1→S2``), or the instance that handled it."""
    instance = hop.envelope.target.split(":", 1)[1]
    if hop.envelope.target.startswith("conversation:"):
        after = sorted({o.envelope.source.split(":", 1)[1] for o in outputs} - {"timer"})
        before = "" if instance in ("in", *after) else f"{instance}→"
        return before + ("/".join(after) or instance)
    return instance


def _what(hop: Hop) -> str:
    body = hop.envelope.payload.body
    name = type(body).__name__ if body is not None else "-"
    if isinstance(body, ToolResult):
        return f"{name} {body.tool} {body.status_code}"
    task = hop.envelope.payload.task
    return f"{name} {task}".strip()


def _outcome(outputs: Sequence[Hop]) -> str:
    for out in outputs:
        body = out.envelope.payload.body
        if isinstance(body, ErrorReport):
            return f"error {body.code}"
        if isinstance(body, ToolResult) and body.status_code >= 400:  # noqa: PLR2004
            return f"failed {body.status_code}"
        if isinstance(body, ToolResult) and (body.stale or body.fallback):
            return f"degraded {body.fallback or 'stale'}"
    if any(isinstance(o.envelope.payload.body, ToolResults) for o in outputs):
        return "answered"
    return "ok" if outputs else "done"


def waterfall(spans: Sequence[Span], width: int = _BAR) -> list[str]:
    """Text lines: component, state, a bar placed on the trace's time axis, duration, outcome."""
    if not spans:
        return ["(no spans)"]
    t0 = min(s.start_ms for s in spans)
    total = max(max(s.end_ms for s in spans) - t0, 1)
    lines = [f"{'component':<13}{'state':<10}{'what':<34}{'':<{width + 2}}{'ms':>7}  outcome"]
    for s in spans:
        first = (s.start_ms - t0) * width // total
        length = max(1, s.duration_ms * width // total)
        bar = (" " * first + "█" * length)[:width].ljust(width)
        what = s.what if len(s.what) <= 32 else s.what[:31] + "…"  # noqa: PLR2004
        lines.append(
            f"{s.component:<13}{s.state:<10}{what:<34}|{bar}|{s.duration_ms:>7}  {s.outcome}"
        )
    lines.append(f"{'':<57}total {total} ms, {len(spans)} spans")
    return lines

"""A trace read back from the log, as spans and a waterfall (component, state, duration, outcome).

Every envelope of a trace is on the topics already, with the time the broker got it;
a span is one envelope handled by one processor, from the moment its input was
appended to the moment its last output was (queueing and handling, as a user feels
it). Nothing here is recorded on the side: replaying the topics gives the same picture.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from hermesbus.base.printable import printable
from hermesbus.codec import Codec, default_codec
from hermesbus.connectors.kafka import KafkaConfig, LogReader, Record, partition_counts
from hermesbus.contract.envelope import Envelope
from hermesbus.contract.payloads import (
    ErrorReport,
    MemoryWrite,
    StateSnapshot,
    TimerFired,
    ToolCall,
    ToolResult,
    ToolResults,
)
from hermesbus.errors import BrokerError, HermesError
from hermesbus.topics import apply_command_line
from hermesbus.trace.index import ArchivedRecord, Document, archived
from hermesbus.trace.tail import catalog_topics, partitions

__all__ = ["Hop", "Span", "collect", "hop_of", "hops_of", "partitions", "spans", "waterfall"]

_PROCESSORS = {"conversation": "conversation", "mcp": "dispatcher", "dispatcher": "dispatcher"}
_PROCESSORS |= {"tool": "tool", "memory": "memory"}
_BAR = 32
_WHAT = 44


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
    is on the same partition number everywhere); without it, every partition. A topic
    of the catalog missing on the cluster is a BrokerError naming every missing one.
    """
    codec = codec or default_codec()
    names = catalog_topics(prefix)
    counts = await partition_counts(kafka, names)  # a plain consumer knows no counts
    missing = [name for name in names if name not in counts]
    if missing:
        cluster = kafka.bootstrap or "the cluster"
        raise BrokerError(_missing(missing, len(names), cluster, prefix), retriable=False)
    hops: list[Hop] = []
    reader = LogReader(kafka, partitions(counts, session_id), what=f"trace {trace_id}")
    async with reader:
        async for batch in reader:
            hops += [h for r in batch if (h := _hop(r, trace_id, codec)) is not None]
    return sorted(hops, key=lambda hop: (hop.appended_ms, hop.topic, hop.offset))


def hops_of(docs: Iterable[Document], codec: Codec, *, dlq_topic: str) -> list[Hop]:
    """The hops of the trace index's documents: the same picture ``collect`` reads from
    the topics (dead letters and undecodable records are not hops; ``trace`` lists them)."""
    records = (archived(doc) for doc in docs)
    hops = [h for r in records if r.topic != dlq_topic and (h := hop_of(r, codec)) is not None]
    return sorted(hops, key=lambda hop: (hop.appended_ms, hop.topic, hop.offset))


def hop_of(record: ArchivedRecord, codec: Codec) -> Hop | None:
    """The record's envelope where it was appended; None when it does not decode."""
    try:
        envelope = codec.decode(record.value)
    except HermesError:
        return None
    return Hop(envelope, record.topic, record.partition, record.offset, record.timestamp_ms)


def _missing(missing: Sequence[str], total: int, bootstrap: str, prefix: str) -> str:
    """Which topics the trace cannot read, and the two usual causes."""
    which = "none of the" if len(missing) == total else f"{len(missing)} of the"
    return (
        f"cannot read the trace: {which} {total} topics of the catalog exist on {bootstrap} "
        f"(prefix {prefix!r}); missing: {', '.join(missing)}. "
        f"A new broker? `{apply_command_line(bootstrap, prefix)}` creates them; "
        "another prefix? pass --prefix (or HERMES_TOPIC_PREFIX)"
    )


def _hop(record: Record, trace: str, codec: Codec) -> Hop | None:
    """The record's hop if its envelope is of ``trace``. The envelope's own ``trace_id``
    decides, never a ``trace_id`` header: headers are not signed, and one added to a
    record (or a second one) must not hide it from its trace or put it in another."""
    try:
        envelope = codec.decode(record.value or b"")
    except HermesError:
        return None
    if envelope.trace_id != trace:
        return None
    return Hop(envelope, record.topic, record.partition, record.offset, record.timestamp)


def spans(hops: Iterable[Hop]) -> list[Span]:
    """One span per envelope a processor handled, ordered by start.

    ``state`` is the conversation's state at that point of the trace: the transition
    for the conversation's own spans (``S2→S3``), the state it was in for the others.
    """
    hops = sorted(hops, key=lambda hop: (hop.appended_ms, hop.topic, hop.offset))
    children: dict[str, list[Hop]] = {}
    for hop in hops:
        if hop.envelope.causation_id:
            children.setdefault(hop.envelope.causation_id, []).append(hop)
    result, current = [], "-"
    seen: set[tuple[str, str]] = set()
    for hop in hops:
        component = _PROCESSORS.get(hop.envelope.target.split(":", 1)[0])
        current = _state_of(hop.envelope, current)
        if component is None:
            continue  # a reply to the user, an audit record or an alert: not handled here
        handled = (component, hop.envelope.message_id)
        if handled in seen:  # sent again (or redelivered): the processor skips an applied id
            at = hop.appended_ms
            result.append(Span(component, current, _what(hop), at, at, "duplicate"))
            continue
        seen.add(handled)
        outputs = children.get(hop.envelope.message_id, [])
        end = max((o.appended_ms for o in outputs), default=hop.appended_ms)
        state = _moved(outputs) if component == "conversation" else None
        result.append(
            Span(component, state or current, _what(hop), hop.appended_ms, end, _outcome(outputs))
        )
    return sorted(result, key=lambda s: (s.start_ms, s.end_ms))


def _state_of(envelope: Envelope, current: str) -> str:
    body = envelope.payload.body
    if isinstance(body, StateSnapshot):
        return body.snapshot.state_id
    return envelope.snapshot.state_id if envelope.snapshot is not None else current


def _moved(outputs: Sequence[Hop]) -> str | None:
    """``S1→S2`` when the conversation's outputs include the snapshot of a transition."""
    for out in outputs:
        body = out.envelope.payload.body
        if isinstance(body, StateSnapshot):
            return f"{body.previous_state or '∅'}→{body.snapshot.state_id}"
    return None


def _what(hop: Hop) -> str:
    """The body handled, and where it matters the tool and the task (``ToolCall ocr_tool``)."""
    body = hop.envelope.payload.body
    name = type(body).__name__ if body is not None else "-"
    if isinstance(body, ToolResult):
        return f"{name} {body.tool} {body.status_code}"
    if isinstance(body, ToolCall):
        return f"{name} {body.tool}"
    if isinstance(body, MemoryWrite):
        return f"{name} {body.tier.value} {body.key}"
    if isinstance(body, TimerFired):
        return f"{name} {body.purpose}"
    return f"{name} {hop.envelope.payload.task}".strip()


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
    """Text lines: component, state, what, a bar on the trace's time axis, ms, outcome.

    What comes from the log (states, tasks, tools, keys) has its control characters
    escaped (:func:`printable`): the lines are for a terminal."""
    if not spans:
        return ["(no spans)"]
    spans = [replace(s, state=printable(s.state), what=printable(s.what)) for s in spans]
    t0 = min(s.start_ms for s in spans)
    total = max(max(s.end_ms for s in spans) - t0, 1)
    state_w = max(len("state"), *(len(s.state) for s in spans)) + 2
    what_w = min(_WHAT, max(len(s.what) for s in spans)) + 2
    head = f"{'component':<13}{'state':<{state_w}}{'what':<{what_w}}{'':<{width + 2}}{'ms':>7}"
    lines = [f"{head}  outcome"]
    for s in spans:
        first = min((s.start_ms - t0) * width // total, width - 1)
        length = max(1, s.duration_ms * width // total)
        bar = (" " * first + "█" * length)[:width].ljust(width)
        what = s.what if len(s.what) <= _WHAT else s.what[: _WHAT - 1] + "…"
        lines.append(
            f"{s.component:<13}{s.state:<{state_w}}{what:<{what_w}}|{bar}|{s.duration_ms:>7}"
            f"  {printable(s.outcome)}"
        )
    lines.append(f"total {total} ms, {len(spans)} spans: " + _per_component(spans))
    return lines


def _per_component(spans: Sequence[Span]) -> str:
    counts: dict[str, int] = {}
    for s in spans:
        counts[s.component] = counts.get(s.component, 0) + 1
    return ", ".join(f"{name} {n}" for name, n in counts.items())

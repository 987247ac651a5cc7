"""Shadow replay: today's handlers on yesterday's log, compared with what they emitted then.

A :class:`Recording` is a slice of the log read back from the broker, from the trace
index's archive or from an exported bundle: envelopes in log order with their places.
Every output id is derived from its input's id (``derive_id(input, "out", i)``), so what
a processor emitted for an input is found in the recording by id alone.

:func:`shadow` runs each chosen processor (a :class:`Shadow`: handler, topics, ports)
in a :class:`hermesbus.testing.Harness` over every input it consumed in the recording,
in log order, from an empty state: the inputs before the slice rebuild its state, those
in it are compared. Before each input, the processor's recorded ports are cued with what
it emitted then (the tool results, the health it saw), so no tool runs and nothing live
is asked. The first difference per processor (envelope, field path, recorded and
replayed values; diagnostics ignored) is a :class:`Divergence`; after it the processor
is not compared any further, since its state now differs too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from aiokafka import TopicPartition

from hermesbus.codec import Codec, default_codec
from hermesbus.connectors.kafka import KafkaConfig, LogReader, Record
from hermesbus.contract import headers as h
from hermesbus.contract.envelope import Envelope
from hermesbus.errors import ConfigError, HermesError
from hermesbus.identity import WritePolicy
from hermesbus.runtime import Handler, derive_id
from hermesbus.testing import Harness
from hermesbus.topics import DLQ
from hermesbus.trace.index import ArchivedRecord, Document, Search, TraceIndex, archived
from hermesbus.trace.spans import Hop, hop_of
from hermesbus.trace.tail import (
    Filters,
    Position,
    catalog_topics,
    existing_partitions,
    partitions,
    tail,
)

__all__ = [
    "IGNORED",
    "Divergence",
    "Recording",
    "Shadow",
    "ShadowReport",
    "consumed_order",
    "dead_places",
    "difference",
    "documents",
    "from_archive",
    "from_broker",
    "recording_of",
    "records_from_broker",
    "sessions_of_trace",
    "shadow",
]

log = logging.getLogger(__name__)

IGNORED = frozenset({"diagnostics"})
"""Envelope fields a shadow replay does not compare: timings and counts of the run."""
_ARCHIVE_LIMIT = 100_000
"""Records of a topic read from the trace index to rebuild cross-session stores."""
_MAX_OUTPUTS = 1_000
"""Outputs of one input looked for in the recording (ids ``derive_id(input, "out", i)``)."""

Place = tuple[str, int, int]
"""topic, partition, offset."""


@dataclass(frozen=True)
class Recording:
    """Envelopes of the log in log order (append time, topic, partition, offset), the
    places of the records that were dead-lettered then, and where it was read."""

    hops: tuple[Hop, ...]
    source: str
    """Where it was read, for messages: ``Kafka at ...``, ``trace index ...``, ``bundle ...``."""
    dead: frozenset[Place] = frozenset()
    """Records the runtime dead-lettered (refused, undecodable, out of retries): they ran
    no handler then, so a replay does not run them either."""
    _by_id: dict[str, Hop] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for hop in self.hops:
            self._by_id.setdefault(hop.envelope.message_id, hop)  # the first copy

    @classmethod
    def of(cls, hops: Iterable[Hop], source: str, dead: Iterable[Place] = ()) -> Recording:
        ordered = sorted(
            hops, key=lambda hop: (hop.appended_ms, hop.topic, hop.partition, hop.offset)
        )
        return cls(tuple(ordered), source, frozenset(dead))

    def __len__(self) -> int:
        return len(self.hops)

    def outputs(self, message_id: str) -> list[Hop]:
        """What the processor that handled ``message_id`` emitted for it, in order."""
        found = []
        for index in range(_MAX_OUTPUTS):
            hop = self._by_id.get(derive_id(message_id, "out", index))
            if hop is None:
                break
            found.append(hop)
        return found

    def sessions(self) -> list[str]:
        return list(dict.fromkeys(hop.envelope.session_id for hop in self.hops))

    def flows(self, sessions: Iterable[str]) -> dict[str, set[int]]:
        """The registered flows ``sessions`` ran, with the versions, as their snapshots
        name them (the expense report, built in, names none)."""
        chosen, found = set(sessions), dict[str, set[int]]()
        for hop in self.hops:
            snapshot = hop.envelope.snapshot
            if hop.envelope.session_id in chosen and snapshot is not None and snapshot.flow:
                versions = found.setdefault(snapshot.flow, set())
                if snapshot.flow_version is not None:
                    versions.add(snapshot.flow_version)
        return found


def dead_places(headers: Iterable[tuple[str, bytes]]) -> Place | None:
    """The place a dead letter came from (its ``hermes.origin.*`` headers), if it says."""
    found = {k: v.decode("utf-8", "replace") for k, v in headers}
    try:
        return (
            found[h.DLQ_ORIGIN_TOPIC],
            int(found[h.DLQ_ORIGIN_PARTITION]),
            int(found[h.DLQ_ORIGIN_OFFSET]),
        )
    except (KeyError, ValueError):
        return None


@dataclass(frozen=True)
class Shadow:
    """One processor to replay: its current handler, the topics it consumes (prefixed as
    in the recording), its ports, and ``cue`` (told what it emitted then, before each
    input). ``sessions="all"``: its state spans sessions (memory's stores), so it is fed
    every session's inputs the recording holds, not only the slice's sessions."""

    name: str
    handler: Handler
    topics: tuple[str, ...]
    ports: Mapping[str, Any] = field(default_factory=dict)
    cue: Callable[[Sequence[Envelope]], None] | None = None
    sessions: Literal["own", "all"] = "own"


@dataclass(frozen=True)
class Divergence:
    """The first place a processor's replay differs from the recording."""

    processor: str
    input: Hop
    index: int
    """Which output of the input (its position among those emitted)."""
    message_id: str
    path: str
    """The field that differs, e.g. ``payload.body.text``; ``""`` when an output is
    missing on one side (then ``recorded`` or ``replayed`` is None)."""
    recorded: Any
    replayed: Any
    error: str | None = None
    """The replayed handler raised this instead of emitting."""

    def as_json(self) -> dict[str, Any]:
        hop = self.input
        return {
            "processor": self.processor,
            "input": {
                "message_id": hop.envelope.message_id,
                "topic": hop.topic,
                "partition": hop.partition,
                "offset": hop.offset,
                "timestamp": hop.appended_ms,
                "body": type(hop.envelope.payload.body).__name__,
            },
            "output": {"index": self.index, "message_id": self.message_id},
            "path": self.path,
            "recorded": self.recorded,
            "replayed": self.replayed,
            "error": self.error,
        }

    def lines(self) -> list[str]:
        """For people: where, which field, then and now."""
        hop = self.input
        body = type(hop.envelope.payload.body).__name__
        where = f"{hop.topic}/{hop.partition}/{hop.offset}"
        head = f"divergence in {self.processor} on {body} {hop.envelope.message_id} ({where})"
        if self.error is not None:
            trace = f"  its trace: hermesbus trace {hop.envelope.trace_id}"
            return [head, f"  the handler raised: {self.error}", trace]
        field_ = self.path or "(the whole envelope)"
        trace = hop.envelope.trace_id
        return [
            head,
            f"  output {self.index} ({self.message_id}), field {field_}",
            f"  recorded: {_short(self.recorded)}",
            f"  replayed: {_short(self.replayed)}",
            f"  its trace: hermesbus trace {trace}",
        ]


@dataclass
class ShadowReport:
    """What a shadow replay did: inputs run and compared, outputs compared, divergences."""

    replayed: dict[str, int] = field(default_factory=dict)
    """Inputs each processor ran (those that rebuilt its state included)."""
    compared: dict[str, int] = field(default_factory=dict)
    """Inputs of the slice each processor was compared on."""
    outputs: int = 0
    divergences: list[Divergence] = field(default_factory=list)
    """The first per processor, earliest in the log first."""

    @property
    def diverged(self) -> bool:
        return bool(self.divergences)


Progress = Callable[[int, int], None]
"""Told ``(done, total)`` inputs as a replay goes."""


async def shadow(
    recording: Recording,
    shadows: Sequence[Shadow],
    *,
    selected: Callable[[Hop], bool] | None = None,
    sessions: Iterable[str] | None = None,
    policy: WritePolicy | None = None,
    prefix: str = "",
    progress: Progress | None = None,
    applied_window: int | None = None,
    normalise: Callable[[Envelope], Envelope] | None = None,
) -> ShadowReport:
    """Replay each of ``shadows`` over the recording and compare the inputs ``selected``
    keeps (default: all) of ``sessions`` (default: every session in the recording).
    ``applied_window``: the bus's (``settings.runtime.applied_window``; default: the
    runtime's default), so redeliveries are skipped as they were.

    ``policy`` refuses what the runtime refused (a refused record ran no handler); dead
    letters of the recording are skipped too. ``normalise``: applied to what was emitted
    then and now before they are compared (a difference that is expected, not found)."""
    wanted = set(sessions) if sessions is not None else set(recording.sessions())
    report = ShadowReport()
    plan = [(s, _inputs(recording, s, wanted)) for s in shadows]
    total, done = sum(len(inputs) for _, inputs in plan), 0
    for spec, inputs in plan:
        harness = (
            Harness(prefix=prefix)
            if applied_window is None
            else Harness(prefix=prefix, applied_window=applied_window)
        ).processor(spec.name, spec.handler, (), ports=spec.ports)
        diverged: Divergence | None = None
        report.replayed[spec.name] = report.compared[spec.name] = 0
        for hop in inputs:
            done += 1
            if progress is not None:
                progress(done, total)
            if _refused(policy, prefix, hop):
                continue
            compare = diverged is None and hop.envelope.session_id in wanted
            compare = compare and (selected is None or selected(hop))
            recorded = [out.envelope for out in recording.outputs(hop.envelope.message_id)]
            if spec.cue is not None:
                spec.cue(recorded)
            report.replayed[spec.name] += 1
            try:
                handled = await harness.handle(
                    spec.name, hop.envelope, topic=hop.topic, appended_ms=hop.appended_ms
                )
            except Exception as exc:  # the handler's failure is what the replay found
                if compare:
                    diverged = Divergence(spec.name, hop, 0, "", "", None, None, _raised(exc))
                continue
            if handled.duplicate or not compare:
                continue
            report.compared[spec.name] += 1
            report.outputs += max(len(recorded), len(handled.emitted))
            emitted = list(handled.emitted)
            if normalise is not None:
                recorded, emitted = (
                    [normalise(e) for e in recorded],
                    [normalise(e) for e in emitted],
                )
            diverged = _first(spec.name, hop, recorded, emitted)
        if diverged is not None:
            report.divergences.append(diverged)
    report.divergences.sort(key=lambda d: (d.input.appended_ms, d.input.topic, d.input.offset))
    return report


def _inputs(recording: Recording, spec: Shadow, sessions: set[str]) -> list[Hop]:
    """What ``spec`` consumed, in the order it consumed it: each partition in offset order
    (record times are the producers' clocks, so two producers' records on a partition
    may be timed out of offset order), partitions interleaved by time."""
    topics = set(spec.topics)
    mine = [
        hop
        for hop in recording.hops
        if hop.topic in topics
        and (spec.sessions == "all" or hop.envelope.session_id in sessions)
        and (hop.topic, hop.partition, hop.offset) not in recording.dead
    ]
    return consumed_order(mine)


def consumed_order(hops: Iterable[Hop]) -> list[Hop]:
    """``hops`` with each partition in offset order, the partitions merged by time: the
    next hop is always the earliest-timed head of a partition.

    A recording can span several logs of one partition (the archive keeps what the
    embedded broker held on each ``up``, each starting at offset 0): a place seen again
    begins the next log, and each log is read in offset order, one after the other."""
    queues: dict[tuple[str, int, int], list[Hop]] = {}
    for (topic, partition), logs in _logs(hops).items():
        for number, log in enumerate(logs):
            queues[topic, partition, number] = sorted(log, key=lambda hop: hop.offset)
    heads = dict.fromkeys(queues, 0)
    ordered: list[Hop] = []
    while heads:
        place = min(heads, key=lambda p: (queues[p][heads[p]].appended_ms, p))
        ordered.append(queues[place][heads[place]])
        heads[place] += 1
        if heads[place] == len(queues[place]):
            del heads[place]
    return ordered


def _logs(hops: Iterable[Hop]) -> dict[tuple[str, int], list[list[Hop]]]:
    """Each partition's hops split into the logs they came from, oldest first."""
    found: dict[tuple[str, int], list[list[Hop]]] = {}
    seen: dict[tuple[str, int], set[int]] = {}
    for hop in sorted(hops, key=lambda hop: (hop.appended_ms, hop.offset)):
        where = (hop.topic, hop.partition)
        offsets = seen.setdefault(where, set())
        logs = found.setdefault(where, [[]])
        if hop.offset in offsets:  # the place again: a later log of the partition
            logs.append([])
            offsets.clear()
        offsets.add(hop.offset)
        logs[-1].append(hop)
    return found


def _refused(policy: WritePolicy | None, prefix: str, hop: Hop) -> bool:
    if policy is None:
        return False
    identity = policy.identity_of(hop.envelope.source)
    return policy.refusal(hop.topic.removeprefix(prefix), identity, hop.envelope) is not None


def _raised(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _first(
    processor: str, hop: Hop, recorded: Sequence[Envelope], replayed: Sequence[Envelope]
) -> Divergence | None:
    for index in range(max(len(recorded), len(replayed))):
        then = recorded[index] if index < len(recorded) else None
        now = replayed[index] if index < len(replayed) else None
        if then is None or now is None:
            one_side = then or now
            ids = one_side.message_id if one_side is not None else ""
            was = _dump(then) if then is not None else None
            is_now = _dump(now) if now is not None else None
            return Divergence(processor, hop, index, ids, "", was, is_now)
        if _same(then, now):
            continue
        found = difference(then, now)
        if found is not None:
            path, was, is_now = found
            return Divergence(processor, hop, index, then.message_id, path, was, is_now)
    return None


def _same(a: Envelope, b: Envelope) -> bool:
    """Equal but for :data:`IGNORED` (the models' own equality: no dump when they agree)."""
    ours, theirs = a.__dict__, b.__dict__
    return all(ours[k] == theirs[k] for k in ours if k not in IGNORED)


def difference(recorded: Envelope, replayed: Envelope) -> tuple[str, Any, Any] | None:
    """The first field (in field order) where two envelopes differ, with both values;
    None when they are the same but for :data:`IGNORED`."""
    return _walk("", _dump(recorded), _dump(replayed))


def _dump(envelope: Envelope) -> dict[str, Any]:
    """The envelope as JSON without :data:`IGNORED`; the body's fields under
    ``payload.body`` with its record name as ``@type`` (a changed kind shows there)."""
    dumped = envelope.model_dump(mode="json", exclude=set(IGNORED))
    body = dumped["payload"].get("body")
    if isinstance(body, dict) and len(body) == 1:
        ((name, fields),) = body.items()
        if isinstance(fields, dict):
            dumped["payload"]["body"] = {"@type": name, **fields}
    return dumped


def _walk(path: str, a: Any, b: Any) -> tuple[str, Any, Any] | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in dict.fromkeys([*a, *b]):
            found = _walk(f"{path}.{key}" if path else str(key), a.get(key), b.get(key))
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for index in range(max(len(a), len(b))):
            x = a[index] if index < len(a) else None
            y = b[index] if index < len(b) else None
            found = _walk(f"{path}[{index}]", x, y)
            if found is not None:
                return found
        return None
    return None if a == b else (path, a, b)


def _short(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- reading a recording: from the broker, from the trace index's archive ---------------


async def from_broker(
    kafka: KafkaConfig,
    sessions: Sequence[str],
    *,
    prefix: str = "",
    every_session_of: Sequence[str] = (),
    codec: Codec | None = None,
) -> Recording:
    """Each session's records on every catalog topic, from the beginning of the log to
    its end (plain assignment: no group joined, nothing committed), and every record of
    the topics ``every_session_of`` (prefixed names), for processors whose state spans
    sessions."""
    records = await records_from_broker(
        kafka, sessions, prefix=prefix, every_session_of=every_session_of, codec=codec
    )
    return recording_of(records, f"Kafka at {kafka.bootstrap}", prefix=prefix, codec=codec)


async def records_from_broker(
    kafka: KafkaConfig,
    sessions: Sequence[str],
    *,
    prefix: str = "",
    every_session_of: Sequence[str] = (),
    codec: Codec | None = None,
) -> list[ArchivedRecord]:
    """The records :func:`from_broker` reads, as the broker has them: one read of each
    session's partition of every catalog topic and of every partition of
    ``every_session_of``, from the beginning to the ends the log has when it starts."""
    codec = codec or default_codec()
    own: dict[TopicPartition, set[str]] = {}  # the sessions read on each partition
    if sessions:
        counts = await existing_partitions(kafka, catalog_topics(prefix), missing_ok=True)
        for session in sessions:
            for tp in partitions(counts, session):
                own.setdefault(tp, set()).add(session)
    every: set[TopicPartition] = set()  # every record of these
    if every_session_of:
        every = set(partitions(await existing_partitions(kafka, every_session_of), None))
    found: list[ArchivedRecord] = []
    parts = [*own, *(every - own.keys())]
    async with LogReader(kafka, parts, what="reading the sessions' records") as log:
        async for batch in log:
            found += [
                _archived(r)
                for r in batch
                if _place(r) in every or _session_of(r, codec) in own.get(_place(r), ())
            ]
    return found


def _place(record: Record) -> TopicPartition:
    return TopicPartition(record.topic, record.partition)


def _session_of(record: Record, codec: Codec) -> str | None:
    """The session of the record's envelope, or its key when it does not decode."""
    try:
        return codec.decode(record.value or b"").session_id
    except HermesError:
        return record.key.decode("utf-8", "replace") if record.key is not None else None


def _archived(record: Record) -> ArchivedRecord:
    headers = tuple((k, bytes(v)) for k, v in record.headers or ())
    return ArchivedRecord(
        record.topic,
        record.partition,
        record.offset,
        record.timestamp,
        record.key,
        record.value or b"",
        headers,
    )


def recording_of(
    records: Iterable[ArchivedRecord], source: str, *, prefix: str = "", codec: Codec | None = None
) -> Recording:
    """The records decoded: envelopes with their places, and the places dead letters name
    (an undecodable record ran no handler then, so it is left out)."""
    codec = codec or default_codec()
    hops, dead = [], []
    for record in records:
        if record.topic == prefix + DLQ:
            place = dead_places(record.headers)
            if place is not None:
                dead.append(place)
        elif (hop := hop_of(record, codec)) is not None:  # undecodable: it ran no handler
            hops.append(hop)
    return Recording.of(hops, source, dead)


async def sessions_of_trace(
    kafka: KafkaConfig, trace_id: str, *, prefix: str = "", codec: Codec | None = None
) -> list[str]:
    """The sessions whose envelopes carry ``trace_id`` (every partition is read)."""
    start, end = Position("beginning"), Position("end")
    found: dict[str, None] = {}
    async for tailed in tail(
        kafka,
        catalog_topics(prefix),
        start=start,
        end=end,
        filters=Filters(trace=trace_id),
        missing_ok=True,
        codec=codec,
    ):
        if tailed.envelope is not None:
            found[tailed.envelope.session_id] = None
    return list(found)


async def from_archive(
    index: TraceIndex,
    sessions: Sequence[str],
    *,
    prefix: str = "",
    every_session_of: Sequence[str] = (),
    codec: Codec | None = None,
) -> Recording:
    """The same from the trace index, which keeps every record's bytes, headers and
    place: what replay reads when the broker no longer has the records."""
    docs = await documents(index, sessions, every_session_of=every_session_of)
    records = [archived(doc) for doc in docs]
    return recording_of(records, f"trace index {index.where}", prefix=prefix, codec=codec)


async def documents(
    index: TraceIndex, sessions: Sequence[str], *, every_session_of: Sequence[str] = ()
) -> list[Document]:
    """The index documents of ``sessions``, and of every record of ``every_session_of``."""
    docs: dict[str, Document] = {}
    for session in sessions:
        docs |= {doc["_id"]: doc for doc in await index.by_session(session)}
    for topic in every_session_of:
        every = await index.search(Search(topic=topic, limit=_ARCHIVE_LIMIT))
        if len(every) >= _ARCHIVE_LIMIT:
            raise ConfigError(
                f"{topic} holds more than {_ARCHIVE_LIMIT} records in the trace index: too many "
                "to rebuild its stores for a replay; leave it out (--processor)"
            )
        docs |= {doc["_id"]: doc for doc in every}
    return list(docs.values())

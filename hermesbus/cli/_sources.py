"""Where a replay or an export reads a slice: the broker, else the trace index's archive."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hermesbus.codec import Codec, codec_for
from hermesbus.compose.backends import trace_index
from hermesbus.compose.settings import Settings
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.connectors.sqlite.index import SqliteTraceIndex
from hermesbus.errors import BrokerError, ConfigError
from hermesbus.replay.shadow import (
    Recording,
    documents,
    recording_of,
    records_from_broker,
    sessions_of_trace,
)
from hermesbus.trace.index import ArchivedRecord, Document, Search, TraceIndex, archived, session_of
from hermesbus.trace.spans import Hop
from hermesbus.trace.tail import Position, session_topics, tail

from ._common import err_console, kafka_with, shown

__all__ = ["Read", "Slice", "read_sessions"]


@dataclass(frozen=True)
class Slice:
    """Which inputs are compared: a trace, a time range, offsets of one partition."""

    trace: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    offsets: tuple[tuple[str, int, int, int], ...] = ()

    def keeps(self, hop: Hop) -> bool:
        if self.trace is not None and hop.envelope.trace_id != self.trace:
            return False
        if self.since_ms is not None and hop.appended_ms < self.since_ms:
            return False
        if self.until_ms is not None and hop.appended_ms >= self.until_ms:
            return False
        if self.offsets:
            return any(
                hop.topic == topic and hop.partition == part and first <= hop.offset <= last
                for topic, part, first, last in self.offsets
            )
        return True


@dataclass(frozen=True)
class Read:
    """What a slice's sessions hold, as the broker or the archive has it."""

    records: list[ArchivedRecord]
    documents: list[Document]
    where: str
    sessions: list[str]
    codec: Codec
    """The bus's (its schema registry's): what the records are decoded with."""

    def recording(self, prefix: str) -> Recording:
        return recording_of(self.records, self.where, prefix=prefix, codec=self.codec)


async def read_sessions(
    settings: Settings,
    source: str,
    bootstrap: str | None,
    prefix: str,
    sessions: list[str],
    trace: str | None,
    across: list[str],
    *,
    chosen: Slice | None = None,
) -> Read:
    """The sessions' records (and a trace's sessions', or those of ``chosen``'s time range
    or offsets when no session is named) from the broker, or from the trace index's
    archive when no broker is configured, it has none of them or is down; ``settings``:
    the program's (the broker and its schema registry, the trace index)."""
    kafka = kafka_with(settings, bootstrap)
    codec = codec_for(settings.bus)
    chosen = chosen or Slice(trace=trace)
    if source != "archive" and kafka.bootstrap:
        try:
            return await _from_broker(
                kafka, codec, prefix, sessions, chosen, across, strict=source == "broker"
            )
        except LookupError:
            err_console.print(
                f"Kafka at {kafka.bootstrap} has none of it: reading the trace index's archive",
                soft_wrap=True,
            )
        except BrokerError as exc:
            if source == "broker":
                raise
            err_console.print(f"the broker is unreachable ({shown(exc)}): reading the trace index")
    elif source == "broker":
        raise ConfigError(
            "--source broker: no broker configured (--bootstrap or HERMES_KAFKA_BOOTSTRAP)"
        )
    return await _from_index(settings, codec, prefix, sessions, chosen, across)


async def _from_broker(
    kafka: KafkaConfig,
    codec: Codec,
    prefix: str,
    sessions: list[str],
    chosen: Slice,
    across: list[str],
    *,
    strict: bool,
) -> Read:
    """LookupError: the broker holds none of it (and ``strict`` is off)."""
    if chosen.trace is not None:
        of_trace = await sessions_of_trace(kafka, chosen.trace, prefix=prefix, codec=codec)
        sessions = [*sessions, *of_trace]
    elif not sessions:
        sessions = await _sessions_in_log(kafka, codec, prefix, chosen)
    sessions = list(dict.fromkeys(sessions))
    records = await records_from_broker(
        kafka, sessions, prefix=prefix, every_session_of=across, codec=codec
    )
    if not strict and not any(_session_of_record(r) in sessions for r in records):
        raise LookupError(sessions)
    return Read(records, [], f"Kafka at {kafka.bootstrap}", sessions, codec)


async def _sessions_in_log(
    kafka: KafkaConfig, codec: Codec, prefix: str, chosen: Slice
) -> list[str]:
    """The sessions with an envelope in ``chosen``'s offsets, or else its time range."""
    found: dict[str, None] = {}
    if chosen.offsets:
        for topic, part, first, last in chosen.offsets:
            start, end = Position("offset", first), Position("offset", last + 1)
            async for t in tail(kafka, [topic], start=start, end=end, codec=codec):
                if t.partition == part and t.envelope is not None:
                    found[t.envelope.session_id] = None
        return list(found)
    start = (
        Position("time", chosen.since_ms) if chosen.since_ms is not None else Position("beginning")
    )
    end = Position("time", chosen.until_ms) if chosen.until_ms is not None else Position("end")
    topics = session_topics(prefix)  # a rollup's or an alert's key is no session
    async for t in tail(kafka, topics, start=start, end=end, missing_ok=True, codec=codec):
        if t.envelope is not None:
            found[t.envelope.session_id] = None
    return list(found)


def _session_of_record(record: ArchivedRecord) -> str | None:
    return record.key.decode("utf-8", "replace") if record.key is not None else None


async def _from_index(
    settings: Settings,
    codec: Codec,
    prefix: str,
    sessions: list[str],
    chosen: Slice,
    across: list[str],
) -> Read:
    index = trace_index(settings, install=False)
    if isinstance(index, SqliteTraceIndex) and not _exists(index.where):
        raise ConfigError(
            f"no trace index at {index.where} and no broker with the records: `hermesbus up` "
            "indexes every envelope there; --bootstrap reads a broker instead"
        )
    async with index:
        if chosen.trace is not None:
            docs = await index.by_trace(chosen.trace)
            sessions += [found for doc in docs if (found := session_of(doc))]
        elif not sessions:
            sessions = await _sessions_in_index(index, chosen, prefix)
        sessions = list(dict.fromkeys(sessions))
        docs = await documents(index, sessions, every_session_of=across)
    where = f"trace index {index.where}"
    return Read([archived(doc) for doc in docs], docs, where, sessions, codec)


_SCAN_LIMIT = 100_000
"""Documents a time range or offsets are looked for in, to find their sessions."""


async def _sessions_in_index(index: TraceIndex, chosen: Slice, prefix: str) -> list[str]:
    if chosen.offsets:
        docs: list[Document] = []
        for topic, part, first, last in chosen.offsets:
            for doc in await index.search(Search(topic=topic, limit=_SCAN_LIMIT)):
                record = archived(doc)
                if record.partition == part and first <= record.offset <= last:
                    docs.append(doc)
    else:
        query = Search(since_ms=chosen.since_ms, until_ms=chosen.until_ms, limit=_SCAN_LIMIT)
        keyed = set(session_topics(prefix))  # a rollup's or an alert's key is no session
        docs = [doc for doc in await index.search(query) if archived(doc).topic in keyed]
    return list(dict.fromkeys(found for doc in docs if (found := session_of(doc))))


def _exists(path: str) -> bool:
    return Path(path).exists()

"""What the trace index holds and answers: archived records, queries, write results."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

__all__ = [
    "ArchivedRecord",
    "Document",
    "Search",
    "TraceIndex",
    "WriteResult",
    "archived",
    "doc_id",
    "session_of",
]

Document = dict[str, Any]
"""One envelope as an Elastic Common Schema document (see ``hermesbus.trace.index.document``)."""


def doc_id(topic: str, partition: int, offset: int, timestamp_ms: int) -> str:
    """The document id: the record's place in the log and its time, ``topic/p/offset@ms``.

    Re-indexing a record changes nothing (it has the same place and time). The time is
    there because a place alone is not unique for ever: the embedded broker's log starts
    at offset 0 on every ``up``, and so does a topic deleted and created again.
    """
    return f"{topic}/{partition}/{offset}@{timestamp_ms}"


@dataclass(frozen=True, slots=True)
class ArchivedRecord:
    """A record as the broker had it: coordinates, time, key, headers and the raw bytes."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()

    @property
    def id(self) -> str:
        return doc_id(self.topic, self.partition, self.offset, self.timestamp_ms)


def archived(doc: Mapping[str, Any]) -> ArchivedRecord:
    """The record a document archives (its ``hermes.raw`` and ``hermes.kafka``)."""
    hermes = doc["hermes"]
    kafka = hermes["kafka"]
    messaging = doc["messaging"]
    key = messaging["kafka"]["message"].get("key")
    stored = kafka.get("key")  # a refused document keeps its key here, not indexed
    return ArchivedRecord(
        topic=messaging["destination"]["name"],
        partition=int(messaging["kafka"]["destination"]["partition"]),
        offset=int(messaging["kafka"]["message"]["offset"]),
        timestamp_ms=int(kafka["timestamp_ms"]),
        key=base64.b64decode(stored) if stored else key.encode() if key is not None else None,
        value=base64.b64decode(hermes.get("raw") or ""),
        headers=tuple((h["key"], base64.b64decode(h["value"])) for h in kafka.get("headers", ())),
    )


def session_of(doc: Mapping[str, Any]) -> str | None:
    """The session of a document (``gen_ai.conversation.id``); None when it has none (a
    record that did not decode, or was refused)."""
    found = (doc.get("gen_ai") or {}).get("conversation", {}).get("id")
    return found if isinstance(found, str) and found else None


@dataclass(frozen=True, slots=True)
class Search:
    """The questions on-call asks first: which component, which outcome, when, what text.

    Every field narrows the answer; an unset one does not. ``since_ms``/``until_ms`` are
    epoch milliseconds of the log time (``@timestamp``), ``until_ms`` excluded.
    """

    component: str | None = None
    outcome: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    text: str | None = None
    session_id: str | None = None
    trace_id: str | None = None
    topic: str | None = None
    action: str | None = None
    limit: int = 100


@dataclass(slots=True)
class WriteResult:
    """What a batch write did: ids newly stored, ids already there, ids refused (why)."""

    stored: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class TraceIndex(Protocol):
    """Every envelope as a document, with its raw bytes: written by the indexer, read by
    ``trace``, ``session``, ``search`` and replay. Answers come in log order: log time,
    then topic, partition, offset. Implementations: SQLite (embedded) and Elasticsearch.
    """

    where: str
    """Where it is, for messages (a file path, a URL and data stream)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    async def write(self, docs: Sequence[Document]) -> WriteResult:
        """Store documents by their ``_id``; one already stored is left as it is.

        Raises TraceIndexError(retriable=True) when the index is unreachable or some
        documents could not be stored for now: the caller retries the batch.
        """
        ...

    async def by_trace(self, trace_id: str) -> list[Document]: ...

    async def by_session(self, session_id: str) -> list[Document]: ...

    async def search(self, query: Search) -> list[Document]: ...

    async def appended(self, message_ids: Sequence[str]) -> dict[str, int]:
        """The log time of each message id found (its first copy), for durations."""
        ...

    async def count(self) -> int: ...

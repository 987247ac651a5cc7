"""The trace index under test: each implementation in turn (one abstract suite for both)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hermesbus import Envelope
from hermesbus.codec import default_codec
from hermesbus.connectors.elasticsearch import ElasticsearchConfig, ElasticsearchTraceIndex
from hermesbus.connectors.sqlite.index import SqliteTraceIndex
from hermesbus.trace.index import (
    ArchivedRecord,
    Document,
    DocumentSettings,
    TraceIndex,
    decode,
    document,
)


def es_config(url: str, unique: str) -> ElasticsearchConfig:
    """A data stream of the test's own (the server has no DELETE _data_stream to clean up)."""
    return ElasticsearchConfig(url=url, data_stream=f"logs-hermes.envelopes-t{unique}")


@pytest.fixture(params=["sqlite", pytest.param("elasticsearch", marks=pytest.mark.elasticsearch)])
async def trace_index(
    request: pytest.FixtureRequest, tmp_path: Path, unique: str
) -> AsyncIterator[TraceIndex]:
    """SQLite in the test's folder, then Elasticsearch with a data stream of the test's own."""
    if request.param == "sqlite":
        index: TraceIndex = SqliteTraceIndex(tmp_path / "index.sqlite3")
    else:
        url = request.getfixturevalue("elasticsearch_url")
        index = ElasticsearchTraceIndex(es_config(url, unique))
    async with index:
        yield index


def record_of(
    envelope: Envelope, topic: str, offset: int, at_ms: int, value: bytes | None = None
) -> ArchivedRecord:
    """``envelope`` (or ``value`` instead of its bytes) at that place and time of the log."""
    return ArchivedRecord(
        topic=topic,
        partition=0,
        offset=offset,
        timestamp_ms=at_ms,
        key=envelope.session_id.encode(),
        value=value if value is not None else default_codec().encode(envelope),
        headers=(("trace_id", envelope.trace_id.encode()), ("x", b"\x00\x01")),
    )


def documents_of(records: list[ArchivedRecord]) -> list[Document]:
    """The documents the indexer makes of ``records``."""
    codec = default_codec()
    return [document(r, decode(r, codec), DocumentSettings()) for r in records]


async def searchable(index: TraceIndex) -> None:
    """Elasticsearch shows writes to searches after a refresh; SQLite at once."""
    refresh = getattr(index, "refresh", None)
    if refresh is not None:
        await refresh()

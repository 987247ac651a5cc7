"""The trace index under test: each implementation in turn (one abstract suite for both)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hermesbus.connectors.elasticsearch import ElasticsearchConfig, ElasticsearchTraceIndex
from hermesbus.connectors.sqlite.index import SqliteTraceIndex
from hermesbus.index import TraceIndex


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


async def searchable(index: TraceIndex) -> None:
    """Elasticsearch shows writes to searches after a refresh; SQLite at once."""
    refresh = getattr(index, "refresh", None)
    if refresh is not None:
        await refresh()

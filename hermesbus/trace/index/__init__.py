"""The trace index: every envelope of the log as a searchable document, raw bytes kept.

:class:`TraceIndex` is the port (SQLite embedded, Elasticsearch in production, both
under ``connectors/``); :func:`document` makes one Elastic Common Schema document of a
record; :class:`Indexer` is the consumer group that writes every topic into an index.
"""

from ._ecs import ROLLUP_DATASET, DocumentSettings, decode, document, iso_ms, refused_document
from ._indexer import INDEXER_GROUP, Indexer, IndexerStats
from ._model import (
    ArchivedRecord,
    Document,
    Search,
    TraceIndex,
    WriteResult,
    archived,
    doc_id,
    session_of,
)
from ._signature import Checked, check

__all__ = [
    "INDEXER_GROUP",
    "ROLLUP_DATASET",
    "ArchivedRecord",
    "Checked",
    "Document",
    "DocumentSettings",
    "Indexer",
    "IndexerStats",
    "Search",
    "TraceIndex",
    "WriteResult",
    "archived",
    "check",
    "decode",
    "doc_id",
    "document",
    "iso_ms",
    "refused_document",
    "session_of",
]

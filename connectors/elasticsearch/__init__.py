"""Elasticsearch connector: the production trace index (one ECS document per envelope in a
data stream, with its index template, component templates and lifecycle policy)."""

from .client import INSTALL_HINT, connect
from .config import ElasticsearchConfig
from .errors import ConfigError, TraceIndexError
from .index import ElasticsearchTraceIndex, ServerState, bulk_actions

__all__ = [
    "INSTALL_HINT",
    "ConfigError",
    "ElasticsearchConfig",
    "ElasticsearchTraceIndex",
    "ServerState",
    "TraceIndexError",
    "bulk_actions",
    "connect",
]

"""Elasticsearch connector: the production trace index (one ECS document per envelope in a
data stream, with its index template, component templates and lifecycle policy)."""

from hermesbus.connectors.elasticsearch.client import INSTALL_HINT, connect
from hermesbus.connectors.elasticsearch.config import ElasticsearchConfig
from hermesbus.connectors.elasticsearch.errors import ConfigError, TraceIndexError
from hermesbus.connectors.elasticsearch.index import (
    ElasticsearchTraceIndex,
    ServerState,
    bulk_actions,
)

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

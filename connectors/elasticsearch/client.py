"""The async Elasticsearch client from settings, and its errors in hermesbus's words.

elasticsearch-py's 8.x line speaks to 8.x servers natively and to 9.x clusters through
their REST compatibility with 8 (the 9.x client is refused by an 8.x server).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from hermesbus.connectors.elasticsearch.config import ElasticsearchConfig
from hermesbus.errors import ConfigError, TraceIndexError

if TYPE_CHECKING:
    from elasticsearch import AsyncElasticsearch

__all__ = ["INSTALL_HINT", "connect", "translated"]

INSTALL_HINT = "pip install 'hermesbus[elasticsearch]'"
_TOO_MANY = 429
_SERVER = 500
_DENIED = (401, 403)


def connect(config: ElasticsearchConfig) -> AsyncElasticsearch:
    """A client for ``config.url``; the optional dependency missing is a ConfigError."""
    if not config.url:
        raise ConfigError("no Elasticsearch URL: set HERMES_ELASTICSEARCH_URL")
    try:
        from elasticsearch import AsyncElasticsearch  # noqa: PLC0415 - an optional extra
        from elasticsearch.serializer import OrjsonSerializer  # noqa: PLC0415
    except ImportError as exc:
        raise ConfigError(
            f"HERMES_ELASTICSEARCH_URL is set but the Elasticsearch client is not installed: "
            f"{INSTALL_HINT}"
        ) from exc
    kwargs: dict[str, Any] = {
        "request_timeout": config.request_timeout_s,
        "max_retries": 1,
        "serializer": OrjsonSerializer(),  # bulk bodies are most of the indexer's CPU
    }
    if config.api_key is not None:
        kwargs["api_key"] = config.api_key.get_secret_value()
    return AsyncElasticsearch(config.url, **kwargs)


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of an elasticsearch-py error, None for a transport failure."""
    status = getattr(exc, "status_code", None)
    if status is None:
        meta = getattr(exc, "meta", None)
        status = getattr(meta, "status", None)
    return status if isinstance(status, int) else None


@contextmanager
def translated(what: str, url: str | None) -> Iterator[None]:
    """elasticsearch-py and transport errors as TraceIndexError (retriable for an outage)."""
    from elastic_transport import TransportError  # noqa: PLC0415 - an optional extra
    from elasticsearch import ApiError  # noqa: PLC0415

    try:
        yield
    except ApiError as exc:
        status = status_of(exc)
        retriable = status is not None and (status == _TOO_MANY or status >= _SERVER)
        hint = " (check HERMES_ELASTICSEARCH_API_KEY)" if status in _DENIED else ""
        raise TraceIndexError(
            f"Elasticsearch at {url} refused {what}: {status} {exc.message}{hint}",
            retriable=retriable,
        ) from exc
    except TransportError as exc:
        raise TraceIndexError(
            f"cannot reach Elasticsearch at {url} ({what}): {exc.message}"
        ) from exc

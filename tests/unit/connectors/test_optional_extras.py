"""A backend configured without its optional client installed: a clear error naming the
extra to install, never an ImportError's traceback."""

from __future__ import annotations

import sys

import pytest

from hermesbus.connectors import neo4j, redis
from hermesbus.errors import ConfigError


def test_redis_without_its_client_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis.asyncio", None)  # import fails as if not installed
    config = redis.RedisConfig(url="redis://127.0.0.1:1/0")
    with pytest.raises(ConfigError, match=r"pip install 'hermesbus\[redis\]'"):
        redis.connect(config)


def test_neo4j_without_its_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "neo4j", None)
    config = neo4j.Neo4jConfig(url="bolt://127.0.0.1:1")
    with pytest.raises(ConfigError, match=r"pip install 'hermesbus\[neo4j\]'"):
        neo4j.connect(config)


def test_a_password_in_the_url_is_never_shown() -> None:
    config = redis.RedisConfig(url="redis://:s3cret@cache:6379/0")
    assert config.shown_url == "redis://cache:6379/0"
    assert "s3cret" not in repr(config)
    graph = neo4j.Neo4jConfig(url="bolt://neo4j:pw@graph:7687", password="pw2")  # noqa: S106
    assert "pw" not in graph.shown_url and "pw2" not in repr(graph)

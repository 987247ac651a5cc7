"""Which failures of a store are outages (held in place) and which are refusals (a bug).

The drivers' own exception classes, raised inside each connector's ``translated`` (SQLite:
real errors from a real database file)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from neo4j.exceptions import ClientError, ServiceUnavailable, SessionExpired, TransientError
from redis._parsers.base import BaseParser
from redis.exceptions import BusyLoadingError, DataError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from hermesbus.connectors.neo4j import client as neo4j_client
from hermesbus.connectors.neo4j.config import Neo4jConfig
from hermesbus.connectors.redis import client as redis_client
from hermesbus.connectors.redis.config import RedisConfig
from hermesbus.connectors.sqlite.client import SqliteFile
from hermesbus.errors import StoreError


def neo4j_error(code: str) -> ClientError:
    error = ClientError._hydrate_neo4j(code=code, message="refused")
    assert isinstance(error, ClientError)
    return error


@pytest.mark.parametrize(
    ("error", "retriable"),
    [
        (RedisConnectionError("Connection closed by server."), True),
        (RedisTimeoutError("Timeout reading from socket"), True),
        (BusyLoadingError("Redis is loading the dataset in memory"), True),
        (DataError("Invalid input of type: 'dict'"), False),
    ],
)
async def test_redis(error: Exception, retriable: bool) -> None:
    with pytest.raises(StoreError) as raised:
        async with redis_client.translated(RedisConfig(url="redis://127.0.0.1:1/0"), "commit"):
            raise error
    assert raised.value.retriable is retriable


@pytest.mark.parametrize(
    ("reply", "retriable"),
    [
        ("READONLY You can't write against a read only replica.", True),
        ("OOM command not allowed when used memory > 'maxmemory'.", True),
        ("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", True),
        ("TRYAGAIN Multiple keys request during rehashing of slot", True),
        ("CLUSTERDOWN The cluster is down", True),
        ("MISCONF Redis is configured to save RDB snapshots, but it's currently unable", True),
        ("LOADING Redis is loading the dataset in memory", True),
        ("BUSY Redis is busy running a script.", True),
        ("WRONGTYPE Operation against a key holding the wrong kind of value", False),
        ("ERR unknown command 'FOO'", False),
    ],
)
async def test_redis_error_replies_as_redis_py_reads_them(reply: str, retriable: bool) -> None:
    """The exceptions redis-py's own parser makes of a server's error replies (it drops the
    code from the text of those it has a class for), alone and inside a pipeline."""
    error = BaseParser.parse_error(reply)  # type: ignore[no-untyped-call]
    in_pipeline = type(error)(f"Command # 1 (EVALSHA abc 1 k) of pipeline caused error: {error}")
    for raised in (error, in_pipeline):
        with pytest.raises(StoreError) as caught:
            async with redis_client.translated(RedisConfig(url="redis://127.0.0.1:1/0"), "x"):
                raise raised
        assert caught.value.retriable is retriable, raised


@pytest.mark.parametrize(
    ("error", "retriable"),
    [
        (ServiceUnavailable("Unable to retrieve routing information"), True),
        (SessionExpired("the session expired"), True),
        (OSError("connection reset"), True),
    ],
)
async def test_neo4j_outages(error: Exception, retriable: bool) -> None:
    with pytest.raises(StoreError) as raised:
        async with neo4j_client.translated(Neo4jConfig(url="bolt://127.0.0.1:1"), "query"):
            raise error
    assert raised.value.retriable is retriable


@pytest.mark.parametrize(
    ("code", "retriable"),
    [
        ("Neo.ClientError.Statement.SyntaxError", False),
        ("Neo.ClientError.Schema.ConstraintValidationFailed", False),
        ("Neo.ClientError.Security.Unauthorized", True),
        ("Neo.TransientError.Transaction.DeadlockDetected", True),
    ],
)
async def test_neo4j_server_answers(code: str, retriable: bool) -> None:
    error = (
        TransientError._hydrate_neo4j(code=code, message="busy")
        if ".TransientError." in code
        else neo4j_error(code)
    )
    with pytest.raises(StoreError) as raised:
        async with neo4j_client.translated(Neo4jConfig(url="bolt://127.0.0.1:1"), "query"):
            raise error
    assert raised.value.retriable is retriable


class Table(SqliteFile):
    what = "test table"
    schema = "CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY)"


async def test_sqlite_constraint_is_a_refusal_and_a_locked_database_an_outage(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.sqlite3"
    async with Table(path) as table:
        with table._write() as db:
            db.execute("INSERT INTO t VALUES ('a')")
        with pytest.raises(StoreError) as refused, table._write() as db:
            db.execute("INSERT INTO t VALUES ('a')")
        assert refused.value.retriable is False
        other = sqlite3.connect(path, timeout=0)
        other.execute("BEGIN EXCLUSIVE")  # another process holds the database
        try:
            with pytest.raises(StoreError) as locked, table._write() as db:
                db.execute("INSERT INTO t VALUES ('b')")
        finally:
            other.rollback()
            other.close()
        assert "locked" in str(locked.value)
        assert locked.value.retriable is True


async def test_a_full_sqlite_database_is_an_outage_named_as_full(tmp_path: Path) -> None:
    """SQLite rolls back itself on SQLITE_FULL: the error says the disk is full (not that
    there was no transaction to roll back) and is an outage."""
    async with Table(tmp_path / "t.sqlite3") as table:
        table.db.execute("PRAGMA max_page_count = 3")  # a database that cannot grow
        with pytest.raises(StoreError) as full, table._write() as db:
            db.executemany("INSERT INTO t VALUES (?)", [(f"{i:0>500}",) for i in range(200)])
        assert "full" in str(full.value)
        assert full.value.retriable is True

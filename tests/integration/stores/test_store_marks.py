"""Store marks (issue 25, item 2): a store that comes back empty is noticed.

SQLite: the file deleted or replaced under a running store. Neo4j: the namespace's graph
emptied. Redis: the keys flushed without a restart (a restart is the fault suite's
``test_store_empty.py``). Each: every operation raises ``StoreLost``, one ERROR line names
the store, and only an adoption (or the store's own data back) resumes.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from hermesbus.base.storemark import BOOK_NAME, CHECK_EVERY_S, MarkBook
from hermesbus.connectors.neo4j import Neo4jConfig, Neo4jGraphStore
from hermesbus.connectors.redis import RedisConfig, RedisStateStore
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.contract.payloads import TrustLevel
from hermesbus.errors import ConfigError, StoreLost
from hermesbus.runtime import SessionState, StateChange
from tests.cli_process import clean_env, hermesbus

NOTICED_S = 20 * CHECK_EVERY_S
"""How long a running store may take to notice (it reads its mark every CHECK_EVERY_S)."""


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A state folder of the test's own: its book of marks starts empty."""
    folder = tmp_path / "home"
    monkeypatch.setenv("HERMES_HOME", str(folder))
    return folder


@pytest.fixture
def book(home: Path) -> MarkBook:
    """The book of the test's state folder, given to every store it opens."""
    return MarkBook(home)


def remove(path: Path) -> None:
    """The database gone as ``rm state.sqlite3*`` does it: the file, its WAL and index."""
    for part in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        part.unlink(missing_ok=True)


def change(version: int, message_id: str, **data: object) -> StateChange:
    return StateChange(version, message_id, data, (message_id,))


async def until_lost(operation: Callable[[], Awaitable[object]]) -> StoreLost:
    """Run ``operation`` until it raises StoreLost (polled, within NOTICED_S)."""
    deadline = time.monotonic() + NOTICED_S
    while True:
        try:
            await operation()
        except StoreLost as exc:
            return exc
        assert time.monotonic() < deadline, f"no StoreLost within {NOTICED_S:g} s"
        await asyncio.sleep(0.2)


async def until_back(operation: Callable[[], Awaitable[object]]) -> object:
    """Run ``operation`` until it no longer raises StoreLost (within NOTICED_S)."""
    deadline = time.monotonic() + NOTICED_S
    while True:
        try:
            return await operation()
        except StoreLost:
            assert time.monotonic() < deadline, f"still lost after {NOTICED_S:g} s"
            await asyncio.sleep(0.2)


def lost_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.ERROR and r.getMessage().startswith("STORE LOST")
    ]


# -- SQLite -------------------------------------------------------------------------------


async def test_sqlite_file_deleted_under_a_running_store_is_lost_until_adopted(
    home: Path, book: MarkBook, caplog: pytest.LogCaptureFixture
) -> None:
    path = home / "state.sqlite3"
    async with SqliteStateStore(path, book=book) as store:
        assert await store.commit("conv", "s1", change(0, "m1", n=1))
        remove(path)
        lost = await until_lost(lambda: store.load("conv", "s1"))
        assert "is lost (its mark is gone)" in str(lost)
        with pytest.raises(StoreLost):  # nothing is written past it
            await store.commit("conv", "s1", change(1, "m2", n=2))
        async with SqliteStateStore(path, book=book) as restarted:  # a restarted up: lost too
            with pytest.raises(StoreLost):
                await restarted.load("conv", "s1")
            await restarted.adopt()  # what `hermesbus stores adopt` does
        state = await until_back(lambda: store.load("conv", "s1"))
        assert state == SessionState()  # accepted as empty: the session starts afresh
        assert await store.commit("conv", "s1", change(0, "m3", n=3))
    running, restarted_line = lost_lines(caplog)  # one per store, however often retried
    assert running == restarted_line
    assert f"the SQLite state store {path} came back empty" in running
    assert "every session's state, outboxes and timers" in running


async def test_sqlite_file_replaced_by_another_stores_is_lost(
    home: Path, book: MarkBook, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, other = home / "state.sqlite3", tmp_path / "other" / "state.sqlite3"
    async with SqliteStateStore(other, book=book):
        pass  # a store of its own mark
    async with SqliteStateStore(path, book=book) as store:
        assert await store.commit("conv", "s1", change(0, "m1", n=1))
        remove(path)
        shutil.copy(other, path)
        lost = await until_lost(lambda: store.load("conv", "s1"))
        assert "its mark is another" in str(lost)
    (line,) = lost_lines(caplog)
    assert "is not the store the bus used: its mark is epoch" in line


async def test_sqlite_file_restored_resumes_by_itself(home: Path, book: MarkBook) -> None:
    """The store's own data back (a backup copied in place): its mark matches, no adoption."""
    path, backup = home / "state.sqlite3", home / "backup.sqlite3"
    async with SqliteStateStore(path, book=book) as store:
        assert await store.commit("conv", "s1", change(0, "m1", n=1))
        store.db.execute(f"VACUUM INTO '{backup}'")
        remove(path)
        await until_lost(lambda: store.load("conv", "s1"))
        shutil.copy(backup, path)
        state = await until_back(lambda: store.load("conv", "s1"))
        assert isinstance(state, SessionState) and dict(state.data) == {"n": 1}


async def test_sqlite_in_memory_carries_no_mark(home: Path, book: MarkBook) -> None:
    async with SqliteStateStore(":memory:", book=book) as store:
        assert store.marks is None
        assert await store.commit("conv", "s1", change(0, "m1"))
    assert not (home / BOOK_NAME).exists()


async def test_a_store_given_no_book_refuses_to_start_before_opening_anything(
    home: Path, tmp_path: Path
) -> None:
    """No book looked for in the environment's state folder (``HERMES_HOME`` is set)."""
    path = tmp_path / "nobook" / "state.sqlite3"
    store = SqliteStateStore(path)
    with pytest.raises(ConfigError, match=f"no book of store marks given: .* {path}"):
        await store.start()
    assert not path.parent.exists() and not (home / BOOK_NAME).exists()
    async with SqliteStateStore(":memory:") as unmarked:  # carries no mark: needs none
        assert await unmarked.commit("conv", "s1", change(0, "m1"))


def test_stores_check_and_adopt_name_a_sqlite_file_deleted(home: Path, tmp_path: Path) -> None:
    """The operator's commands: ``stores check`` fails naming the store and the action,
    ``stores adopt`` accepts it, and ``check`` is ok again."""
    asyncio.run(_first_use(home))
    remove(home / "state.sqlite3")
    env = clean_env(home)
    check = hermesbus("stores", "check", "--home", str(home), env=env, cwd=tmp_path)
    assert check.code == 1, check.output
    assert f"FAIL  store state: the SQLite state store {home / 'state.sqlite3'}" in check.out
    assert "its mark is gone: it came back empty" in check.out
    assert "fix: `hermesbus stores adopt`" in check.out
    assert "ok    store tools" in check.out  # the others still carry theirs
    adopt = hermesbus("stores", "adopt", "--home", str(home), env=env, cwd=tmp_path)
    assert adopt.code == 0, adopt.output
    assert "adopted  state: the SQLite state store" in adopt.out
    assert "kept     tools" in adopt.out and "stores: 1 adopted" in adopt.out
    again = hermesbus("stores", "check", "--home", str(home), env=env, cwd=tmp_path)
    assert again.code == 0, again.output
    nothing = hermesbus("stores", "adopt", "--home", str(home), env=env, cwd=tmp_path)
    assert "nothing to adopt: every store has its mark" in nothing.out


async def _first_use(home: Path) -> None:
    from hermesbus.compose.backends import memory_stores, state_store, tool_store
    from hermesbus.compose.settings import Settings

    settings = Settings.from_environment()
    async with state_store(settings), tool_store(settings), memory_stores(settings):
        pass
    assert (home / BOOK_NAME).exists()


# -- Neo4j --------------------------------------------------------------------------------


async def test_neo4j_graph_emptied_is_lost_until_adopted(
    neo4j_url: str, unique: str, book: MarkBook, caplog: pytest.LogCaptureFixture
) -> None:
    config = Neo4jConfig(url=neo4j_url, namespace=f"m{unique}")
    async with Neo4jGraphStore(config, book=book) as store:
        assert await store.facts("user:u1", TrustLevel.RAW) == ()
        await store.driver.execute_query("MATCH (n {ns: $ns}) DETACH DELETE n", ns=config.namespace)
        await until_lost(lambda: store.facts("user:u1", TrustLevel.RAW))
        assert await store.peek() is None
        async with Neo4jGraphStore(config, book=book) as restarted:
            with pytest.raises(StoreLost):
                await restarted.node("user:u1")
            await restarted.adopt()
        assert await until_back(lambda: store.facts("user:u1", TrustLevel.RAW)) == ()
    line, _restarted = lost_lines(caplog)  # one per store (the running one, the restarted)
    assert f"the Neo4j graph store at {neo4j_url}" in line and f"namespace m{unique}" in line
    assert "memory's long-term graph" in line


# -- Redis --------------------------------------------------------------------------------


async def test_redis_keys_flushed_without_a_restart_are_noticed(
    redis_url: str, unique: str, book: MarkBook, caplog: pytest.LogCaptureFixture
) -> None:
    """No reconnect to see it by: the mark is read again every CHECK_EVERY_S, and at once
    after a lost compare-and-set (a commit against the emptied store loses it)."""
    config = RedisConfig(url=redis_url, prefix=f"m{unique}")
    async with RedisStateStore(config, book=book) as store:
        assert await store.commit("conv", "s1", change(0, "m1", n=1))
        keys = [k async for k in store.redis.scan_iter(match=f"{config.prefix}:*")]
        await store.redis.delete(*keys)
        assert not await store.commit("conv", "s1", change(1, "m2", n=2))  # version moved
        with pytest.raises(StoreLost):  # the reload after it: refused, not an empty state
            await store.load("conv", "s1")
        async with RedisStateStore(config, book=book) as restarted:
            await restarted.adopt()
        assert await until_back(lambda: store.load("conv", "s1")) == SessionState()
    line, _restarted = lost_lines(caplog)  # one per store (the running one, the restarted)
    assert f"the Redis state store at {redis_url} (prefix m{unique}) came back empty" in line

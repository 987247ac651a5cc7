"""The StateStore contract, run against every implementation: SQLite and a real Redis.

Every test taking ``store`` runs once per backend with the same assertions; what only one
backend promises (a file, a hash slot, scripts) is tested after them, by name."""

from __future__ import annotations

import asyncio
import random
import socket
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hermesbus.base.lifecycle import cancel_and_wait
from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.redis import RedisConfig, RedisStateStore
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.errors import StoreError
from hermesbus.processors.flow import StorePaths
from hermesbus.runtime import OutRecord, SessionState, StateChange, StateStore, StoredTimer


@pytest.fixture(params=["sqlite", "redis"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, book: MarkBook
) -> AsyncIterator[StateStore]:
    if request.param == "redis":
        config = request.getfixturevalue("redis_config")
        async with RedisStateStore(config, book=book) as redis:
            yield redis
        return
    async with SqliteStateStore(tmp_path / "state.sqlite3", book=book) as sqlite:
        yield sqlite


@pytest.fixture
async def redis_store(redis_config: RedisConfig, book: MarkBook) -> AsyncIterator[RedisStateStore]:
    async with RedisStateStore(redis_config, book=book) as store:
        yield store


def change(version: int, message_id: str, **data: object) -> StateChange:
    return StateChange(version, message_id, data, applied=(message_id,))


def timer(timer_id: str, purpose: str, due: int, partition: int = 0) -> StoredTimer:
    record = OutRecord("in", b"s1", timer_id.encode(), (("h", b"\x00\xff"),), partition)
    return StoredTimer(timer_id, "conv", "s1", purpose, due, record)


async def test_an_unknown_session_has_version_zero(store: StateStore) -> None:
    assert await store.load("conv", "s1") == SessionState()


async def test_compare_and_set(store: StateStore) -> None:
    assert await store.commit("conv", "s1", change(0, "m1", n=1))
    assert not await store.commit("conv", "s1", change(0, "m1", n=1))  # already created
    state = await store.load("conv", "s1")
    assert (state.version, dict(state.data), state.applied) == (1, {"n": 1}, ("m1",))
    assert await store.commit("conv", "s1", change(1, "m2", n=2))
    assert not await store.commit("conv", "s1", change(1, "m2", n=99))  # a zombie's stale save
    assert (await store.load("conv", "s1")).data == {"n": 2}
    assert (await store.load("other", "s1")).version == 0  # per processor


async def test_saved_state_keeps_its_keys_in_order(store: StateStore) -> None:
    # a reloaded session reads as the runtime's cached copy did, dict order included
    data = {"z": 1, "a": {"y": 2, "b": 3}, "m": [3, 1]}
    assert await store.commit("conv", "s1", StateChange(0, "m1", data, ("m1",)))
    loaded = (await store.load("conv", "s1")).data
    assert list(loaded) == ["z", "a", "m"] and list(loaded["a"]) == ["y", "b"]


async def test_a_failed_compare_and_set_writes_nothing(store: StateStore) -> None:
    await store.commit("conv", "s1", change(0, "m1"))
    stale = StateChange(
        0, "m2", {}, ("m2",), outbox=(OutRecord("out", b"k", b"v"),), timers=(timer("t", "p", 1),)
    )
    assert not await store.commit("conv", "s1", stale)
    assert await store.outbox("conv", "s1", "m2") == []
    assert await store.due("conv", [("in", 0)], 10, 10) == []


async def test_outbox_is_saved_with_the_state_and_cleared(store: StateStore) -> None:
    records = (OutRecord("out", b"k", b"v1", (("a", b"1"),)), OutRecord("tool", None, b"v2"))
    saved = StateChange(0, "m1", {}, ("m1",), outbox=records)
    assert await store.commit("conv", "s1", saved)
    assert await store.outbox("conv", "s1", "m1") == list(records)
    await store.clear_outbox("conv", "s1", "m1")
    assert await store.outbox("conv", "s1", "m1") == []


async def test_the_next_commit_drops_the_previous_outbox_unless_told_not_to(
    store: StateStore,
) -> None:
    first = StateChange(0, "m1", {}, ("m1",), outbox=(OutRecord("out", b"k", b"1"),))
    assert await store.commit("conv", "s1", first)
    kept = StateChange(1, "m2", {}, ("m2",), outbox=(OutRecord("out", b"k", b"2"),))
    assert await store.commit("conv", "s1", kept._replace(clear_previous=False))
    assert len(await store.outbox("conv", "s1", "m1")) == 1  # its transaction may be open
    assert await store.commit("conv", "s1", StateChange(2, "m3", {}, ("m3",)))
    assert await store.outbox("conv", "s1", "m1") == []
    assert await store.outbox("conv", "s1", "m2") == []


async def test_timers_one_per_purpose_cancel_and_due_by_partition(store: StateStore) -> None:
    await store.schedule(timer("t1", "wait", 100))
    await store.schedule(timer("t2", "wait", 200))  # replaces t1: same session and purpose
    await store.schedule(timer("t3", "expire", 150, partition=1))
    assert [t.timer_id for t in await store.due("conv", [("in", 0), ("in", 1)], 1000, 10)] == [
        "t3",
        "t2",
    ]
    assert [t.timer_id for t in await store.due("conv", [("in", 0)], 1000, 10)] == ["t2"]
    assert await store.due("conv", [("in", 0)], 199, 10) == []
    assert await store.due("conv", [], 1000, 10) == []
    (due,) = await store.due("conv", [("in", 0)], 1000, 10)
    assert due == timer("t2", "wait", 200)  # the record round-trips, binary headers too
    cancel = StateChange(0, "m1", {}, ("m1",), cancel=("wait",))
    assert await store.commit("conv", "s1", cancel)
    assert [t.timer_id for t in await store.due("conv", [("in", 0), ("in", 1)], 1000, 10)] == ["t3"]
    await store.delete_timer("t3")
    assert await store.due("conv", [("in", 1)], 1000, 10) == []


async def test_sqlite_state_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    async with SqliteStateStore(path, book=MarkBook(tmp_path)) as store:
        await store.commit("conv", "s1", change(0, "m1", n=1))
        await store.schedule(timer("t1", "wait", 100))
    async with SqliteStateStore(path, book=MarkBook(tmp_path)) as store:
        assert (await store.load("conv", "s1")).data == {"n": 1}
        assert len(await store.due("conv", [("in", 0)], 1000, 10)) == 1


async def test_sqlite_two_connections_fence_each_other(tmp_path: Path) -> None:
    """Two worker processes share the file: only one save of the same version wins."""
    path = tmp_path / "s.sqlite3"
    async with (
        SqliteStateStore(path, book=MarkBook(tmp_path)) as a,
        SqliteStateStore(path, book=MarkBook(tmp_path)) as b,
    ):
        await a.commit("conv", "s1", change(0, "m1"))
        loaded_a, loaded_b = await a.load("conv", "s1"), await b.load("conv", "s1")
        assert await b.commit("conv", "s1", change(loaded_b.version, "m2"))
        assert not await a.commit("conv", "s1", change(loaded_a.version, "m2"))


async def test_sqlite_errors_are_store_errors(tmp_path: Path) -> None:
    store = SqliteStateStore(tmp_path / "s.sqlite3", book=MarkBook(tmp_path))
    with pytest.raises(StoreError, match="not started"):
        await store.load("conv", "s1")
    (tmp_path / "dir.sqlite3").mkdir()
    with pytest.raises(StoreError, match="cannot open the state store"):
        await SqliteStateStore(tmp_path / "dir.sqlite3", book=MarkBook(tmp_path)).start()
    async with SqliteStateStore(tmp_path / "s.sqlite3", book=MarkBook(tmp_path)) as store:
        db = sqlite3.connect(tmp_path / "s.sqlite3")
        db.execute("DROP TABLE state")
        db.close()
        with pytest.raises(StoreError, match="state store read failed"):
            await store.load("conv", "s1")


async def test_unchanged_data_is_kept(store: StateStore) -> None:
    assert await store.commit("conv", "s1", change(0, "m1", n=1))
    same = StateChange(1, "m2", {"n": 1}, ("m1", "m2"), data_changed=False)
    assert await store.commit("conv", "s1", same)
    state = await store.load("conv", "s1")
    assert (state.version, dict(state.data), state.applied) == (2, {"n": 1}, ("m1", "m2"))


async def test_resuming_a_partition_moves_its_pending_timers_by_the_time_nobody_ran_it(
    store: StateStore,
) -> None:
    assert await store.resume("conv", "in", 0, 5_000) == 0  # never ran: nothing to charge
    await store.schedule(timer("overdue", "a", 9_000))  # was due while the partition ran
    await store.schedule(timer("pending", "b", 12_000))  # due after the last heartbeat
    await store.schedule(timer("elsewhere", "c", 12_000, partition=1))
    await store.heartbeat("conv", [("in", 0), ("in", 1)], 10_000)
    assert await store.resume("conv", "in", 0, 70_000) == 60_000
    due = {t.timer_id: t.due_at_ms for t in await store.due("conv", [("in", 0)], 2**62, 10)}
    assert due == {"overdue": 9_000, "pending": 72_000}  # 2 s left at the heartbeat: 2 s left
    other = await store.due("conv", [("in", 1)], 2**62, 10)
    assert [t.due_at_ms for t in other] == [12_000]  # another partition: untouched
    assert await store.resume("conv", "in", 0, 70_500) == 500  # from the resume on
    assert await store.resume("other", "in", 0, 70_500) == 0  # per processor


async def test_redis_keys_of_a_session_share_one_hash_slot(redis_store: RedisStateStore) -> None:
    from redis.crc import key_slot

    records = (OutRecord("out", b"k", b"v"),)
    with_timer = StateChange(
        0, "m1", {"n": 1}, ("m1",), outbox=records, timers=(timer("t", "w", 5),)
    )
    assert await redis_store.commit("conv", "s1", with_timer)
    keys = [k async for k in redis_store.redis.scan_iter(match=f"{redis_store.config.prefix}:*")]
    mine = [k for k in keys if b"{s1}" in k]
    assert len(mine) == 4  # state, outbox, timers, purposes
    assert len({key_slot(k) for k in mine}) == 1
    mark = f"{redis_store.config.prefix}:{{{redis_store.config.prefix}:mark}}:state".encode()
    index = [k for k in keys if k not in mine and k != mark]  # the store's mark: its own slot
    assert index and len({key_slot(k) for k in index}) == 1  # the timer index: its own slot


async def test_redis_scripts_are_loaded_again_after_a_flush(redis_store: RedisStateStore) -> None:
    assert await redis_store.commit("conv", "s1", change(0, "m1", n=1))
    await redis_store.redis.script_flush()  # a restarted or failed-over server: NOSCRIPT
    assert await redis_store.commit("conv", "s1", change(1, "m2", n=2))
    assert dict((await redis_store.load("conv", "s1")).data) == {"n": 2}


async def test_redis_two_clients_fence_each_other(
    redis_url: str, unique: str, tmp_path: Path
) -> None:
    """Two workers share the server: only one save of the same version wins (a zombie's
    stale save writes nothing, its outbox and timers neither)."""
    config = RedisConfig(url=redis_url, prefix=f"t{unique}")
    async with (
        RedisStateStore(config, book=MarkBook(tmp_path)) as a,
        RedisStateStore(config, book=MarkBook(tmp_path)) as b,
    ):
        await a.commit("conv", "s1", change(0, "m1"))
        version = (await a.load("conv", "s1")).version
        assert await b.commit("conv", "s1", change(version, "m2", n=2))
        late = StateChange(version, "m2", {"n": 99}, ("m2",), outbox=(OutRecord("o", b"k", b"z"),))
        assert not await a.commit("conv", "s1", late._replace(timers=(timer("z", "w", 1),)))
        assert dict((await b.load("conv", "s1")).data) == {"n": 2}
        assert await b.outbox("conv", "s1", "m2") == []
        assert await b.due("conv", [("in", 0)], 10, 10) == []  # its index entry: dropped


async def test_redis_unreachable_is_a_store_error_naming_the_server_not_its_password(
    tmp_path: Path,
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = RedisConfig(url=f"redis://:s3cret@127.0.0.1:{port}/0", timeout_s=0.5)
    with pytest.raises(StoreError) as caught:
        await RedisStateStore(config, book=MarkBook(tmp_path)).start()
    assert f"127.0.0.1:{port}" in str(caught.value) and "s3cret" not in str(caught.value)


async def test_redis_cancelled_and_replaced_timers_leave_no_index_entry(
    redis_store: RedisStateStore,
) -> None:
    await redis_store.schedule(timer("t1", "wait", 10**12))  # far off: never due in the test
    await redis_store.schedule(timer("t2", "wait", 10**12))  # replaces t1
    with_timer = StateChange(0, "m1", {}, ("m1",), timers=(timer("t3", "other", 10**12),))
    assert await redis_store.commit("conv", "s1", with_timer)
    cancel = StateChange(1, "m2", {}, ("m2",), cancel=("wait", "other"))
    assert await redis_store.commit("conv", "s1", cancel)
    index = [k async for k in redis_store.redis.scan_iter(match="*:due:*")]
    prefix = redis_store.config.prefix.encode()
    assert [k for k in index if k.startswith(prefix + b":")] == []  # empty sets are gone
    owner = f"{redis_store.config.prefix}:{{{redis_store.config.prefix}:timers}}:owner"
    assert await redis_store.redis.hlen(owner) == 0


async def test_redis_one_cancellation_ends_a_task_running_commands_wherever_it_lands(
    redis_store: RedisStateStore,
) -> None:
    """A processor's timer loop calls Redis until it is cancelled at stop. With a socket
    timeout, redis-py wraps each send in ``asyncio.wait_for``, which on Python 3.11 drops a
    cancellation landing as the send completes: most of these loops then ran on (and a
    stop hung). Every one must end on its first cancellation."""
    rng = random.Random(14)  # the same cancellation points every run
    ran_on = 0
    for _ in range(300):

        async def loop() -> None:
            while True:
                await redis_store.load("p", "s1")
                await redis_store.due("p", [("in", 0), ("in", 1)], 10, 10)

        task = asyncio.create_task(loop())
        await asyncio.sleep(rng.random() * 0.003)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=1)
        ran_on += not done
        await cancel_and_wait([task], "the test", within_s=5)  # so a failure leaves nothing running
    assert ran_on == 0, f"{ran_on} of 300 loops went on after being cancelled"
    assert await redis_store.load("p", "s1") == SessionState()  # and the client still works


async def test_redis_that_stops_answering_is_a_store_error_then_is_used_again(
    redis_url: str, unique: str, tmp_path: Path
) -> None:
    """``CLIENT PAUSE ... ALL`` holds every client's commands on the real server, as a hung or
    overloaded Redis would: the operation fails within ``timeout_s`` naming what it was
    doing, and once the server answers again the same store works."""
    config = RedisConfig(url=redis_url, prefix=f"t{unique}", timeout_s=0.3)
    async with (
        RedisStateStore(config, book=MarkBook(tmp_path)) as store,
        RedisStateStore(config, book=MarkBook(tmp_path)) as admin,
    ):
        await admin.redis.client_pause(1500, all=True)
        with pytest.raises(StoreError, match=r"load did not finish within 0\.3 s"):
            await store.load("p", "s1")
        deadline = asyncio.get_running_loop().time() + 10
        while True:  # the pause ends after 1.5 s
            try:
                assert await store.load("p", "s1") == SessionState()
                break
            except StoreError:
                assert asyncio.get_running_loop().time() < deadline, "Redis never answered again"


# -- frequent paths: the flow engine's counts, kept in the state store ------------------


async def test_completed_paths_are_counted_once_per_session_and_per_flow_version(
    store: StateStore,
) -> None:
    paths = StorePaths(store)
    await paths.completed("parcel", 1, ("asked", "looked_up", "closed"), "s1")
    await paths.completed("parcel", 1, ("asked", "looked_up", "closed"), "s1")  # redelivered
    await paths.completed("parcel", 1, ("asked", "closed"), "s2")
    await paths.completed("parcel", 2, ("asked", "closed"), "s3")
    assert [await paths.count("parcel", 1, s) for s in ("asked", "looked_up", "closed")] == [
        2,
        1,
        2,
    ]
    assert await paths.count("parcel", 2, "looked_up") == 0
    assert await paths.count("parcel", 2, "asked") == 1


async def test_instances_counting_at_once_lose_no_session(store: StateStore) -> None:
    first, second = StorePaths(store), StorePaths(store)  # two instances, one store
    await asyncio.gather(
        *(
            (first if n % 2 else second).completed("parcel", 1, ("asked", "closed"), f"s{n}")
            for n in range(20)
        )
    )
    assert await first.count("parcel", 1, "closed") == 20

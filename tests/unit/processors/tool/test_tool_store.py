"""The abstract ToolStore suite: every implementation passes it (SQLite here; Redis in
``tests/integration/stores/test_tool_store.py``, which imports these very tests)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.sqlite import tools as sqlite_tools
from hermesbus.connectors.sqlite.tools import SqliteToolStore
from hermesbus.contract.payloads import ToolResult
from hermesbus.processors.tool import (
    KEEP_ADMITTED_MS,
    CallStats,
    Probe,
    StoredResult,
    ToolStore,
    Window,
    spec_from_json,
)

from .conftest import python_spec


@pytest.fixture
async def tool_store(tmp_path: Path) -> AsyncIterator[ToolStore]:
    async with SqliteToolStore(tmp_path / "tools.sqlite3", book=MarkBook(tmp_path)) as store:
        yield store


def stored(tool: str, at_ms: int, text: str = "ok") -> StoredResult:
    return StoredResult(ToolResult(tool=tool, status_code=200, result_json=f'"{text}"'), at_ms)


async def test_specs_are_kept_by_name_and_listed_in_order(tool_store: ToolStore) -> None:
    b, a = python_spec("b_tool", "echo"), python_spec("a_tool", "echo")
    await tool_store.save_spec(b)
    await tool_store.save_spec(a)
    assert await tool_store.get_spec("b_tool") == b
    assert await tool_store.get_spec("none") is None
    assert [s.name for s in await tool_store.list_specs()] == ["a_tool", "b_tool"]
    again = python_spec("b_tool", "echo", timeout_s=9.0)
    await tool_store.save_spec(again)  # replaced
    assert await tool_store.get_spec("b_tool") == again


async def test_a_result_is_found_by_its_idempotency_key_with_its_digest(
    tool_store: ToolStore,
) -> None:
    await tool_store.put_result("k1", "d1", stored("org_tool", 100))
    found = await tool_store.get_result("k1")
    assert found == StoredResult(stored("org_tool", 100).result, 100, "d1")
    assert await tool_store.get_result("k2") is None


async def test_a_spec_is_replaced_only_if_it_is_still_as_read(tool_store: ToolStore) -> None:
    read = python_spec("cas_tool", "echo")
    await tool_store.save_spec(read)
    theirs = read.model_copy(update={"timeout_s": 7.0})
    ours = read.model_copy(update={"timeout_s": 9.0})
    assert await tool_store.replace_spec(read, theirs)
    assert not await tool_store.replace_spec(read, ours)  # changed since it was read
    assert await tool_store.get_spec("cas_tool") == theirs
    missing = python_spec("no_tool", "echo")
    assert not await tool_store.replace_spec(missing, missing)  # nothing stored: no insert
    assert await tool_store.get_spec("no_tool") is None


async def test_the_newest_result_for_the_arguments_is_the_cache(tool_store: ToolStore) -> None:
    await tool_store.put_result("k1", "d1", stored("org_tool", 100, "old"))
    await tool_store.put_result("k2", "d1", stored("org_tool", 300, "new"))
    await tool_store.put_result("k3", "d1", stored("org_tool", 200, "mid"))
    await tool_store.put_result("k4", "d2", stored("org_tool", 900, "other args"))
    await tool_store.put_result("k5", "d1", stored("trip_tool", 900, "other tool"))
    newest = await tool_store.last_result("org_tool", "d1")
    assert newest is not None and (newest.at_ms, newest.result.result_json) == (300, '"new"')
    assert await tool_store.last_result("org_tool", "d9") is None


async def test_a_key_stored_again_is_replaced(tool_store: ToolStore) -> None:
    await tool_store.put_result("k1", "d1", stored("org_tool", 100, "first"))
    await tool_store.put_result("k1", "d2", stored("org_tool", 200, "second"))
    found = await tool_store.get_result("k1")
    assert found is not None and (found.digest, found.at_ms) == ("d2", 200)
    assert await tool_store.last_result("org_tool", "d1") is None  # the old entry is gone


async def test_old_results_are_pruned_by_envelope_time(tool_store: ToolStore) -> None:
    await tool_store.put_result("k1", "d1", stored("org_tool", 100))
    await tool_store.put_result("k2", "d1", stored("org_tool", 200))
    await tool_store.put_result("k3", "d2", stored("org_tool", 300), prune_before_ms=200)
    assert await tool_store.get_result("k1") is None
    assert await tool_store.get_result("k2") is not None  # at the bound: kept
    newest = await tool_store.last_result("org_tool", "d1")
    assert newest is not None and newest.at_ms == 200


async def test_call_stats_cover_the_latest_calls(tool_store: ToolStore) -> None:
    assert await tool_store.call_stats("org_tool", 10) is None
    for n in range(6):
        await tool_store.record_call("org_tool", n, latency_ms=10.0 * (n + 1), ok=n != 5)
    await tool_store.record_call("trip_tool", 0, latency_ms=1.0, ok=False)
    assert await tool_store.call_stats("org_tool", 2) == CallStats(2, 0.5, 55.0)
    assert await tool_store.call_stats("org_tool", 100) == CallStats(6, 5 / 6, 35.0)
    assert await tool_store.call_stats("trip_tool", 10) == CallStats(1, 0.0, 1.0)


async def test_the_latest_probe_per_tool(tool_store: ToolStore) -> None:
    assert await tool_store.get_probe("org_tool") is None
    await tool_store.save_probe("org_tool", Probe(20.0, 1.0, None, 5))
    await tool_store.save_probe("org_tool", Probe(30.0, 0.5, 7, 9, "slow"))
    assert await tool_store.get_probe("org_tool") == Probe(30.0, 0.5, 7, 9, "slow")


async def test_sqlite_prunes_call_samples_in_batches_and_keeps_the_newest(tmp_path: Path) -> None:
    """Samples past the kept number are pruned on write, a batch at a time: the table stays
    bounded and the stats read the newest samples."""
    keep, every = sqlite_tools._KEEP_CALLS, sqlite_tools._PRUNE_EVERY
    async with SqliteToolStore(tmp_path / "tools.sqlite3", book=MarkBook(tmp_path)) as store:
        for n in range(keep + 3 * every):
            await store.record_call("org_tool", n, latency_ms=float(n), ok=True)
        await store.record_call("trip_tool", 0, latency_ms=1.0, ok=True)
        rows = store.db.execute("SELECT COUNT(*), MIN(at_ms) FROM calls WHERE tool='org_tool'")
        count, oldest = rows.fetchone()
        assert keep < count <= keep + every  # pruned, at most a batch over
        assert oldest == keep + 3 * every - count  # the oldest went, none in between
        newest = await store.call_stats("org_tool", 2)
        assert newest == CallStats(2, 1.0, keep + 3 * every - 1.5)
        assert await store.call_stats("trip_tool", 10) == CallStats(1, 1.0, 1.0)


def test_a_spec_read_again_with_the_same_text_is_the_same_object() -> None:
    """What the store reads for every call is parsed once: validators and executors keyed
    by the spec (or its schema) are found again instead of being rebuilt."""
    text = python_spec("org_tool", "echo").model_dump_json()
    first, again = spec_from_json(text), spec_from_json(text[:1] + text[1:])  # an equal string
    assert first is again and first == python_spec("org_tool", "echo")
    changed = spec_from_json(python_spec("org_tool", "other").model_dump_json())
    assert changed is not first and changed.target != first.target


async def test_calls_are_admitted_per_user_until_a_window_is_full(tool_store: ToolStore) -> None:
    """At most 2 calls by a user within [0, 1000): the third is refused by that window's
    name and not kept; another user and another tool count apart; a key admitted before
    is admitted again without counting (a redelivered round)."""
    hour = [Window("over_quota", 0, 1000, 2)]
    assert await tool_store.admit_call("t_tool", "u1", "k1", 10, hour) is None
    assert await tool_store.admit_call("t_tool", "u1", "k2", 20, hour) is None
    assert await tool_store.admit_call("t_tool", "u1", "k1", 30, hour) is None  # again
    assert await tool_store.admit_call("t_tool", "u1", "k3", 40, hour) == "over_quota"
    assert await tool_store.admit_call("t_tool", "u1", "k3", 50, hour) == "over_quota"
    assert await tool_store.admit_call("t_tool", "u2", "k4", 40, hour) is None
    assert await tool_store.admit_call("other_tool", "u1", "k5", 40, hour) is None
    # the next window counts afresh; the first full window named wins
    assert (
        await tool_store.admit_call(
            "t_tool", "u1", "k6", 1000, [Window("over_quota", 1000, 2000, 2)]
        )
        is None
    )
    both = [Window("rate_limited", 990, 1001, 1), Window("over_quota", 1000, 2000, 2)]
    assert await tool_store.admit_call("t_tool", "u1", "k7", 1000, both) == "rate_limited"


async def test_admitted_calls_are_forgotten_by_the_stores_clock_never_an_envelopes(
    tool_store: ToolStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An envelope dated far ahead (an app sets its time) forgets nothing; calls the
    store kept longer than KEEP_ADMITTED_MS ago by its own clock are forgotten."""
    ever = [Window("x", 0, 10**13, 2)]
    assert await tool_store.admit_call("t_tool", "u1", "k1", 5, ever) is None
    assert await tool_store.admit_call("t_tool", "u1", "k2", 5 + 2 * KEEP_ADMITTED_MS, ever) is None
    assert await tool_store.admit_call("t_tool", "u1", "k3", 6, ever) == "x"  # both still count
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now + KEEP_ADMITTED_MS / 1000 + 60)
    assert await tool_store.admit_call("t_tool", "u1", "k4", 7, ever) is None  # both forgotten
    assert await tool_store.admit_call("t_tool", "u1", "k5", 8, ever) is None
    assert await tool_store.admit_call("t_tool", "u1", "k6", 9, ever) == "x"

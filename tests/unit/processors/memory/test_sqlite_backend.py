"""What only the SQLite memory stores promise: the file, WAL, lifecycle and persistence."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from hermesbus.base.storemark import MarkBook
from hermesbus.compose.backends import memory_stores
from hermesbus.compose.settings import Settings
from hermesbus.connectors.sqlite.memory import SqliteGraphStore, SqlitePreferenceStore
from hermesbus.contract.payloads import MemoryTier, MemoryWrite
from hermesbus.errors import StoreError
from hermesbus.processors.memory import MemorySettings, Preference

from .helpers import Session, fact_write, stores_for


async def test_default_file_is_under_hermes_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HERMES_MEMORY_BUDGET_ITEMS", "7")
    settings = Settings.from_environment().memory
    assert settings.db_path == tmp_path / "home" / "memory.sqlite3"
    assert settings.budget_items == 7
    async with memory_stores(Settings.from_environment()) as stores:  # the default picked
        assert isinstance(stores.preferences, SqlitePreferenceStore)
        assert isinstance(stores.graph, SqliteGraphStore)
    assert settings.db_path.exists()
    monkeypatch.setenv("HERMES_MEMORY_PATH", str(tmp_path / "elsewhere.db"))
    assert MemorySettings().db_path == tmp_path / "elsewhere.db"


async def test_both_stores_share_one_wal_file_and_persist(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite3"
    pref = Preference(user_id="u", name="n", value_json="1", updated_at_ms=1, confirmed_by="m")
    async with (
        SqlitePreferenceStore(path, book=MarkBook(tmp_path)) as prefs,
        SqliteGraphStore(path, book=MarkBook(tmp_path)) as graph,
    ):
        await prefs.start()  # twice is harmless
        await prefs.put_preference(pref)
        assert await graph.review_queue() == ()
    await prefs.stop()  # and so is stopping twice
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"preferences", "choices", "items", "nodes", "edges", "reviews"} <= tables
    async with SqlitePreferenceStore(path, book=MarkBook(tmp_path)) as reopened:
        assert await reopened.preference("u", "n") == pref


async def test_a_store_not_started_says_so(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="not started"):
        await SqliteGraphStore(tmp_path / "m.db", book=MarkBook(tmp_path)).review_queue()


async def test_an_unopenable_file_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(StoreError, match="cannot open"):
        await SqlitePreferenceStore(tmp_path / "dir.db", book=MarkBook(tmp_path)).start()


async def test_values_are_bound_not_spliced(tmp_path: Path) -> None:
    """A key full of SQL is stored as text (every statement is parameterised)."""
    evil = "x'); DROP TABLE preferences; --"
    async with SqlitePreferenceStore(tmp_path / "m.db", book=MarkBook(tmp_path)) as prefs:
        pref = Preference(
            user_id=evil, name="n", value_json='"v"', updated_at_ms=1, confirmed_by=evil
        )
        await prefs.put_preference(pref)
        assert await prefs.preference(evil, "n") == pref


async def test_choices_and_the_change_ledger_stay_bounded(tmp_path: Path) -> None:
    """Through the handler's settings: rows on disk never exceed the configured bounds."""
    async with stores_for(tmp_path, choice_history=4, change_ledger=3) as stores:
        session = Session(stores)
        for i in range(10):
            choice = MemoryWrite(tier=MemoryTier.MID_TERM, key="choice:blur", value_json='"accept"')
            await session.write(choice, message_id=f"c{i}")
            await session.write(fact_write("user:u", "related_to", f"x:{i}"), message_id=f"f{i}")
    with sqlite3.connect(tmp_path / "memory.sqlite3") as db:
        assert db.execute("SELECT COUNT(*) FROM choices").fetchone()[0] == 4
        kept = [r[0] for r in db.execute("SELECT change_id FROM graph_changes ORDER BY rowid")]
    assert kept == ["f7", "f8", "f9"]


def test_the_choice_history_must_hold_a_habit() -> None:
    assert (MemorySettings().choice_history, MemorySettings().change_ledger) == (20, 10_000)
    with pytest.raises(ValueError, match="choice_history = 2 < choice_threshold = 3"):
        MemorySettings(choice_history=2)

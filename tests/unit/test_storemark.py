"""The store marks' book and guard (:mod:`hermesbus.base.storemark`), without a backend: what the
Redis, SQLite and Neo4j stores decide with it (their own tests: tests/integration/stores/
test_store_marks.py and the fault suite's test_store_empty.py)."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest

from hermesbus.base.storemark import BOOK_NAME, CHECK_EVERY_S, Mark, MarkBook, MarkGuard
from hermesbus.compose import backends
from hermesbus.connectors.neo4j import Neo4jGraphStore
from hermesbus.connectors.redis.client import RedisService
from hermesbus.connectors.sqlite.client import SqliteFile
from hermesbus.errors import ConfigError, StoreError, StoreLost
from tests.unit.test_layers import MODULES


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def guard(home: Path, clock: Clock | None = None) -> MarkGuard:
    return MarkGuard(
        "redis redis://h:1/0 hermes state",
        "the Redis state store at redis://h:1/0 (prefix hermes)",
        "every session's state",
        book=MarkBook(home),
        clock=clock or Clock(),
    )


def settled(home: Path, clock: Clock | None = None) -> tuple[MarkGuard, Mark]:
    """A guard after the store's first use: its mark made and recorded."""
    marks = guard(home, clock)
    first = marks.settle(None)
    assert first is not None
    marks.made(first)
    return marks, first


def test_first_use_makes_a_mark_and_records_it_in_the_state_folder(tmp_path: Path) -> None:
    marks, first = settled(tmp_path)
    assert MarkBook(tmp_path).expected(marks.store) == first
    assert (tmp_path / BOOK_NAME).exists() and marks.watching


def test_a_store_with_a_mark_the_book_does_not_know_is_taken_as_it_is(tmp_path: Path) -> None:
    theirs = Mark.new()
    marks = guard(tmp_path)
    assert marks.settle(theirs) is None  # nothing to write: the store has its mark
    assert MarkBook(tmp_path).expected(marks.store) == theirs


def test_a_mark_gone_is_lost_logged_once_and_raised_on_every_try(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    marks, first = settled(tmp_path)
    for _ in range(3):
        with pytest.raises(StoreLost, match="is lost .its mark is gone.") as caught:
            marks.verify(None)
        assert isinstance(caught.value, StoreError)  # retried in place, as every outage
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    (line,) = errors
    assert line.startswith("STORE LOST: the Redis state store at redis://h:1/0 (prefix hermes)")
    assert f"came back empty: its mark is gone (expected {first}" in line
    assert "Lost with it: every session's state" in line and "hermesbus stores adopt" in line
    with pytest.raises(StoreLost):
        marks.raise_if_lost()


def test_a_mark_that_differs_is_another_store(tmp_path: Path) -> None:
    marks, _ = settled(tmp_path)
    with pytest.raises(StoreLost, match="its mark is another"):
        marks.verify(Mark.new())


def test_a_restart_against_a_store_back_empty_is_lost_at_start(tmp_path: Path) -> None:
    settled(tmp_path)
    restarted = guard(tmp_path)  # a new process: the expected mark comes from the book
    with pytest.raises(StoreLost):
        restarted.settle(None)
    assert not restarted.watching


def test_an_adoption_recorded_by_another_process_resumes_the_store(tmp_path: Path) -> None:
    clock = Clock()
    marks, _ = settled(tmp_path, clock)
    with pytest.raises(StoreLost):
        marks.verify(None)
    assert not marks.due()  # lost, nothing changed, not yet time to look again
    adopted = Mark.new()
    MarkBook(tmp_path).record(marks.store, adopted)  # what `hermesbus stores adopt` does
    assert marks.due()  # the book changed: look now
    marks.verify(adopted)
    assert marks.lost is None and marks.expected == adopted
    marks.raise_if_lost()


def test_an_adoption_seen_by_a_store_that_had_not_noticed_is_no_loss(tmp_path: Path) -> None:
    """A running store meets the new mark before it noticed the old one gone."""
    marks, _ = settled(tmp_path)
    adopted = Mark.new()
    MarkBook(tmp_path).record(marks.store, adopted)
    marks.verify(adopted)
    assert marks.lost is None and marks.expected == adopted


def test_the_mark_is_read_every_interval_and_after_an_error(tmp_path: Path) -> None:
    clock = Clock()
    marks, first = settled(tmp_path, clock)
    assert not marks.due()
    clock.now += CHECK_EVERY_S
    assert marks.due()
    marks.verify(first)
    assert not marks.due()
    marks.suspect()  # an error or a reconnect
    assert marks.due()


def test_a_mark_not_ours_reads_as_none() -> None:
    mark = Mark.new()
    assert Mark.loads(mark.dumps()) == mark
    assert Mark.loads(None) is None
    assert Mark.loads(b"not json") is None
    assert Mark.loads(b'{"epoch": "x"}') is None


def test_the_book_keeps_every_store_apart(tmp_path: Path) -> None:
    book = MarkBook(tmp_path)
    one, two = Mark.new(), Mark.new()
    book.record("sqlite /a state", one)
    book.record("sqlite /a tools", two)
    assert book.read() == {"sqlite /a state": one, "sqlite /a tools": two}


def test_a_book_that_is_not_json_is_a_store_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / BOOK_NAME).write_text("{")
    with pytest.raises(StoreError, match=f"the store marks {tmp_path / BOOK_NAME} are not JSON"):
        MarkBook(tmp_path).read()


def test_a_guard_given_no_book_refuses_and_never_finds_one_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No book found in the environment's state folder: the store given none is refused."""
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    marks = MarkGuard("sqlite /a state", "the SQLite state store /a", "its state", book=None)
    with pytest.raises(
        ConfigError, match="no book of store marks given: the SQLite state store /a"
    ):
        marks.require_book()
    with pytest.raises(ConfigError, match="no book of store marks given"):
        marks.settle(None)
    assert not marks.watching and not (tmp_path / BOOK_NAME).exists()


def _marked_stores() -> set[str]:
    """Every store class that carries a mark (``backends`` imports every connector)."""
    found = {Neo4jGraphStore.__name__}
    todo: list[type[SqliteFile | RedisService]] = [SqliteFile, RedisService]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith("hermesbus.") and sub.mark_name is not None:
                found.add(sub.__name__)
    return found


def test_every_marked_store_the_product_builds_is_given_its_book() -> None:
    """A store given no book refuses to start: no module of the product builds one without."""
    marked = _marked_stores()
    assert backends.__name__ in MODULES and {"SqliteStateStore", "RedisToolStore"} <= marked
    unbooked = [
        f"{module}:{node.lineno}"
        for module, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name | ast.Attribute)
        and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr) in marked
        and not any(keyword.arg == "book" for keyword in node.keywords)
    ]
    assert unbooked == []

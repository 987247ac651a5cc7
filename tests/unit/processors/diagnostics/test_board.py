"""What ``hermesbus stats`` shows: closed-window parts read back, one per id, merged per key."""

from __future__ import annotations

from hermesbus.cli._stats import sparkline
from hermesbus.processors.diagnostics import (
    TUMBLING_MS,
    Board,
    Figures,
    Tally,
    Window,
    rollup_body,
    rollup_envelope,
)


def _part(
    key: str, start: int, partition: int, latencies: list[float], part: int = 0
) -> tuple[str, object]:
    tally = Tally()
    for ms in latencies:
        tally.add(Figures(latency_ms=ms, confidence=0.5, error=ms > 100))
    envelope = rollup_envelope(Window("tumbling", TUMBLING_MS, start), key, partition, part, tally)
    return envelope.message_id, envelope.payload.body


def test_parts_of_a_window_add_up_and_a_resent_part_counts_once() -> None:
    board = Board()
    first = _part("tool:ocr_tool", 0, 0, [5.0, 7.0])
    assert board.add(*first)  # type: ignore[arg-type]
    assert not board.add(*first)  # type: ignore[arg-type]  # the same id again: a re-send
    board.add(*_part("tool:ocr_tool", 0, 3, [200.0]))  # type: ignore[arg-type]
    board.add(*_part("tool:ocr_tool", 0, 3, [9.0], part=1))  # type: ignore[arg-type]
    (row,) = board.rows(10)
    assert (row.key, row.kind, row.name) == ("tool:ocr_tool", "tool", "ocr_tool")
    assert (row.tally.count, row.tally.errors, row.counts) == (4, 1, (4,))
    assert row.tally.latency.count == 4 and row.tally.mean_confidence == 0.5
    assert row.rate == 4 / (TUMBLING_MS / 1000)
    assert board.parts == 3


def test_rows_cover_the_last_windows_with_records_components_first() -> None:
    board = Board()
    starts = [0, TUMBLING_MS, 10 * TUMBLING_MS]  # a quiet gap, as an app's clock may jump
    for n, start in enumerate(starts):
        board.add(*_part("state:S1", start, 0, [1.0] * (n + 1)))  # type: ignore[arg-type]
    board.add(*_part("component:dispatcher", starts[-1], 1, [2.0]))  # type: ignore[arg-type]
    assert board.starts(2) == starts[1:]
    rows = board.rows(2)
    assert [row.key for row in rows] == ["component:dispatcher", "state:S1"]
    assert rows[1].counts == (2, 3) and rows[0].counts == (0, 1)


def test_a_hopping_window_is_not_shown_twice() -> None:
    body = rollup_body(Window("hopping", 5 * TUMBLING_MS, 0), "component:tool", 0, 0, Tally())
    assert not Board().add("some-id", body)


def test_a_sparkline_has_one_bar_per_window_scaled_to_the_largest() -> None:
    assert sparkline((0, 1, 4, 8)) == " ▁▄█"
    assert sparkline((0, 0)) == "  "
    assert sparkline(()) == ""

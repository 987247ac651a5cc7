"""The committable offset never passes an unfinished one."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermesbus.runtime import OffsetTracker


def test_commits_only_the_contiguous_finished_prefix() -> None:
    tracker = OffsetTracker()
    assert tracker.committable() is None
    for offset in (10, 11, 12, 15):  # gaps (compaction, transaction markers) are fine
        tracker.add(offset)
    assert tracker.committable() == 10
    tracker.finish(11)
    tracker.finish(15)
    assert tracker.committable() == 10  # 11 and 15 are done, but 10 is not
    tracker.finish(10)
    assert tracker.committable() == 12
    tracker.finish(12)
    assert tracker.committable() == 16
    assert tracker.in_flight == 0


def test_offsets_must_arrive_in_order() -> None:
    tracker = OffsetTracker()
    tracker.add(5)
    with pytest.raises(ValueError, match="offset 4 arrived after 5"):
        tracker.add(4)


@given(st.integers(1, 60).flatmap(lambda n: st.permutations(range(n))))
def test_any_finishing_order(order: list[int]) -> None:
    tracker = OffsetTracker()
    for offset in range(len(order)):
        tracker.add(offset)
    finished: set[int] = set()
    for offset in order:
        tracker.finish(offset)
        finished.add(offset)
        position = tracker.committable()
        assert position is not None
        assert all(o in finished for o in range(position))  # nothing unfinished behind it
        assert position == len(order) or position not in finished
    assert tracker.committable() == len(order)

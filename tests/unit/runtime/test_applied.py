"""The applied window and its floor: a re-sent record is not new at any distance."""

from __future__ import annotations

from hermesbus.runtime._applied import MARK, appended, floor_of

WINDOW = 8


def applied_all(count: int, window: int = WINDOW) -> tuple[str, ...]:
    """The state after ``count`` records ``m0``... dated 1000, 1001, ... were applied."""
    applied: tuple[str, ...] = ()
    for n in range(count):
        applied = appended(applied, f"m{n}", 1000 + n, window)
    return applied


def is_new(applied: tuple[str, ...], message_id: str, at_ms: int) -> bool:
    """What the runtime decides: new unless its id is kept or it is dated at the floor or before."""
    return message_id not in applied and at_ms > floor_of(applied)


def test_every_applied_record_is_old_however_many_came_after() -> None:
    for count in (1, 3, 4, 5, 9, 300, 3000):
        state = applied_all(count)
        old = [n for n in range(count) if is_new(state, f"m{n}", 1000 + n)]
        assert old == [], count
        assert is_new(state, "next", 1000 + count)


def test_the_window_stays_below_its_size_and_keeps_the_latest_half() -> None:
    state = applied_all(3000)
    ids = state[1:]
    assert state[0].startswith(MARK)
    assert WINDOW // 2 <= len(ids) < WINDOW
    assert ids[-WINDOW // 2 :] == tuple(f"m{n}" for n in range(3000 - WINDOW // 2, 3000))


def test_a_late_record_dated_after_the_floor_is_new() -> None:
    state = applied_all(300)
    assert floor_of(state) < 1000 + 300 - WINDOW // 2
    assert is_new(state, "late", 1000 + 300 - WINDOW // 2)


def test_no_floor_before_the_first_epoch_ends() -> None:
    assert floor_of(()) < 0
    assert floor_of(applied_all(WINDOW // 2)) < 0
    assert floor_of(applied_all(WINDOW)) == 1000 + WINDOW // 2 - 1


def test_a_state_saved_without_the_mark_keeps_its_ids_then_dates_them() -> None:
    legacy = tuple(f"old{n}" for n in range(WINDOW))
    state = appended(legacy, "m0", 5000, WINDOW)
    assert state[1:] == (*legacy, "m0")
    for n in range(1, WINDOW // 2):
        state = appended(state, f"m{n}", 5000 + n, WINDOW)
    assert not any(f"old{n}" in state for n in range(WINDOW))
    assert floor_of(state) == 5000  # dated by the first record applied after them


def test_a_window_of_one_still_covers_everything() -> None:
    state = applied_all(50, window=1)
    assert not any(is_new(state, f"m{n}", 1000 + n) for n in range(50))
    assert state[1:] == ("m49",)

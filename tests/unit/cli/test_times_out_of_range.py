"""Times before 1970 or after the year 9999 are refused in one clear line, exit 2:
``tail --from -99999d`` was ``unexpected ValueError`` and ``tail --from 99999999999999999999``
read the log."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermesbus.cli._when import LAST_MS, OutOfRange, parse_time, tail_position
from hermesbus.trace.tail import Position
from tests.cli_process import clean_env, hermesbus

NOW = 1_764_669_600_000


@pytest.mark.parametrize(
    "text", ["-99999d", "-30000d", "0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z"]
)
def test_a_time_before_1970_is_out_of_range(text: str) -> None:
    with pytest.raises(OutOfRange, match=r"is before 1970-01-01 \(epoch ms 0\)"):
        parse_time(text, NOW)
    with pytest.raises(OutOfRange, match=r"is before 1970-01-01"):
        tail_position(text, NOW)


@pytest.mark.parametrize(
    "text", ["99999999999999999999", "@253402300800000", "9999999999999999", "@99999999999999999"]
)
def test_a_time_after_the_year_9999_is_out_of_range(text: str) -> None:
    with pytest.raises(OutOfRange, match=r"is after the year 9999 \(epoch ms 253402300799999\)"):
        parse_time(text, NOW)
    with pytest.raises(OutOfRange, match=r"is after the year 9999"):
        tail_position(text, NOW)


def test_the_first_and_last_times_are_taken() -> None:
    assert parse_time("@0", NOW) == 0
    assert parse_time(str(LAST_MS), NOW) == LAST_MS
    assert parse_time("9999-12-31T23:59:59.999Z", NOW) == LAST_MS
    assert tail_position(str(LAST_MS), NOW) == Position("time", LAST_MS)
    assert parse_time("-1d", 86_400_000) == 0


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("tail", "--from", "-99999d"), "--from '-99999d' is before 1970-01-01"),
        (("tail", "--from", "99999999999999999999"),
         "--from '99999999999999999999' is after the year 9999"),
        (("tail", "--to", "@99999999999999999999"), "--to '@99999999999999999999' is after"),
        (("search", "--since", "-99999d"), "--since '-99999d' is before 1970-01-01"),
        (("search", "--until", "99999999999999999999"), "--until '99999999999999999999' is after"),
        (("replay", "--shadow", "--session", "s", "--from", "-99999d"),
         "--from '-99999d' is before 1970-01-01"),
    ],
)  # fmt: skip
def test_out_of_range_times_are_exit_2_before_any_record_is_read(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    ran = hermesbus(*args, env=clean_env(tmp_path / "home"), cwd=tmp_path)
    assert ran.code == 2, ran.output
    assert says in ran.err
    assert ran.out == ""  # no record listed
    assert "Traceback" not in ran.output and "unexpected" not in ran.output

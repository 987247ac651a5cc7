"""``hermesbus tail``'s positions and filters, without a broker."""

from __future__ import annotations

import pytest

from hermesbus.trace.tail import Filters, Position, Tailed, position
from tests.builders import turn

NOW = 1_764_669_600_000


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("beginning", Position("beginning")),
        ("END", Position("end")),
        ("42", Position("offset", 42)),
        ("@1764669000000", Position("time", 1_764_669_000_000)),
        ("-15m", Position("time", NOW - 15 * 60_000)),
        ("-2h", Position("time", NOW - 2 * 3_600_000)),
        ("-1d", Position("time", NOW - 86_400_000)),
        ("-30s", Position("time", NOW - 30_000)),
        ("-250ms", Position("time", NOW - 250)),
    ],
)
def test_positions_are_read(text: str, expected: Position) -> None:
    assert position(text, NOW) == expected


@pytest.mark.parametrize("text", ["", "latest", "-5", "@soon", "15m", "-1w", "4.5"])
def test_a_bad_position_says_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match="is not a position: use beginning, end, an offset"):
        position(text, NOW)


def _tailed(source: str = "app:web", *, session: str = "s1", trace: str = "t1") -> Tailed:
    envelope = turn(source=source, session_id=session, trace_id=trace)
    return Tailed("hermes.conversation.in", 0, 7, NOW, session.encode(), (), envelope, None)


def test_filters_match_session_trace_and_component() -> None:
    dispatched = _tailed("mcp:dispatcher")
    assert Filters(component="dispatcher").keeps(dispatched)
    assert Filters(component="mcp").keeps(dispatched)
    assert Filters(component="mcp:dispatcher").keeps(dispatched)
    assert not Filters(component="tool").keeps(dispatched)
    assert Filters(session="s1", trace="t1").keeps(_tailed())
    assert not Filters(session="s2").keeps(_tailed())
    assert not Filters(trace="t2").keeps(_tailed())


def test_an_undecodable_record_is_kept_by_its_key_and_trace_header() -> None:
    broken = Tailed("hermes.tool", 1, 3, NOW, b"s1", (("trace_id", b"t9"),), None, "bad bytes")
    assert Filters().keeps(broken)
    assert Filters(session="s1", trace="t9").keeps(broken)
    assert not Filters(session="s2").keeps(broken)
    assert not Filters(trace="t1").keeps(broken)
    assert not Filters(component="tool").keeps(broken)  # no source to match
    shown = broken.as_json()
    assert shown["envelope"] is None
    assert shown["error"] == "bad bytes"
    assert shown["headers"] == [{"key": "trace_id", "value": "t9"}]
    assert shown["key"] == "s1"


def test_a_header_that_is_not_text_is_shown_as_base64() -> None:
    odd = Tailed("hermes.tool", 0, 0, NOW, None, (("sig", b"\xff\x00"),), None, "x")
    assert odd.as_json()["headers"] == [{"key": "sig", "base64": "/wA="}]
    assert odd.as_json()["key"] is None

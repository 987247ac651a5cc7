"""``hermesbus stats``'s table and JSON: the alerts open now above the ones said in the span."""

from __future__ import annotations

from rich.console import Console

from hermesbus.cli._stats import _json, _view
from hermesbus.compose.stats import Alert, Stats
from hermesbus.processors.diagnostics import Said

MINUTE = 60_000
T0 = 1_900_000_020_000 - 1_900_000_020_000 % MINUTE


def _stats(*said: Said) -> Stats:
    stats = Stats()
    for one in said:
        stats.open_alerts.take(one)
    return stats


def _shown(stats: Stats) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(_view(stats, {}, 10))
    return console.export_text()


def test_the_open_alerts_are_listed_longest_open_first_and_cleared_ones_are_not() -> None:
    stats = _stats(
        Said(
            "calls_jump",
            "component:dispatcher",
            "raised",
            T0 + 9 * MINUTE,
            T0 + 8 * MINUTE,
            False,
            1,
        ),
        Said("low_confidence", "tool:ocr_tool", "raised", T0 + 4 * MINUTE, T0 + MINUTE, True, 3),
        Said("errors_high", "tool:org_tool", "raised", T0 + 2 * MINUTE, T0, True, 1),
        Said("errors_high", "tool:org_tool", "cleared", T0 + 3 * MINUTE, T0, True, 1),
    )
    stats.alerts.append(Alert(T0 + 9 * MINUTE, "dispatcher", "ALERT_RAISED", "calls jumped"))
    shown = _shown(stats)
    assert "open alerts (2)" in shown
    ocr = "low_confidence  tool:ocr_tool  since 2030-03-17 17:48:00 UTC, its fallback answers"
    dispatcher = "calls_jump  component:dispatcher  since 2030-03-17 17:55:00 UTC\n"
    assert ocr in shown and dispatcher in shown
    assert shown.index(ocr) < shown.index(dispatcher) < shown.index("alerts raised and cleared")
    assert "org_tool" not in shown
    assert "alerts raised and cleared (1 in this span)" in shown

    listed = _json(stats, {}, 10)["open_alerts"]
    assert listed == [
        {
            "rule": "low_confidence",
            "key": "tool:ocr_tool",
            "since_ms": T0 + MINUTE,
            "window_end_ms": T0 + 4 * MINUTE,
            "windows": 3,
            "health": True,
            "fallback": True,
        },
        {
            "rule": "calls_jump",
            "key": "component:dispatcher",
            "since_ms": T0 + 8 * MINUTE,
            "window_end_ms": T0 + 9 * MINUTE,
            "windows": 1,
            "health": False,
            "fallback": False,
        },
    ]


def test_with_none_open_it_says_so() -> None:
    shown = _shown(Stats())
    assert "open alerts (none)" in shown
    assert _json(Stats(), {}, 10)["open_alerts"] == []


def test_a_tool_under_an_alert_of_a_rule_no_longer_judged_is_not_said_to_use_its_fallback() -> None:
    stats = _stats(Said("low_confidence", "tool:ocr_tool", "raised", T0 + MINUTE, T0, True, 3))
    console = Console(width=200, record=True, color_system=None)
    console.print(_view(stats, {}, 10, frozenset({"error_rate"})))
    shown = console.export_text()
    assert "low_confidence  tool:ocr_tool  since" in shown
    assert "its fallback answers" not in shown
    (listed,) = _json(stats, {}, 10, frozenset({"error_rate"}))["open_alerts"]
    assert listed["fallback"] is False

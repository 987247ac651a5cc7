"""The alert rules over scripted streams of closed windows: each raises once per episode
and clears when it ends; windows with no evidence neither extend nor end one."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from pydantic import ValidationError

from hermesbus.contract.envelope import Envelope
from hermesbus.contract.fields import from_epoch_ms
from hermesbus.contract.payloads import ErrorReport, Payload, ToolCall, ToolResult
from hermesbus.processors.diagnostics import (
    AlertBook,
    AlertedHealth,
    Change,
    DiagnosticsSettings,
    Figures,
    OpenAlerts,
    Rule,
    Tally,
    Window,
    alert_envelope,
    change_of,
    contributions,
    rollup_body,
)
from hermesbus.processors.protocol import ToolHealth, result_confidence
from hermesbus.processors.tool._handler import _answer as tool_answer
from hermesbus.processors.tool._service import CallReport

MINUTE = 60_000
RULES = {rule.name: rule for rule in DiagnosticsSettings().rules()}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _tally(count: int = 0, **figures: object) -> Tally:
    """``count`` records, each contributing ``figures``."""
    tally = Tally()
    for _ in range(count):
        tally.add(Figures(**figures))  # type: ignore[arg-type]
    return tally


def _feed(
    rules: Sequence[Rule],
    windows: Sequence[dict[str, Tally]],
    *,
    lags: Sequence[dict[str, int] | None] = (),
    book: AlertBook | None = None,
    clock: Clock | None = None,
) -> list[Change]:
    """Each window in turn (its keys' tallies as one part each), judged once it settled."""
    clock = clock or Clock()
    book = book or AlertBook(rules, settle_ms=5_000, clock=clock)
    changes: list[Change] = []
    for i, keys in enumerate(windows):
        start = i * MINUTE
        for key, tally in keys.items():
            body = rollup_body(Window("tumbling", MINUTE, start), key, 0, 0, tally)
            book.add(f"{key}@{start}", body)
        clock.now += 6
        changes += book.judge(lags[i] if i < len(lags) else None)
    return changes


def _said(changes: Sequence[Change]) -> list[tuple[str, str, str, int]]:
    return [(c.rule.name, c.key, c.state, c.start_ms // MINUTE) for c in changes]


def test_confidence_below_for_three_windows_raises_once_and_clears_when_it_recovers() -> None:
    low, high = _tally(4, confidence=0.7), _tally(4, confidence=0.95)
    windows = [{"tool:ocr_tool": t} for t in (high, low, low, low, low, low, high, high)]
    changes = _feed([RULES["low_confidence"]], windows)
    assert _said(changes) == [
        ("low_confidence", "tool:ocr_tool", "raised", 3),
        ("low_confidence", "tool:ocr_tool", "cleared", 6),
    ]
    raised, cleared = changes
    assert raised.since_ms == 1 * MINUTE and raised.windows == 3
    assert raised.value == pytest.approx(0.7) and raised.limit == 0.8
    assert cleared.since_ms == 1 * MINUTE and cleared.windows == 5
    assert cleared.value == pytest.approx(0.95)


def test_two_low_windows_are_no_episode_and_a_gap_without_answers_breaks_nothing() -> None:
    low, high, none = _tally(2, confidence=0.7), _tally(2, confidence=0.9), _tally(3)
    fallbacks = _tally(3, fallback=True)  # answered by its fallback: no confidence
    rule = RULES["low_confidence"]
    assert _feed([rule], [{"tool:t": t} for t in (low, low, high, low, low)]) == []
    # low, (nothing said), low, (only fallbacks), low: three measured windows in a row
    windows = [{"tool:t": t} for t in (low, none, low, fallbacks, low, high)]
    assert _said(_feed([rule], windows)) == [
        ("low_confidence", "tool:t", "raised", 4),
        ("low_confidence", "tool:t", "cleared", 5),
    ]


def test_error_rate_needs_enough_answers_to_raise_and_one_to_end_the_episode() -> None:
    rule = RULES["error_rate"]  # above 0.2 in one window of at least 5 answers
    few = _tally(3, error=True)
    failing = _tally(4, error=True)
    failing.merge(_tally(4))
    one_trial = _tally(1)  # under the alert, one call in a few reaches the tool
    windows = [{"tool:t": t, "component:tool": t} for t in (few, failing, failing, one_trial)]
    assert _said(_feed([rule], windows)) == [
        ("error_rate", "component:tool", "raised", 1),
        ("error_rate", "tool:t", "raised", 1),
        ("error_rate", "component:tool", "cleared", 3),
        ("error_rate", "tool:t", "cleared", 3),
    ]


def test_a_tool_that_fails_and_its_fallback_answers_for_it_is_the_tools_failure() -> None:
    """Answers as the tool processor emits them, through the rollup's contributions: a
    failure its fallback answered for is an error and confidence 0 of the tool; a call the
    dispatcher sent to the fallback (the tool being unhealthy) is not the tool's at all."""
    failed = _answer(fallback="mock", asked=False)
    asked = _answer(fallback="mock", asked=True)
    own = _answer(fallback=None, asked=False)

    def keys(envelope: Envelope) -> dict[str, Figures]:
        return dict(contributions(envelope, [], dead_letter=False))

    assert keys(failed)["tool:t"].error and keys(failed)["tool:t"].confidence == 0.0
    assert (
        set(keys(asked)) == {"component:tool"} and keys(asked)["component:tool"].confidence is None
    )
    assert keys(own)["tool:t"].confidence == 1.0 and not keys(own)["tool:t"].error
    tallies: dict[str, Tally] = {}
    for envelope in [failed] * 5 + [asked] * 20:  # a tool failing every call it gets
        for key, figures in contributions(envelope, [], dead_letter=False):
            tallies.setdefault(key, Tally()).add(figures)
    changes = _feed(
        [RULES["error_rate"], RULES["low_confidence"]], [{"tool:t": tallies["tool:t"]}] * 3
    )
    assert ("error_rate", "tool:t", "raised", 0) in _said(changes)
    assert ("low_confidence", "tool:t", "raised", 2) in _said(changes)


def _answer(*, fallback: str | None, asked: bool) -> Envelope:
    """The tool processor's answer to a call (``asked``: the dispatcher's call said to use
    the fallback), with the confidence the tool processor gives it."""
    call = Envelope(
        message_id="call-1",
        timestamp=from_epoch_ms(0),
        source="mcp:dispatcher",
        target="tool:t",
        session_id="s1",
        user_id="u1",
        trace_id="t1",
        payload=Payload(
            body=ToolCall(tool="t", arguments_json="{}", idempotency_key="k1"),
            context={"fallback": asked},
        ),
    )
    result = ToolResult(tool="t", status_code=200, verified=True, fallback=fallback)
    report = CallReport(result=result, elapsed_ms=5.0)
    return tool_answer(call, report, "mcp:dispatcher", result, 0)


def test_a_jump_in_external_calls_over_the_trailing_median_is_a_call_spike() -> None:
    rule = Rule("call_spike", "external_calls", "above_median", 3.0, trailing=5)
    calls = [10, 12, 9, 11, 40, 45, 12, 100]
    windows = [{"tool:t": _tally(1, external_calls=n)} for n in calls]
    changes = _feed([rule], windows)
    # 40 > 3 x median(10, 12, 9, 11) = 31.5; the episode's windows do not move the norm:
    # 45 stays over it, 12 ends it, and 100 (> 3 x 11) is a new one
    assert _said(changes) == [
        ("call_spike", "tool:t", "raised", 4),
        ("call_spike", "tool:t", "cleared", 6),
        ("call_spike", "tool:t", "raised", 7),
    ]
    assert changes[0].baseline == 10.5 and changes[0].limit == 31.5
    assert _feed([rule], windows[:2] + windows[4:5]) == []  # too little history to judge


def test_dead_letters_raise_on_their_component_and_clear_on_a_window_without() -> None:
    rule = RULES["dead_letters"]
    dead, clean = _tally(2, dead_letter=True), _tally(5)
    windows = [{"component:dispatcher": t, "tool:t": t} for t in (clean, dead, dead, clean)]
    assert _said(_feed([rule], windows)) == [
        ("dead_letters", "component:dispatcher", "raised", 1),
        ("dead_letters", "component:dispatcher", "cleared", 3),
    ]


def test_consumer_lag_growing_for_three_windows_raises_and_clears_when_it_stops() -> None:
    rule = RULES["lag_growing"]
    lags = [{"component:memory": n} for n in (0, 5, 9, 30, 30, 2)]
    windows = [{"component:memory": _tally(1)} for _ in lags]
    assert _said(_feed([rule], windows, lags=lags)) == [
        ("lag_growing", "component:memory", "raised", 3),
        ("lag_growing", "component:memory", "cleared", 4),
    ]
    # a window the lag was not read in (replayed history) is no evidence either way
    unread: list[dict[str, int] | None] = [{"component:memory": 1}, None, {"component:memory": 2}]
    assert _feed([rule], windows[:3], lags=unread) == []


def test_a_window_is_judged_once_settled_with_all_its_parts_and_a_resent_part_once() -> None:
    clock = Clock()
    book = AlertBook([RULES["low_confidence"]], settle_ms=5_000, clock=clock)
    for start in (0, MINUTE, 2 * MINUTE):
        for partition, confidence in ((0, 0.6), (1, 0.7)):
            tally = _tally(2, confidence=confidence)
            body = rollup_body(Window("tumbling", MINUTE, start), "tool:t", partition, 0, tally)
            assert book.add(f"{start}/{partition}", body)
            assert not book.add(f"{start}/{partition}", body)  # re-sent: the same part
    assert book.judge() == []  # nothing settled yet
    clock.now += 5
    (raised,) = book.judge()
    assert raised.value == pytest.approx(0.65) and raised.start_ms == 2 * MINUTE
    late = rollup_body(Window("tumbling", MINUTE, MINUTE), "tool:t", 2, 0, _tally(1))
    assert not book.add("late", late) and book.late == 1  # its window was judged


def test_what_the_log_said_is_not_said_again_and_an_open_episode_goes_on() -> None:
    rule = RULES["low_confidence"]
    low, high = _tally(2, confidence=0.5), _tally(2, confidence=0.9)
    windows = [{"tool:t": t} for t in (low, low, low, low, high, low)]
    first = _feed([rule], windows[:4])
    assert _said(first) == [("low_confidence", "tool:t", "raised", 2)]
    # a restart reads the raise on the log, then judges the same windows again, and more
    clock = Clock()
    on_log = change_of(alert_envelope(first[0]))
    assert on_log is not None
    book = AlertBook([rule], settle_ms=5_000, clock=clock, seen=[on_log])
    again = _feed([rule], windows, book=book, clock=clock)
    assert _said(again) == [("low_confidence", "tool:t", "cleared", 4)]
    assert again[0].since_ms == 0 and again[0].windows == 4
    # the windows before the restart read only from the lookback: the log's word stands
    book = AlertBook([rule], settle_ms=5_000, clock=(clock := Clock()), seen=[on_log])
    later = _feed([rule], windows[2:], book=book, clock=clock)
    assert _said(later) == []  # windows 0 and 1 end before the raise: relearned, not said
    book = AlertBook([rule], settle_ms=5_000, clock=(clock := Clock()), seen=[on_log])
    assert _said(_feed([rule], [windows[4]] * 4, book=book, clock=clock)) == [
        ("low_confidence", "tool:t", "cleared", 3)  # the first window past the raise's
    ]


def test_a_restart_during_a_call_spike_keeps_the_norm_and_the_episode() -> None:
    rule = Rule("call_spike", "external_calls", "above_median", 3.0, trailing=5)
    calls = [10, 12, 9, 11, 40, 45, 50, 12, 11, 100]
    windows = [{"tool:t": _tally(1, external_calls=n)} for n in calls]
    live = _feed([rule], windows)
    assert _said(live) == [
        ("call_spike", "tool:t", "raised", 4),
        ("call_spike", "tool:t", "cleared", 7),
        ("call_spike", "tool:t", "raised", 9),
    ]
    # restarted after the raise was said: the same windows judged again say only the rest
    said = change_of(alert_envelope(live[0]))
    assert said is not None
    book = AlertBook([rule], settle_ms=5_000, clock=(clock := Clock()), seen=[said])
    assert _said(_feed([rule], windows, book=book, clock=clock)) == _said(live)[1:]


def test_a_raise_re_sent_late_does_not_reopen_what_was_cleared() -> None:
    low = _tally(3, confidence=0.5)
    raised, cleared = _feed(
        [RULES["low_confidence"]], [{"tool:t": low}] * 3 + [{"tool:t": _tally(1, confidence=1.0)}]
    )
    alerts = OpenAlerts()
    for change in (raised, cleared, raised):  # a second judge's raise, sent after the clear
        said = change_of(alert_envelope(change))
        assert said is not None
        alerts.take(said)
    assert alerts.open() == []


def test_an_alert_envelope_says_the_rule_window_and_figures_and_reads_back() -> None:
    low = _tally(3, confidence=0.7)
    (raised,) = _feed([RULES["low_confidence"]], [{"tool:ocr_tool": low}] * 3)
    envelope = alert_envelope(raised, namespace="p.")
    body = envelope.payload.body
    assert isinstance(body, ErrorReport)
    assert body.component == "tool:ocr_tool" and body.code == "alert.low_confidence"
    assert body.message == "tool:ocr_tool: mean confidence 0.70, below 0.80, for 3 windows"
    context = envelope.payload.context
    assert context["alert"] == "raised" and context["window_start_ms"] == 2 * MINUTE
    assert context["value"] == pytest.approx(0.7) and context["health"] is True
    assert envelope.source == "diagnostics:alerts" and envelope.session_id == "tool:ocr_tool"
    assert alert_envelope(raised, namespace="p.").message_id == envelope.message_id
    assert alert_envelope(raised, namespace="q.").message_id != envelope.message_id
    said = change_of(envelope)
    assert said is not None and (said.rule, said.key, said.state) == (
        "low_confidence", "tool:ocr_tool", "raised"
    )  # fmt: skip


class _Registry:
    async def health(self, tool: str) -> ToolHealth | None:
        return ToolHealth(tool, latency_ms=50.0, success_rate=1.0) if tool != "gone" else None


async def test_a_tool_under_a_health_alert_is_unhealthy_but_for_its_trial_calls() -> None:
    low = _tally(3, confidence=0.7)
    raised, cleared = _feed(
        [RULES["low_confidence"]],
        [{"tool:ocr_tool": low}] * 3 + [{"tool:ocr_tool": _tally(1, confidence=0.9)}],
    )
    spike = Rule("call_spike", "external_calls", "above_median", 3.0, trailing=3)
    alerts = OpenAlerts()
    health = AlertedHealth(_Registry(), alerts, trial_every=3, rules=["low_confidence"])
    assert (await health.health("ocr_tool")).healthy  # type: ignore[union-attr]
    said = change_of(alert_envelope(raised))
    assert said is not None
    alerts.take(said)
    other = Change(spike, "tool:ocr_tool", "raised", 0, MINUTE, 0, 1, 99.0, 3.0)
    alerts.take(change_of(alert_envelope(other)))  # type: ignore[arg-type]  # not a health rule
    seen = [await health.health("ocr_tool") for _ in range(6)]
    assert [h.alert if h else None for h in seen] == [
        "low_confidence",
        "low_confidence",
        "",
        "low_confidence",
        "low_confidence",
        "",
    ]
    assert not seen[0].healthy and seen[2].healthy  # type: ignore[union-attr]
    assert await health.health("gone") is None
    alerts.take(change_of(alert_envelope(cleared)))  # type: ignore[arg-type]
    assert (await health.health("ocr_tool")).healthy  # type: ignore[union-attr]
    alerts.take(said)  # the same raise again: not after the clear, so it changes nothing
    assert (await health.health("ocr_tool")).healthy  # type: ignore[union-attr]
    again = change_of(alert_envelope(raised))
    assert again is not None
    switched_off = AlertedHealth(_Registry(), OpenAlerts(), trial_every=0, rules=["error_rate"])
    switched_off._alerts.take(again)
    assert (await switched_off.health("ocr_tool")).healthy  # type: ignore[union-attr]


def test_rules_come_from_settings_and_unknown_ones_are_named() -> None:
    settings = DiagnosticsSettings(confidence_below=0.9, alerts_off="call_spike,lag_growing")
    rules = {rule.name: rule for rule in settings.rules()}
    assert sorted(rules) == ["dead_letters", "error_rate", "low_confidence"]
    assert rules["low_confidence"].threshold == 0.9 and rules["low_confidence"].windows == 3
    assert DiagnosticsSettings(alerts=False).rules() == ()
    with pytest.raises(ValidationError, match="no alert rule spike") as refused:
        DiagnosticsSettings(alerts_off="spike")
    assert [error["loc"] for error in refused.value.errors()] == [("alerts_off",)]  # named
    with pytest.raises(ValueError, match="no figure 'latency'"):
        Rule("slow", "latency", "above", 1.0)


def test_a_results_confidence_is_what_the_rollup_averages_per_tool() -> None:
    ok = ToolResult(tool="t", status_code=200, verified=True)
    assert result_confidence(ok) == 1.0
    assert result_confidence(ok.model_copy(update={"verified": False})) == 0.6
    assert result_confidence(ok.model_copy(update={"stale": True})) == 0.5
    assert result_confidence(ok.model_copy(update={"status_code": 503})) == 0.0

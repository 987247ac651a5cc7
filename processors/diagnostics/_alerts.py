"""Alerts over the rollup's closed windows: rules as data, judged window after window.

A :class:`Rule` names a figure of a key's tumbling window (:data:`FIGURES`), a test
(:data:`TESTS`) and a threshold, how many windows in a row must fail it before an alert
is raised, and which keys it watches (their prefixes: ``tool:``, ``component:``). The
rules are built from settings (:func:`rules_of`), never written into code that judges.

The :class:`AlertBook` takes the windows' parts as the rollup emitted them (one per id:
a re-send is the same record), adds up each key's tumbling window, and judges windows in
order once they have *settled* (no part of them read for ``settle_ms``): each rule on
each key it watches. An *episode* starts when the test failed ``windows`` measured
windows in a row: one :class:`Change` ``raised``; it ends at the first measured window
that passes: one ``cleared``. A window with too little evidence for a rule (no answer of
the tool's own, say) is not measured: it neither extends nor ends an episode.

A tool's key holds the calls that reached the tool: one the dispatcher sent to the
fallback (the tool being unhealthy) counts under the component only, so while a health
alert sends a tool's calls to its fallback, the calls let through to the tool
(:class:`AlertedHealth`'s trials) are what measure it; one that failed and that its
fallback answered for is the tool's failure (an error, confidence 0). While an episode
is open, one answer is evidence enough to end it (a trial every few calls could never
gather ``min_evidence`` in a window at a modest rate).

After a restart the judge is told what the log said (``seen``: each rule and key's last
alert): windows up to that alert's are judged again with nothing said of them, then the
log's word is taken (open since then, or closed) and judging goes on.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final, Literal

from hermesbus.contract.envelope import Envelope
from hermesbus.contract.fields import epoch_ms, from_epoch_ms
from hermesbus.contract.payloads import ErrorReport, Payload, WindowRollup
from hermesbus.processors.diagnostics._board import tally_of
from hermesbus.processors.diagnostics._rollup import Tally
from hermesbus.processors.protocol import HealthView, ToolHealth
from hermesbus.runtime import derive_id

__all__ = [
    "ALERT",
    "FIGURES",
    "SOURCE",
    "TESTS",
    "AlertBook",
    "AlertedHealth",
    "Change",
    "Measure",
    "OpenAlerts",
    "Rule",
    "Said",
    "alert_envelope",
    "change_of",
]

FIGURES: Final = ("confidence", "error_rate", "external_calls", "dead_letters", "lag")
"""What a rule can judge of a key's window:

- ``confidence``: the mean confidence of the key's answers (evidence: how many said one);
- ``error_rate``: errors over the key's records (a tool's: the calls that reached it, one
  that failed and that its fallback answered for counting as an error);
- ``external_calls``: how many external calls the key made;
- ``dead_letters``: how many of its records were dead-lettered;
- ``lag``: its consumer group's lag, as read when the window was judged (live only)."""
TESTS: Final = ("below", "above", "above_median", "rising")
"""``below``/``above`` the threshold; ``above_median``: above threshold times the median of
the key's ``trailing`` last measured windows outside an episode (a jump: a call loop);
``rising``: above the previous measured window's (and above zero)."""
SOURCE: Final = "diagnostics:alerts"
TARGET: Final = "alerts:diagnostics"
ALERT: Final = "alert"
"""Context key of an alert envelope: ``raised`` or ``cleared``."""
_RAISED: Final = "raised"
_CLEARED: Final = "cleared"


@dataclass(frozen=True, slots=True)
class Rule:
    """One alert rule, as data."""

    name: str
    figure: str
    test: str
    threshold: float
    windows: int = 1
    """Measured windows in a row the test must fail before the alert is raised."""
    keys: tuple[str, ...] = ("tool:",)
    """The key prefixes it watches."""
    min_evidence: int = 1
    """A window with less evidence than this is not measured (see :data:`FIGURES`)."""
    trailing: int = 0
    """``above_median``: how many windows the median is over (at least 3 must be known)."""
    health: bool = False
    """While open on a tool, the dispatcher's health reads say the tool is unhealthy."""
    says: str = ""
    """What the alert is about, for people (``mean confidence``)."""

    def __post_init__(self) -> None:
        if self.figure not in FIGURES:
            raise ValueError(f"rule {self.name}: no figure {self.figure!r} (one of {FIGURES})")
        if self.test not in TESTS:
            raise ValueError(f"rule {self.name}: no test {self.test!r} (one of {TESTS})")
        if self.windows < 1 or self.min_evidence < 1:
            raise ValueError(f"rule {self.name}: windows and min_evidence must be 1 or more")
        if self.test == "above_median" and self.trailing < 3:  # noqa: PLR2004 - a median
            raise ValueError(f"rule {self.name}: a median needs trailing of 3 or more")

    def watches(self, key: str) -> bool:
        return key.startswith(self.keys)


@dataclass(frozen=True, slots=True)
class Measure:
    """One key's figures over one tumbling window (its parts added up)."""

    key: str
    start_ms: int
    end_ms: int
    tally: Tally
    lag: int | None = None

    def figure(self, name: str) -> tuple[float | None, int]:
        """The figure ``name`` and its evidence (None: nothing to judge by)."""
        tally = self.tally
        if name == "confidence":
            return tally.mean_confidence, tally.confidence_n
        if name == "error_rate":
            return (tally.errors / tally.count if tally.count else None), tally.count
        if name == "external_calls":
            return float(tally.external_calls), tally.count
        if name == "dead_letters":
            return float(tally.dead_letters), tally.count
        return (None, 0) if self.lag is None else (float(self.lag), 1)


@dataclass(frozen=True, slots=True)
class Change:
    """An alert raised or cleared by one window."""

    rule: Rule
    key: str
    state: Literal["raised", "cleared"]
    start_ms: int
    end_ms: int
    """The window that raised or cleared it."""
    since_ms: int
    """The start of the episode's first window."""
    windows: int
    """Measured windows the episode had (failing ones, for a raise)."""
    value: float
    baseline: float | None = None
    """``above_median``: the median it was over; ``rising``: the window before's value."""

    @property
    def sentence(self) -> str:
        """What the alert says, in one line (its ``ErrorReport`` message)."""
        return _sentence(self)

    @property
    def limit(self) -> float:
        """The value the test compared with."""
        rule = self.rule
        if rule.test == "above_median" and self.baseline is not None:
            return rule.threshold * self.baseline
        return rule.threshold


@dataclass(slots=True)
class _Track:
    """One rule on one key: the failing windows in a row, the open episode, the history."""

    streak: int = 0
    streak_since: int = 0
    open_since: int | None = None
    episode: int = 0
    history: deque[float] = field(default_factory=deque)
    last: float | None = None


def _failing(rule: Rule, value: float, track: _Track) -> tuple[bool, float | None]:
    if rule.test == "below":
        return value < rule.threshold, None
    if rule.test == "above":
        return value > rule.threshold, None
    if rule.test == "rising":
        before = track.last
        return before is not None and value > before and value > 0, before
    known = list(track.history)
    if len(known) < 3:  # noqa: PLR2004 - too little to call anything a jump
        return False, None
    median = statistics.median(known)
    return median > 0 and value > rule.threshold * median, median


def _as_said(track: _Track, said: Said) -> None:
    """Take the log's last word on a rule and key: its episode open since then (and for
    as many windows), or none."""
    if said.state == _RAISED:
        track.open_since, track.episode = said.since_ms, max(said.windows, 1)
    else:
        track.open_since, track.episode, track.streak = None, 0, 0


def _learn(rule: Rule, value: float, track: _Track) -> None:
    """What a window that raised nothing teaches: the value before the next (``rising``),
    the norm of the key (``above_median``: only windows outside an episode)."""
    track.last = value
    if rule.test == "above_median" and track.open_since is None and track.streak == 0:
        track.history.append(value)
        while len(track.history) > rule.trailing:
            track.history.popleft()


class AlertBook:
    """The windows read so far and what each rule made of them (see the module's text)."""

    def __init__(
        self,
        rules: Sequence[Rule],
        *,
        settle_ms: int,
        clock: Callable[[], float],
        seen: Iterable[Said] = (),
    ) -> None:
        """``clock``: seconds, monotonic (when parts were read); ``seen``: the alerts
        already on the log, in order: the windows up to each rule and key's last are
        judged again with nothing said of them, then its word is taken."""
        self.rules = tuple(rules)
        self.settle_ms = settle_ms
        self._clock = clock
        self._ids: dict[int, set[str]] = {}  # each window's parts taken, until it is judged
        self._cells: dict[int, dict[str, Tally]] = {}
        self._ends: dict[int, int] = {}
        self._touched: dict[int, float] = {}
        self._judged_ms = -1  # the last window judged (its start)
        self._tracks: dict[tuple[str, str], _Track] = {}
        self._said: dict[tuple[str, str], Said] = {}
        for said in seen:
            last = self._said.get((said.rule, said.key))
            if last is None or said.end_ms > last.end_ms:  # a late re-send says nothing new
                self._said[(said.rule, said.key)] = said
        self.late = 0
        """Parts read after their window was judged (not judged again)."""

    def add(self, message_id: str, body: WindowRollup) -> bool:
        """Take one part of a closed tumbling window; False for a hopping window's, one
        already taken, or one of a window already judged."""
        start = epoch_ms(body.start)
        if body.window != "tumbling" or message_id in self._ids.get(start, ()):
            return False
        if start <= self._judged_ms:
            self.late += 1
            return False
        tally = tally_of(body)  # ValueError: a histogram of other buckets
        self._ids.setdefault(start, set()).add(message_id)
        cell = self._cells.setdefault(start, {}).setdefault(body.key, Tally())
        cell.merge(tally)
        self._ends[start] = epoch_ms(body.end)
        self._touched[start] = self._clock()
        return True

    def due(self) -> list[int]:
        """The starts of the windows to judge now, oldest first: each settled, and every
        window before it too."""
        now, settle = self._clock(), self.settle_ms / 1000
        ready = []
        for start in sorted(self._cells):
            if now - self._touched[start] < settle:
                break
            ready.append(start)
        return ready

    def judge(self, lags: Mapping[str, int] | None = None) -> list[Change]:
        """Judge every window that is due, oldest first; ``lags`` (each key's consumer lag
        now) counts in the last of them. Returns what is to be said."""
        changes: list[Change] = []
        starts = self.due()
        for start in starts:
            cells = self._cells.pop(start)
            end = self._ends.pop(start)
            self._touched.pop(start)
            self._ids.pop(start)
            self._judged_ms = start
            measures = {key: Measure(key, start, end, tally) for key, tally in cells.items()}
            if lags is not None and start == starts[-1]:
                for key, lag in lags.items():
                    found = measures.get(key) or Measure(key, start, end, Tally())
                    measures[key] = replace(found, lag=lag)
            for key in sorted(measures):
                changes.extend(self._judge(measures[key]))
        return changes

    def _judge(self, measure: Measure) -> list[Change]:
        changes = []
        for rule in self.rules:
            if not rule.watches(measure.key):
                continue
            value, evidence = measure.figure(rule.figure)
            track = self._tracks.setdefault((rule.name, measure.key), _Track())
            need = 1 if track.open_since is not None else rule.min_evidence
            if value is None or evidence < need:
                continue  # not measured: no change
            said = self._said.get((rule.name, measure.key))
            if said is not None and measure.end_ms <= said.end_ms:
                self._step(rule, measure, value, track)  # the log said what came of it
                continue
            if said is not None:
                _as_said(track, self._said.pop((rule.name, measure.key)))
            change = self._step(rule, measure, value, track)
            if change is not None:
                changes.append(change)
        return changes

    def _step(self, rule: Rule, measure: Measure, value: float, track: _Track) -> Change | None:
        failing, baseline = _failing(rule, value, track)
        track.last = value
        if failing:
            if track.streak == 0:
                track.streak_since = measure.start_ms
            track.streak += 1
            if track.open_since is not None:
                track.episode += 1
                return None
            if track.streak < rule.windows:
                return None
            track.open_since, track.episode = track.streak_since, track.streak
            return Change(
                rule, measure.key, _RAISED, measure.start_ms, measure.end_ms,
                track.open_since, track.streak, value, baseline,
            )  # fmt: skip
        track.streak = 0
        _learn(rule, value, track)
        if track.open_since is None:
            return None
        since, windows = track.open_since, track.episode
        track.open_since, track.episode = None, 0
        return Change(
            rule, measure.key, _CLEARED, measure.start_ms, measure.end_ms,
            since, windows, value, baseline,
        )  # fmt: skip


def _figure_text(rule: Rule, value: float) -> str:
    if rule.figure in ("confidence", "error_rate"):
        return f"{value:.2f}"
    return f"{value:g}"


def _sentence(change: Change) -> str:
    """``tool:ocr_tool: mean confidence 0.70, below 0.80, for 3 windows`` when raised;
    ``..., no longer below 0.80 (open for 4 windows since 2024-06-03T09:00:00+00:00)``."""
    rule = change.rule
    what = rule.says or rule.figure
    value = _figure_text(rule, change.value)
    if rule.test == "rising":
        compared, limit = "up from", _figure_text(rule, change.baseline or 0.0)
    else:
        compared = "below" if rule.test == "below" else "above"
        limit = _figure_text(rule, change.limit)
    windows = f"{change.windows} window{'s' if change.windows != 1 else ''}"
    if change.state == _RAISED:
        return f"{change.key}: {what} {value}, {compared} {limit}, for {windows}"
    since = from_epoch_ms(change.since_ms).isoformat()
    if rule.test == "rising":
        compared, limit = "rising", ""
    ended = f"no longer {compared} {limit}".rstrip()
    return f"{change.key}: {what} {value}, {ended} (open for {windows} since {since})"


_ADVICE: Final = {
    "confidence": "its fallback answers its calls until the alert clears",
    "error_rate": "its fallback answers its calls until the alert clears",
    "external_calls": "look for a call loop in the traces of that window",
    "dead_letters": "read them: hermesbus replay --topic hermes.dlq",
    "lag": "the component does not keep up: look for a slow store or a stalled worker",
}


def alert_envelope(change: Change, *, namespace: str = "") -> Envelope:
    """The alert on ``hermes.alerts``: an ``ErrorReport`` of the key, whose code names the
    rule; its context says ``raised`` or ``cleared``, the window and the figures. Its id
    and time are the change's (the window's): judged again, it is the same record."""
    rule = change.rule
    name = (namespace, change.key, rule.name, change.start_ms, change.state)
    context: dict[str, str | int | float | bool] = {
        ALERT: change.state,
        "rule": rule.name,
        "key": change.key,
        "figure": rule.figure,
        "value": change.value,
        "limit": change.limit,
        "window_start_ms": change.start_ms,
        "window_end_ms": change.end_ms,
        "since_ms": change.since_ms,
        "windows": change.windows,
        "health": rule.health,
    }
    report = ErrorReport(
        component=change.key,
        code=f"alert.{rule.name}",
        message=change.sentence,
        advice=_ADVICE.get(rule.figure, "") if change.state == _RAISED else "",
        retryable=False,
    )
    return Envelope(
        message_id=derive_id("alert", *name),
        timestamp=from_epoch_ms(change.end_ms),
        source=SOURCE,
        target=TARGET,
        session_id=change.key,
        user_id="",
        trace_id=derive_id("alert-trace", namespace, change.key, rule.name, change.since_ms),
        payload=Payload(task="alert", body=report, context=context),
    )


@dataclass(frozen=True, slots=True)
class Said:
    """An alert as read back from the log."""

    rule: str
    key: str
    state: str
    end_ms: int
    since_ms: int
    health: bool
    windows: int = 0


def change_of(envelope: Envelope) -> Said | None:
    """What an alert envelope says (None: not one :func:`alert_envelope` makes)."""
    body, context = envelope.payload.body, envelope.payload.context
    state, rule, end, since = (context.get(k) for k in (ALERT, "rule", "window_end_ms", "since_ms"))
    if not isinstance(body, ErrorReport) or state not in (_RAISED, _CLEARED):
        return None
    if not isinstance(rule, str) or not isinstance(end, int) or not isinstance(since, int):
        return None
    windows = context.get("windows")
    health = context.get("health") is True
    count = windows if isinstance(windows, int) else 0
    return Said(rule, body.component, str(state), end, since, health, count)


class OpenAlerts:
    """The alerts open now, folded from the log in order (each rule and key: its last
    word): what :class:`AlertedHealth` reads."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], Said] = {}

    def take(self, said: Said) -> None:
        """Fold one alert in: a rule and key's latest window's word stands (a raise re-sent
        late, by a second judge, does not reopen what was cleared since)."""
        last = self._last.get((said.rule, said.key))
        if last is None or said.end_ms > last.end_ms:
            self._last[(said.rule, said.key)] = said

    def replace(self, other: OpenAlerts) -> None:
        """Say what ``other`` says from now on (the log read anew)."""
        self._last = dict(other._last)

    def open(self) -> list[Said]:
        return [s for s in self._last.values() if s.state == _RAISED]

    def health_rules(self, tool: str, rules: Iterable[str] | None = None) -> list[str]:
        """The open health alerts on ``tool``, by rule name; of ``rules`` only, when given
        (an alert left open by a rule no longer judged ends nothing: it does not count)."""
        key, kept = f"tool:{tool}", None if rules is None else set(rules)
        return sorted(
            s.rule
            for s in self.open()
            if s.key == key and s.health and (kept is None or s.rule in kept)
        )


class AlertedHealth:
    """The dispatcher's health reads with the open health alerts in them: a tool under one
    is unhealthy (its fallback answers, and the reply says which alert), but for every
    ``trial_every``-th call, which goes to the tool itself so that the windows go on
    measuring it (the episode ends by what those calls answer). ``trial_every=0``: none
    (the alert then ends only when cleared on the log by other means)."""

    def __init__(
        self,
        inner: HealthView,
        alerts: OpenAlerts,
        trial_every: int,
        rules: Iterable[str] | None = None,
    ) -> None:
        """``rules``: the health rules judged now (None: any on the log)."""
        self._inner = inner
        self._alerts = alerts
        self._trial_every = trial_every
        self._rules = None if rules is None else frozenset(rules)
        self._calls: dict[str, int] = {}

    async def health(self, tool: str) -> ToolHealth | None:
        found = await self._inner.health(tool)
        rules = self._alerts.health_rules(tool, self._rules)
        if found is None or not rules:
            self._calls.pop(tool, None)
            return found
        calls = self._calls[tool] = self._calls.get(tool, 0) + 1
        if self._trial_every and calls % self._trial_every == 0:
            return found  # a trial: the tool answers this one itself
        return replace(found, alert=",".join(rules))

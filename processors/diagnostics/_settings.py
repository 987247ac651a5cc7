"""Diagnostics rollup settings from ``HERMES_DIAGNOSTICS_*``."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from hermesbus.processors.diagnostics._alerts import Rule
from hermesbus.processors.diagnostics._rollup import HOP_MS, HOPPING_MS, TUMBLING_MS, Windows

__all__ = ["EMBEDDED_GROUP_TIMINGS", "DiagnosticsSettings"]

EMBEDDED_GROUP_TIMINGS = {
    "session_timeout_ms": 6_000,
    "heartbeat_ms": 1_000,
    "one_record_batches": True,
}
"""What the embedded broker needs (:meth:`DiagnosticsSettings.for_embedded_broker`)."""

Ms = Annotated[int, Field(ge=1)]
Count = Annotated[int, Field(ge=1)]
RULES = ("low_confidence", "error_rate", "call_spike", "dead_letters", "lag_growing")
"""The alert rules, by name (``HERMES_DIAGNOSTICS_ALERTS_OFF`` names those not judged)."""


class DiagnosticsSettings(BaseSettings):
    """The windows, when a window closes, and the faust app's group timing."""

    model_config = SettingsConfigDict(env_prefix="HERMES_DIAGNOSTICS_", frozen=True, extra="ignore")

    enabled: bool = True
    """``HERMES_DIAGNOSTICS_ENABLED=false``: ``up`` runs no rollup (``hermesbus diagnostics``
    still does, when started)."""
    tumbling_ms: Ms = TUMBLING_MS
    hopping_ms: Ms = HOPPING_MS
    hop_ms: Ms = HOP_MS
    grace_ms: Annotated[int, Field(ge=0)] = 10_000
    """How far past a window's end (records' time) a partition must have read before the
    window closes there: records up to this late still count in their window."""
    idle_ms: Ms = 5_000
    """A partition nothing was read from for this long (wall clock) has caught up: its
    windows close once the wall clock is ``grace_ms`` past their end, without waiting
    for a later record (faust-streaming issue 250)."""
    close_every_ms: Ms = 1_000
    """How often closed windows are looked for and emitted."""
    retain_ms: Ms = 3_600_000
    """How long past its end an emitted window's entry is kept (a record arriving that late
    is added to a new part of it; later, it opens the window afresh)."""
    session_timeout_ms: Annotated[int, Field(ge=1_000)] | None = None
    """The group session timeout. Unset: faust's default (60 s); 6 s when ``up`` runs the
    embedded broker (:meth:`for_embedded_broker`)."""
    heartbeat_ms: Annotated[int, Field(ge=100)] | None = None
    """The heartbeat interval. Unset: faust's default (3 s); 1 s on the embedded broker."""
    one_record_batches: bool = False
    """Write the changelog one record per batch. The embedded broker (tansu) answers a
    ListOffsets for the end with the last batch's first offset + 1: faust's recovery
    reads the changelog to that answer and stopped short of the last batch's other
    records (measured: a window one record short after a restart). One record per batch
    keeps the answer right; ``up`` sets it on the embedded broker."""
    start_timeout_ms: Ms = 120_000
    """How long the app may take to join and recover its tables before the start fails."""

    # -- alerts over the closed tumbling windows (see ``_alerts``) ----------------------
    alerts: bool = True
    """``HERMES_DIAGNOSTICS_ALERTS=false``: the closed windows are judged by no rule."""
    alerts_off: str = ""
    """Rules not judged, comma separated (of :data:`RULES`)."""
    confidence_below: Annotated[float, Field(gt=0, le=1)] = 0.8
    confidence_windows: Count = 3
    """``low_confidence``: a tool's own answers' mean confidence below ``confidence_below``
    for ``confidence_windows`` windows in a row; its fallback answers meanwhile."""
    error_rate_above: Annotated[float, Field(ge=0, lt=1)] = 0.2
    error_windows: Count = 1
    error_min_answers: Count = 5
    """``error_rate``: errors over a key's own answers above ``error_rate_above`` in
    ``error_windows`` windows in a row, each of at least ``error_min_answers`` answers; on
    a tool, its fallback answers meanwhile."""
    calls_factor: Annotated[float, Field(gt=1)] = 3.0
    calls_trailing: Annotated[int, Field(ge=3)] = 10
    """``call_spike``: a window's external calls above ``calls_factor`` times the median
    of the key's last ``calls_trailing`` windows (a call loop)."""
    lag_windows: Count = 3
    """``lag_growing``: a component's consumer lag higher at each of ``lag_windows``
    windows in a row (read when each is judged)."""
    settle_ms: Ms = 10_000
    """A window is judged once none of its parts was read for this long (the rollup closes
    an idle partition's part ``idle_ms`` after a busy one's)."""
    trial_every: Annotated[int, Field(ge=0)] = 5
    """Under a health alert, every ``trial_every``-th call goes to the tool itself, so its
    own answers can end the alert (0: none)."""

    @field_validator("alerts_off")
    @classmethod
    def _known_rules(cls, value: str) -> str:
        unknown = sorted(_names(value) - set(RULES))
        if unknown:
            raise ValueError(f"no alert rule {', '.join(unknown)} (rules: {', '.join(RULES)})")
        return value

    @model_validator(mode="after")
    def _sizes(self) -> DiagnosticsSettings:
        self.windows  # noqa: B018  # raises ValueError, named by pydantic, on nonsense
        return self

    @property
    def off(self) -> set[str]:
        return _names(self.alerts_off)

    def rules(self) -> tuple[Rule, ...]:
        """The alert rules these settings make (none when alerts are off)."""
        if not self.alerts:
            return ()
        made = (
            Rule(
                "low_confidence", "confidence", "below", self.confidence_below,
                self.confidence_windows, health=True, says="mean confidence",
            ),
            Rule(
                "error_rate", "error_rate", "above", self.error_rate_above, self.error_windows,
                ("tool:", "component:"), self.error_min_answers, health=True, says="error rate",
            ),
            Rule(
                "call_spike", "external_calls", "above_median", self.calls_factor, 1,
                ("tool:", "component:"), trailing=self.calls_trailing, says="external calls",
            ),
            Rule(
                "dead_letters", "dead_letters", "above", 0, 1, ("component:",),
                says="dead letters",
            ),
            Rule(
                "lag_growing", "lag", "rising", 0, self.lag_windows, ("component:",),
                says="consumer lag",
            ),
        )  # fmt: skip
        return tuple(rule for rule in made if rule.name not in self.off)

    def for_embedded_broker(self) -> DiagnosticsSettings:
        """These settings with what the embedded broker needs, where not set: its group
        timings (tansu answers a faust join once half the session timeout has passed: 6 s
        joins in 3 s) and one record per changelog batch (:attr:`one_record_batches`)."""
        update = {
            name: value
            for name, value in EMBEDDED_GROUP_TIMINGS.items()
            if name not in self.model_fields_set
        }
        return self.model_copy(update=update) if update else self

    @property
    def windows(self) -> Windows:
        return Windows(self.tumbling_ms, self.hopping_ms, self.hop_ms)


def _names(listed: str) -> set[str]:
    """The names of a comma-separated list, blanks left out."""
    return {name.strip() for name in listed.split(",") if name.strip()}

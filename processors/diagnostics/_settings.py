"""Diagnostics rollup settings from ``HERMES_DIAGNOSTICS_*``."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from hermesbus.processors.diagnostics._rollup import HOP_MS, HOPPING_MS, TUMBLING_MS, Windows

__all__ = ["EMBEDDED_GROUP_TIMINGS", "DiagnosticsSettings"]

EMBEDDED_GROUP_TIMINGS = {
    "session_timeout_ms": 6_000,
    "heartbeat_ms": 1_000,
    "one_record_batches": True,
}
"""What the embedded broker needs (:meth:`DiagnosticsSettings.for_embedded_broker`)."""

Ms = Annotated[int, Field(ge=1)]


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

    @model_validator(mode="after")
    def _sizes(self) -> DiagnosticsSettings:
        self.windows  # noqa: B018  # raises ValueError, named by pydantic, on nonsense
        return self

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

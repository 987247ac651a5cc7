"""Group timings: the embedded broker's, what a user sets, and pairs that cannot work."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from hermesbus.runtime import RuntimeSettings
from hermesbus.runtime._settings import EMBEDDED_GROUP_TIMINGS


def _timings(settings: RuntimeSettings) -> tuple[int, int]:
    return settings.session_timeout_ms, settings.heartbeat_interval_ms


def test_a_configured_broker_keeps_the_production_defaults() -> None:
    assert _timings(RuntimeSettings()) == (10_000, 1_000)


def test_the_embedded_broker_gets_its_own_timings_and_nothing_else_changes() -> None:
    settings = RuntimeSettings(max_in_flight=8, exactly_once=True).for_embedded_broker()
    assert _timings(settings) == (
        EMBEDDED_GROUP_TIMINGS["session_timeout_ms"],
        EMBEDDED_GROUP_TIMINGS["heartbeat_interval_ms"],
    )
    assert (settings.max_in_flight, settings.exactly_once) == (8, True)


def test_timings_a_user_set_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_RUNTIME_SESSION_TIMEOUT_MS", "9000")
    monkeypatch.setenv("HERMES_RUNTIME_HEARTBEAT_INTERVAL_MS", "900")
    assert _timings(RuntimeSettings().for_embedded_broker()) == (9_000, 900)


def test_one_timing_set_gets_a_partner_that_fits_it() -> None:
    assert _timings(RuntimeSettings(heartbeat_interval_ms=3_000).for_embedded_broker()) == (
        12_000,
        3_000,
    )
    assert _timings(RuntimeSettings(session_timeout_ms=6_000).for_embedded_broker()) == (
        6_000,
        1_500,
    )


def test_a_heartbeat_too_slow_for_the_session_is_refused() -> None:
    with pytest.raises(ValidationError, match="at most a third of session_timeout_ms"):
        RuntimeSettings(session_timeout_ms=2_000, heartbeat_interval_ms=1_000)

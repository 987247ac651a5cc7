"""Runtime tuning from ``HERMES_RUNTIME_*`` environment variables."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["RuntimeSettings"]

Positive = Annotated[int, Field(ge=1)]


class RuntimeSettings(BaseSettings):
    """How much work is in flight, how often offsets are committed and timers polled."""

    model_config = SettingsConfigDict(env_prefix="HERMES_RUNTIME_", frozen=True, extra="ignore")

    max_in_flight: Positive = 64
    """Handlers running at once (different sessions; one session is always sequential)."""
    max_buffered: Positive = 2000
    """Fetched records waiting for their session; above this the consumer pauses."""
    commit_interval_ms: Positive = 200
    timer_interval_ms: Positive = 100
    revoke_timeout_ms: Positive = 10_000
    """How long a revoked partition's in-flight work may take before it is abandoned."""
    applied_window: Positive = 256
    """Ids of the latest applied envelopes kept per session, to skip redeliveries."""
    infra_retry_ms: Positive = 200
    """First pause before retrying a store or broker failure (doubles up to 10 s)."""
    max_backoff_ms: Positive = 3_600_000
    max_poll_records: Positive = 500
    fetch_max_wait_ms: Positive = 50
    """How long the broker may hold a fetch for data; the embedded broker always waits it out."""
    state_cache_size: Positive = 10_000
    """Session states kept in memory while this worker owns their partitions."""
    session_timeout_ms: Positive = 10_000
    heartbeat_interval_ms: Positive = 1_000
    exactly_once: bool = False

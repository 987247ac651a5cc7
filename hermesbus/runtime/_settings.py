"""Runtime tuning from ``HERMES_RUNTIME_*`` environment variables."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["EMBEDDED_GROUP_TIMINGS", "RuntimeSettings"]

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
    """First pause before retrying a store or broker failure (doubles up to 10 s, or up
    to ``pause_notice_ms`` for a record whose sender is told it is paused)."""
    pause_notice_ms: Positive = 2_000
    """While an outage holds a record, its sender is told again at least this often."""
    max_backoff_ms: Positive = 3_600_000
    max_poll_records: Positive = 500
    fetch_max_wait_ms: Positive = 50
    """How long the broker may hold a fetch for data; the embedded broker always waits it out."""
    state_cache_size: Positive = 10_000
    """Session states kept in memory while this worker owns their partitions."""
    state_cache_idle_s: Positive = 60
    """A cached state unused this long is dropped: a burst's sessions do not stay in memory."""
    session_timeout_ms: Positive = 10_000
    """How long a silent member keeps its partitions on real Kafka: a crashed worker's
    sessions wait this long before another worker takes them (Kafka's own default is 45 s;
    the broker must allow it: group.min.session.timeout.ms, 6 s by default)."""
    heartbeat_interval_ms: Positive = 1_000
    instance_id: Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]{0,200}$")] = ""
    """A stable name of this instance (a StatefulSet pod's, ``worker-1``): each of its
    consumer group members is then *static* (KIP-345, ``group.instance.id``), so a
    restart within ``session_timeout_ms`` takes its partitions back at once, with no
    rebalance waiting for the dead member to time out. It must be unique per running
    instance: two running under one name take each other's place in the group over and
    over (aiokafka is never told it was fenced), and records may run in both. A static
    member does not leave its groups when stopped: an instance stopped for good hands its
    partitions on only after ``session_timeout_ms``. Empty: dynamic members, as Kafka's
    default."""
    exactly_once: bool = False

    def for_embedded_broker(self) -> RuntimeSettings:
        """These settings with the embedded broker's group timings, where not set explicitly.

        tansu answers a JoinGroup only once half the session timeout has passed, sleeping
        whole seconds while it waits: 10 s sessions cost every group 5 s to join. With 2 s
        sessions a join takes one pause, 1 s, and a killed worker's partitions move after
        2 s. The broker and the processors share one machine there, so a short session
        costs nothing in false evictions.
        """
        given = self.model_fields_set & set(EMBEDDED_GROUP_TIMINGS)
        if given == set(EMBEDDED_GROUP_TIMINGS):
            return self
        if not given:
            update = dict(EMBEDDED_GROUP_TIMINGS)
        elif "session_timeout_ms" in given:  # a heartbeat that fits the session given
            update = {"heartbeat_interval_ms": max(1, self.session_timeout_ms // 4)}
        else:  # a session that fits the heartbeat given
            update = {"session_timeout_ms": max(2_000, self.heartbeat_interval_ms * 4)}
        return type(self).model_validate({**self.model_dump(), **update})

    @model_validator(mode="after")
    def _heartbeats_fit(self) -> RuntimeSettings:
        if self.heartbeat_interval_ms * 3 > self.session_timeout_ms:
            raise ValueError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be at most a third"
                f" of session_timeout_ms ({self.session_timeout_ms}): a member that misses a"
                " few heartbeats would lose its partitions"
            )
        return self


EMBEDDED_GROUP_TIMINGS = {"session_timeout_ms": 2_000, "heartbeat_interval_ms": 500}
"""Group timings on the embedded broker (``RuntimeSettings.for_embedded_broker``)."""

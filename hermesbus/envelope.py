"""Pydantic models of the envelope, mirroring ``schemas/hermes.mcp.*.avsc`` field by field."""

from __future__ import annotations

import enum
from typing import Annotated, ClassVar

from pydantic import Field

from hermesbus._types import Double, Int32, Int64, Millis, NonEmpty, Record
from hermesbus.payloads import Payload
from hermesbus.snapshot import ContextSnapshot

__all__ = [
    "Diagnostics",
    "Envelope",
    "ExternalCalls",
    "Metadata",
    "Priority",
    "RetryPolicy",
]

Address = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]*:[A-Za-z0-9_.\-]+$")]
"""``component:instance``, e.g. ``conversation:S2`` or ``mcp:dispatcher``."""


class Priority(enum.StrEnum):
    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"
    CRITICAL = "critical"


class RetryPolicy(Record):
    avro_name: ClassVar[str] = "hermes.mcp.RetryPolicy"
    max_attempts: Annotated[Int32, Field(ge=1)] = 1
    backoff_ms: Annotated[Int64, Field(ge=0)] = 100


class Metadata(Record):
    avro_name: ClassVar[str] = "hermes.mcp.Metadata"
    priority: Priority = Priority.NORMAL
    timeout_ms: Annotated[Int64, Field(ge=0)] = 5000
    retry_policy: RetryPolicy = RetryPolicy()
    attempt: Annotated[Int32, Field(ge=1)] = 1


class ExternalCalls(Record):
    avro_name: ClassVar[str] = "hermes.mcp.ExternalCalls"
    count: Annotated[Int32, Field(ge=0)] = 0
    avg_latency_ms: Annotated[Double, Field(ge=0)] = 0.0


class Diagnostics(Record):
    """What a component reports about handling one envelope (time, memory, calls, confidence)."""

    avro_name: ClassVar[str] = "hermes.mcp.Diagnostics"
    processing_time_ms: Annotated[Double, Field(ge=0)] = 0.0
    memory_used_kb: Int64 = 0
    external_calls: ExternalCalls = ExternalCalls()
    confidence_score: Annotated[Double, Field(ge=0.0, le=1.0)] = 1.0


class Envelope(Record):
    """Every message on the bus; ``session_id`` is the Kafka key."""

    avro_name: ClassVar[str] = "hermes.mcp.Envelope"
    message_id: NonEmpty
    timestamp: Millis
    source: Address
    target: Address
    session_id: NonEmpty
    user_id: str
    trace_id: NonEmpty
    span_id: str = ""
    parent_span_id: str | None = None
    causation_id: str | None = None
    payload: Payload
    metadata: Metadata = Metadata()
    snapshot: ContextSnapshot | None = None
    diagnostics: Diagnostics | None = None

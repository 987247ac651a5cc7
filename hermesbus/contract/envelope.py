"""Pydantic models of the envelope, mirroring ``schemas/hermes.mcp.*.avsc`` field by field."""

from __future__ import annotations

import enum
from typing import Annotated, ClassVar

from pydantic import Field, TypeAdapter, ValidationError

from hermesbus.contract.fields import Double, Int32, Int64, Millis, NonEmpty, Record
from hermesbus.contract.payloads import Payload
from hermesbus.contract.snapshot import ContextSnapshot
from hermesbus.errors import EncodeError

__all__ = [
    "SESSION_ID_MAX",
    "SESSION_ID_RULE",
    "Diagnostics",
    "Envelope",
    "ExternalCalls",
    "Metadata",
    "Priority",
    "RetryPolicy",
    "check_session_id",
]

Address = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]*:[A-Za-z0-9_.\-]+$")]
"""``component:instance``, e.g. ``conversation:S2`` or ``mcp:dispatcher``."""

SESSION_ID_MAX = 128
"""The most characters a session id (the Kafka key) may have."""
SESSION_ID_RULE = (
    f"1 to {SESSION_ID_MAX} characters, none of them a control character "
    "(C0, DEL, C1, line separators or bidirectional controls)"
)
"""What a session id must be, as errors say it."""
SessionId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=SESSION_ID_MAX,
        pattern=r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]+$",
    ),
]
"""A session id: printed by every tool that reads the log, so no terminal control in it;
bounded, as a key every record of the session carries (:data:`SESSION_ID_RULE`)."""
_SESSION_ID = TypeAdapter(SessionId)
_SHOWN = 40


def check_session_id(session_id: str) -> str:
    """``session_id`` if an envelope may carry it; else EncodeError saying why (the id shown
    shortened, its control characters escaped)."""
    try:
        return _SESSION_ID.validate_python(session_id, strict=True)
    except ValidationError:
        pass
    shown = session_id if len(session_id) <= _SHOWN else session_id[: _SHOWN - 1] + "…"
    raise EncodeError(
        f"invalid session_id {shown!r} ({len(session_id)} characters): a session id is "
        f"{SESSION_ID_RULE}"
    )


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
    session_id: SessionId
    user_id: str
    trace_id: NonEmpty
    span_id: str = ""
    parent_span_id: str | None = None
    causation_id: str | None = None
    payload: Payload
    metadata: Metadata = Metadata()
    snapshot: ContextSnapshot | None = None
    diagnostics: Diagnostics | None = None

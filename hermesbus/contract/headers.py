"""Kafka headers every hermesbus producer writes, and the dead-letter headers.

``trace_id`` and ``message_id`` travel as headers so tools that do not decode
Avro (Kafka UIs, ``kcat``) can follow a trace; ``traceparent`` is the W3C Trace
Context form of the same trace, derived deterministically from the envelope.
"""

from __future__ import annotations

import hashlib
import re

from hermesbus.contract.envelope import Envelope

__all__ = [
    "DLQ_ATTEMPT",
    "DLQ_ERROR_CLASS",
    "DLQ_ERROR_MESSAGE",
    "DLQ_NOTE",
    "DLQ_ORIGIN_OFFSET",
    "DLQ_ORIGIN_PARTITION",
    "DLQ_ORIGIN_TOPIC",
    "DLQ_PROCESSOR",
    "MESSAGE_ID",
    "TRACEPARENT",
    "TRACE_ID",
    "Headers",
    "envelope_headers",
    "header",
    "traceparent",
    "w3c_ids",
]

Headers = list[tuple[str, bytes]]

TRACE_ID = "trace_id"
MESSAGE_ID = "message_id"
TRACEPARENT = "traceparent"

DLQ_ORIGIN_TOPIC = "hermes.origin.topic"
DLQ_ORIGIN_PARTITION = "hermes.origin.partition"
DLQ_ORIGIN_OFFSET = "hermes.origin.offset"
DLQ_ERROR_CLASS = "hermes.error.class"
DLQ_ERROR_MESSAGE = "hermes.error.message"
DLQ_PROCESSOR = "hermes.processor"
DLQ_ATTEMPT = "hermes.attempt"
DLQ_NOTE = "hermes.dlq.note"
"""Set when the original bytes could not be copied into the dead letter."""

_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_HEX16 = re.compile(r"^[0-9a-f]{16}$")


def _hex(value: str, pattern: re.Pattern[str], size: int) -> str:
    """``value`` itself when it already is W3C-shaped hex, else a digest of it (never all 0)."""
    if pattern.match(value) and value.strip("0"):
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:size]
    return digest if digest.strip("0") else "1".rjust(size, "0")


def w3c_ids(envelope: Envelope) -> tuple[str, str, str | None]:
    """The envelope's trace, span and parent span as W3C Trace Context hex (32, 16, 16
    digits): each id itself when it already is such hex, else a digest of it; the span is
    the message id's when the envelope has none, the parent None when it has none."""
    trace = _hex(envelope.trace_id, _HEX32, 32)
    span = _hex(envelope.span_id or envelope.message_id, _HEX16, 16)
    parent = _hex(envelope.parent_span_id, _HEX16, 16) if envelope.parent_span_id else None
    return trace, span, parent


def traceparent(envelope: Envelope) -> str:
    """W3C ``traceparent`` (version 00, sampled) for the envelope's trace and span."""
    trace, span, _ = w3c_ids(envelope)
    return f"00-{trace}-{span}-01"


def envelope_headers(envelope: Envelope) -> Headers:
    """The headers written with every envelope."""
    return [
        (TRACE_ID, envelope.trace_id.encode()),
        (MESSAGE_ID, envelope.message_id.encode()),
        (TRACEPARENT, traceparent(envelope).encode()),
    ]


def header(headers: object, name: str) -> str | None:
    """The last value of header ``name`` as text, from aiokafka's sequence of pairs."""
    found = None
    if isinstance(headers, list | tuple):
        for key, value in headers:
            if key == name and isinstance(value, bytes | bytearray):
                found = bytes(value).decode("utf-8", "replace")
    return found

"""One record of the log as one Elastic Common Schema document.

The fields Kibana filters on are ECS (``trace.id``, ``span.id``, ``event.*``,
``service.name``), OpenTelemetry's messaging and gen_ai names where ECS has none
(``messaging.destination.name``, ``messaging.kafka.message.key``,
``gen_ai.conversation.id``); what is hermesbus's own is under ``hermes.*``. The raw
bytes and headers are kept (not indexed), so the index is also the archive.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from functools import cached_property, lru_cache
from typing import Any

import orjson
from pydantic import BaseModel, field_validator

from hermesbus.codec import Codec
from hermesbus.contract.envelope import Envelope
from hermesbus.contract.fields import epoch_ms
from hermesbus.contract.headers import (
    DLQ_ERROR_CLASS,
    DLQ_ERROR_MESSAGE,
    DLQ_ORIGIN_OFFSET,
    DLQ_ORIGIN_PARTITION,
    DLQ_ORIGIN_TOPIC,
    DLQ_PROCESSOR,
    MESSAGE_ID,
    TRACE_ID,
    header,
)
from hermesbus.contract.payloads import ErrorReport, ToolResult, WindowRollup
from hermesbus.errors import HermesError
from hermesbus.topics import identity_of

from ._model import ArchivedRecord, Document

__all__ = [
    "ALERT_SIGNER",
    "ENVELOPES_DATASET",
    "ROLLUP_DATASET",
    "DocumentSettings",
    "decode",
    "document",
    "iso_ms",
    "refused_document",
]

_REDACTED = "[redacted]"
_COMPONENTS = {"mcp": "dispatcher"}
"""``service.name`` is the processor's name: the dispatcher signs as ``mcp:dispatcher``."""
_FAILED_STATUS = 400
ENVELOPES_DATASET = "hermes.envelopes"
ROLLUP_DATASET = "hermes.diagnostics"
"""``event.dataset`` of a closed window's document: it goes into a data stream of its own."""
ALERT_SIGNER = "diagnostics"
"""Who writes the alerts whose fields are charted (``hermes.alert``)."""
_NS_PER_MS = 1_000_000


class DocumentSettings(BaseModel, frozen=True):
    """What a document keeps of the payload: sensitive field names are redacted (at any
    depth, also inside tool arguments and results), and a payload larger than
    ``payload_max_bytes`` as JSON is kept only as its truncated text."""

    redact: frozenset[str] = frozenset(
        {"password", "passwd", "secret", "token", "api_key", "authorization", "card_number"}
    )
    payload_max_bytes: int = 16_384
    dlq_topic: str = "hermes.dlq"

    @field_validator("redact")
    @classmethod
    def _lowercase(cls, names: frozenset[str]) -> frozenset[str]:
        """Names match keys whatever their case: ``API_Key`` redacts ``api_key`` too."""
        return frozenset(name.lower() for name in names)

    @cached_property
    def redact_keys(self) -> re.Pattern[bytes]:
        """A key of a redacted name in compact, lowercased JSON (``"token":``): looked for in
        the payload's JSON first, so only a payload that has one is walked."""
        names = sorted(re.escape(orjson.dumps(name)[1:-1]) for name in self.redact)
        return re.compile(b'"(?:' + b"|".join(names) + b')":')


def iso_ms(ms: int) -> str:
    """Epoch milliseconds as ISO 8601 UTC with milliseconds (``2026-12-02T10:00:00.000Z``)."""
    seconds, millis = divmod(ms, 1000)
    return f"{_iso_second(seconds)}.{millis:03d}Z"


@lru_cache(maxsize=4096)
def _iso_second(seconds: int) -> str:
    """One second's ISO 8601 text: every document formats two times, mostly the same few."""
    return datetime.fromtimestamp(seconds, UTC).isoformat()[:19]


def decode(record: ArchivedRecord, codec: Codec) -> Envelope | HermesError:
    """The record's envelope, or why it has none."""
    try:
        return codec.decode(record.value)
    except HermesError as exc:
        return exc


def document(
    record: ArchivedRecord,
    decoded: Envelope | HermesError,
    settings: DocumentSettings,
    cause_ms: Mapping[str, int] | None = None,
) -> Document:
    """The document of one record; one that does not decode keeps its bytes and the error.

    ``cause_ms`` maps message ids to their log time: an envelope whose cause is there gets
    ``event.duration``, the time from its cause's append to its own (how the waterfall
    measures the component that emitted it).
    """
    doc = _coordinates(record)
    if isinstance(decoded, HermesError):
        exc = decoded
        doc["event"] |= {"action": "undecodable", "outcome": "failure"}
        doc["error"] = {"type": type(exc).__name__, "message": str(exc)}
        doc["trace"] = {"id": header(list(record.headers), TRACE_ID)}
        doc["event"]["id"] = header(list(record.headers), MESSAGE_ID)
        doc["message"] = f"undecodable record: {exc}"
    else:
        _envelope(doc, decoded, settings, cause_ms or {}, record.timestamp_ms)
    if record.topic == settings.dlq_topic:
        _dead_letter(doc, record.headers)
    return doc


def refused_document(record: ArchivedRecord, reason: str) -> Document:
    """What is kept of a record whose document the index refused: its place, ids, bytes."""
    doc = _coordinates(record)
    if record.key is not None:  # the key may be what was refused: kept, not indexed
        doc["messaging"]["kafka"]["message"]["key"] = None
        doc["hermes"]["kafka"]["key"] = base64.b64encode(record.key).decode()
    doc["event"] |= {
        "action": "index_refused",
        "outcome": "failure",
        "id": header(list(record.headers), MESSAGE_ID),
    }
    doc["trace"] = {"id": header(list(record.headers), TRACE_ID)}
    doc["error"] = {"type": "index_refused", "message": reason}
    doc["message"] = f"the index refused this record's document: {reason}"
    return doc


def _coordinates(record: ArchivedRecord) -> Document:
    key = record.key.decode("utf-8", "replace") if record.key is not None else None
    headers = [{"key": k, "value": _b64(v)} for k, v in record.headers]
    return {
        "_id": record.id,
        "@timestamp": iso_ms(record.timestamp_ms),
        "event": {"kind": "event", "dataset": ENVELOPES_DATASET},
        "messaging": {
            "destination": {"name": record.topic},
            "kafka": {
                "message": {"key": key, "offset": record.offset},
                "destination": {"partition": record.partition},
            },
        },
        "hermes": {
            "raw": _b64(record.value),
            "kafka": {"timestamp_ms": record.timestamp_ms, "headers": headers},
        },
    }


def _b64(data: bytes) -> str:
    """Standard base64 (what ``base64.b64encode`` gives), without its wrapper's cost."""
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def _envelope(
    doc: Document,
    envelope: Envelope,
    settings: DocumentSettings,
    cause_ms: Mapping[str, int],
    appended_ms: int,
) -> None:
    payload = envelope.payload
    body = payload.body
    action = type(body).__name__ if body is not None else "none"
    source = envelope.source
    component, _, instance = source.partition(":")
    event = doc["event"]
    event["id"] = envelope.message_id
    event["action"] = action
    event["outcome"] = "success"
    event["created"] = iso_ms(epoch_ms(envelope.timestamp))
    cause = cause_ms.get(envelope.causation_id or "")
    if cause is not None and appended_ms >= cause:
        event["duration"] = (appended_ms - cause) * _NS_PER_MS
    doc["trace"] = {"id": envelope.trace_id}
    doc["span"] = {"id": envelope.span_id or envelope.message_id}
    if envelope.parent_span_id:
        doc["parent"] = {"id": envelope.parent_span_id}
    doc["service"] = {"name": _COMPONENTS.get(component, component), "node": {"name": instance}}
    doc["gen_ai"] = {"conversation": {"id": envelope.session_id}}
    doc["user"] = {"id": envelope.user_id}
    metadata, snapshot = envelope.metadata, envelope.snapshot
    labels = doc["labels"] = {"priority": metadata.priority.value, "attempt": str(metadata.attempt)}
    if snapshot is not None and snapshot.state_id:
        labels["state"] = snapshot.state_id
    doc["message"] = f"{source} → {envelope.target} {action} {payload.task}"
    hermes = doc["hermes"]
    hermes["source"] = source
    hermes["target"] = envelope.target
    hermes["causation_id"] = envelope.causation_id
    hermes["task"] = payload.task
    if envelope.diagnostics is not None:
        hermes["diagnostics"] = _diagnostics(envelope)
    _payload(hermes, envelope, settings)
    if isinstance(body, WindowRollup):
        event["dataset"] = ROLLUP_DATASET
        hermes["rollup"] = _rollup(body)
        doc["message"] = (
            f"{body.key} {body.window} {iso_ms(epoch_ms(body.start))}: {body.count} records, "
            f"p99 {body.latency_p99_ms:.1f} ms, {body.errors} errors"
        )
    failed = _failure(body)
    if failed is not None:
        event["outcome"] = "failure"
        doc["error"] = failed
    alert = _alert(envelope)
    if alert is not None:  # a diagnostics alert: its rule, key, window and figures
        hermes["alert"] = alert
        doc["message"] = f"alert {alert['state']}: {failed['message'] if failed else ''}"
        if alert["state"] == "cleared":
            event["outcome"] = "success"  # the episode ended: nothing failed here


def _alert(envelope: Envelope) -> dict[str, object] | None:
    """An alert's fields (``hermes.alert``) when ``envelope`` is one the diagnostics'
    rules wrote (its source says so; the signature check drops them otherwise)."""
    body, context = envelope.payload.body, envelope.payload.context
    state = context.get("alert")
    if not isinstance(body, ErrorReport) or identity_of(envelope.source) != ALERT_SIGNER:
        return None
    if state not in ("raised", "cleared"):
        return None
    fields: dict[str, object] = {"state": state, "key": body.component}
    for name in ("rule", "figure"):
        if isinstance(context.get(name), str):
            fields[name] = context[name]
    for name in ("value", "limit"):
        if isinstance(context.get(name), int | float) and not isinstance(context[name], bool):
            fields[name] = float(context[name])  # type: ignore[arg-type]
    if isinstance(context.get("windows"), int):
        fields["windows"] = context["windows"]
    for name, field in (("window_start", "window_start_ms"), ("window_end", "window_end_ms")):
        if isinstance(context.get(field), int):
            fields[name] = iso_ms(context[field])  # type: ignore[arg-type]
    if isinstance(context.get("since_ms"), int):
        fields["since"] = iso_ms(context["since_ms"])  # type: ignore[arg-type]
    return fields


def _rollup(body: WindowRollup) -> dict[str, object]:
    """A closed window's figures as fields Kibana charts (its histogram stays in the payload)."""
    figures = body.model_dump(exclude={"latency_bounds_ms", "latency_counts", "partitions"})
    figures["start"], figures["end"] = iso_ms(epoch_ms(body.start)), iso_ms(epoch_ms(body.end))
    figures["partition"] = body.partitions[0] if len(body.partitions) == 1 else None
    figures["error_rate"] = body.errors / body.count if body.count else 0.0
    return figures


def _failure(body: object) -> dict[str, str] | None:
    """The ``error`` of a body that reports a failure: an error report, a failed tool."""
    if isinstance(body, ErrorReport):
        return {"type": body.code, "message": body.message}
    if isinstance(body, ToolResult) and body.status_code >= _FAILED_STATUS:
        return {"type": str(body.status_code), "message": body.error or ""}
    return None


def _diagnostics(envelope: Envelope) -> dict[str, Any]:
    d = envelope.diagnostics
    if d is None:
        return {}
    return {
        "processing_time_ms": d.processing_time_ms,
        "memory_used_kb": d.memory_used_kb,
        "external_calls": d.external_calls.count,
        "external_avg_latency_ms": d.external_calls.avg_latency_ms,
        "confidence_score": d.confidence_score,
    }


def _payload(hermes: Document, envelope: Envelope, settings: DocumentSettings) -> None:
    """The payload as JSON (``*_json`` strings opened), redacted; over the cap, text only."""
    payload = envelope.payload
    body = payload.body
    fields = body.model_dump(mode="json") if body is not None else {}
    for key, field in fields.items():
        if key.endswith("_json") and isinstance(field, str):
            fields[key] = _opened(field)
    # context values are JSON values already (booleans, numbers, strings, lists of strings)
    value = {"task": payload.task, "context": dict(payload.context), "body": fields}
    data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    if settings.redact_keys.search(data.lower()):  # the rare case: walk it
        value = _redacted(value, settings.redact)
        data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    if len(data) > settings.payload_max_bytes:
        hermes["payload_text"] = data[: settings.payload_max_bytes].decode("utf-8", "ignore")
        hermes["payload_truncated"] = len(data)
        return
    hermes["payload"] = value
    hermes["payload_text"] = data.decode()


def _opened(text: str) -> Any:
    """A ``*_json`` field's value as JSON, or its text when it is not JSON."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def _redacted(value: Any, names: frozenset[str]) -> Any:
    if isinstance(value, dict):
        return {
            k: _REDACTED if k.lower() in names else _redacted(v, names) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_redacted(v, names) for v in value]
    return value


def _dead_letter(doc: Document, headers: Iterable[tuple[str, bytes]]) -> None:
    """A dead letter: its origin and error, and a failure whatever its envelope said."""
    found = list(headers)
    origin = {
        "topic": header(found, DLQ_ORIGIN_TOPIC),
        "partition": _int(header(found, DLQ_ORIGIN_PARTITION)),
        "offset": _int(header(found, DLQ_ORIGIN_OFFSET)),
        "processor": header(found, DLQ_PROCESSOR),
    }
    doc["hermes"]["dlq"] = origin
    doc["event"]["outcome"] = "failure"
    doc["event"]["kind"] = "alert"
    doc["error"] = {
        "type": header(found, DLQ_ERROR_CLASS),
        "message": header(found, DLQ_ERROR_MESSAGE),
    }
    what = doc.get("message", "")
    doc["message"] = f"dead letter from {origin['topic']} ({origin['processor']}): {what}"


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.lstrip("-").isdigit() else None

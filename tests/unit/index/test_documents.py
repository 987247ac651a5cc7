"""One record as one ECS document: fields, outcomes, durations, dead letters, redaction."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from hermesbus import Envelope, Payload
from hermesbus.codec import default_codec
from hermesbus.contract.payloads import ToolCall, ToolResult
from hermesbus.processors.diagnostics import Figures, Tally, Window, rollup_envelope
from hermesbus.trace.index import (
    ROLLUP_DATASET,
    ArchivedRecord,
    Document,
    DocumentSettings,
    archived,
    decode,
    document,
    iso_ms,
    refused_document,
)
from tests.builders import T0, reply_to, turn

T0_MS = int(T0.timestamp() * 1000)


def _record(
    envelope: Envelope | None, *, topic: str = "hermes.conversation.in", **extra: Any
) -> ArchivedRecord:
    value = default_codec().encode(envelope) if envelope is not None else b"\x00garbage"
    fields: dict[str, Any] = {
        "topic": topic,
        "partition": 3,
        "offset": 41,
        "timestamp_ms": T0_MS + 25,
        "key": b"s1",
        "value": value,
        "headers": (("trace_id", b"t1"), ("message_id", b"m1")),
    } | extra
    return ArchivedRecord(**fields)


def _doc(
    record: ArchivedRecord,
    settings: DocumentSettings | None = None,
    causes: dict[str, int] | None = None,
) -> Document:
    return document(record, decode(record, default_codec()), settings or DocumentSettings(), causes)


def test_an_envelope_becomes_an_ecs_document_that_keeps_the_record() -> None:
    reply = reply_to(turn(), "好的")
    record = _record(reply, topic="hermes.conversation.out")
    doc = _doc(record, causes={"m1": T0_MS + 5})
    assert doc["_id"] == f"hermes.conversation.out/3/41@{T0_MS + 25}"
    assert doc["@timestamp"] == "2024-05-16T09:30:00.025Z"
    assert doc["trace"] == {"id": "t1"} and doc["event"]["id"] == reply.message_id
    assert doc["event"]["action"] == "Reply" and doc["event"]["outcome"] == "success"
    assert doc["event"]["duration"] == 20 * 1_000_000  # from its cause's append, in ns
    assert doc["service"] == {"name": "conversation", "node": {"name": "S1"}}
    assert doc["gen_ai"] == {"conversation": {"id": "s1"}}
    assert doc["messaging"]["kafka"] == {
        "message": {"key": "s1", "offset": 41},
        "destination": {"partition": 3},
    }
    assert doc["hermes"]["payload"]["body"]["text"] == "好的"
    assert archived(doc) == record  # the index is the archive


def test_the_dispatcher_is_named_dispatcher_and_a_failed_tool_result_is_a_failure() -> None:
    result = turn(
        source="mcp:dispatcher",
        payload=Payload(body=ToolResult(tool="ocr_tool", status_code=504, error="timed out")),
    )
    doc = _doc(_record(result))
    assert doc["service"]["name"] == "dispatcher"
    assert doc["event"]["outcome"] == "failure"
    assert doc["error"] == {"type": "504", "message": "timed out"}
    assert "duration" not in doc["event"]  # its cause is unknown


def test_an_undecodable_record_keeps_its_bytes_the_error_and_the_header_ids() -> None:
    doc = _doc(_record(None))
    assert doc["event"]["action"] == "undecodable" and doc["event"]["outcome"] == "failure"
    assert doc["trace"] == {"id": "t1"} and doc["event"]["id"] == "m1"
    assert doc["error"]["type"] == "DecodeError"
    assert base64.b64decode(doc["hermes"]["raw"]) == b"\x00garbage"


def test_a_dead_letter_names_its_origin_and_is_a_failure() -> None:
    headers = (
        ("trace_id", b"t1"),
        ("hermes.origin.topic", b"hermes.tool"),
        ("hermes.origin.partition", b"2"),
        ("hermes.origin.offset", b"7"),
        ("hermes.processor", b"tool"),
        ("hermes.error.class", b"hermesbus.errors.ContractError"),
        ("hermes.error.message", b"no such tool"),
    )
    doc = _doc(_record(turn(), topic="hermes.dlq", headers=headers))
    assert doc["hermes"]["dlq"] == {
        "topic": "hermes.tool",
        "partition": 2,
        "offset": 7,
        "processor": "tool",
    }
    assert doc["event"]["outcome"] == "failure"
    assert doc["error"] == {"type": "hermesbus.errors.ContractError", "message": "no such tool"}


def test_secrets_are_redacted_and_a_large_payload_is_kept_as_text_only() -> None:
    secret = turn(payload=Payload(task="login", context={"token": "abc", "who": "me"}))
    doc = _doc(_record(secret))
    assert doc["hermes"]["payload"]["context"] == {"token": "[redacted]", "who": "me"}
    assert "abc" not in doc["hermes"]["payload_text"]
    small = DocumentSettings(payload_max_bytes=40)
    capped = _doc(_record(secret), small)
    assert "payload" not in capped["hermes"]
    assert len(capped["hermes"]["payload_text"].encode()) <= 40
    assert capped["hermes"]["payload_truncated"] > 40


def test_redaction_matches_keys_whatever_their_case_at_any_depth() -> None:
    arguments = '{"user": "ann", "Auth": {"API_KEY": "k-123"}, "note": "api_key is a word here"}'
    call = turn(payload=Payload(task="t", body=ToolCall(tool="x", arguments_json=arguments,
                                                         idempotency_key="i")))  # fmt: skip
    doc = _doc(_record(call), DocumentSettings(redact=frozenset({"Api_Key"})))
    opened = doc["hermes"]["payload"]["body"]["arguments_json"]
    assert opened["Auth"] == {"API_KEY": "[redacted]"}
    assert opened["user"] == "ann" and opened["note"] == "api_key is a word here"
    assert "k-123" not in doc["hermes"]["payload_text"]
    plain = _doc(_record(call), DocumentSettings(redact=frozenset({"password"})))
    assert plain["hermes"]["payload"]["body"]["arguments_json"]["Auth"] == {"API_KEY": "k-123"}


def test_a_refused_document_keeps_the_record_but_indexes_no_key() -> None:
    record = _record(turn(), key=b"k" * 40_000)
    doc = refused_document(record, "400 immense term")
    assert doc["messaging"]["kafka"]["message"]["key"] is None
    assert (
        doc["event"]["action"] == "index_refused" and doc["error"]["message"] == "400 immense term"
    )
    assert archived(doc) == record


def test_a_closed_window_is_a_document_of_the_rollup_dataset_with_its_figures() -> None:
    tally = Tally()
    for ms, confidence in ((5.0, 0.6), (15.0, 0.8)):
        tally.add(Figures(latency_ms=ms, confidence=confidence, retry=ms > 10))
    window = Window("hopping", 300_000, T0_MS - T0_MS % 60_000)
    closed = rollup_envelope(window, "state:S3.1", 4, 1, tally)
    doc = _doc(_record(closed, topic="hermes.diagnostics"))
    assert doc["event"]["dataset"] == ROLLUP_DATASET == "hermes.diagnostics"
    figures = doc["hermes"]["rollup"]
    assert (figures["key"], figures["window"], figures["part"], figures["partition"]) == (
        "state:S3.1",
        "hopping",
        1,
        4,
    )
    assert (figures["count"], figures["retries"], figures["error_rate"]) == (2, 1, 0.0)
    assert figures["confidence_mean"] == pytest.approx(0.7)
    assert figures["start"] == iso_ms(window.start_ms) and figures["end"] == iso_ms(window.end_ms)
    assert "latency_counts" not in figures  # the histogram stays in the payload
    assert doc["message"].startswith("state:S3.1 hopping ") and "2 records" in doc["message"]
    plain = _doc(_record(turn()))
    assert plain["event"]["dataset"] == "hermes.envelopes" and "rollup" not in plain["hermes"]

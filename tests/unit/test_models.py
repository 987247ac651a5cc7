"""The pydantic models mirror the Avro schemas and round-trip through Avro unchanged."""

from __future__ import annotations

import enum
import io
import json
from datetime import UTC, datetime
from typing import Any

import fastavro
import pytest
from hypothesis import given
from pydantic import ValidationError

import hermesbus as h
from hermesbus.codec._convert import _tagger
from hermesbus.codec.schemaset import SchemaSet
from hermesbus.contract.fields import Record
from hermesbus.schemas import SCHEMAS_DIR
from tests import strategies as s

SCHEMAS = SchemaSet.from_dir(SCHEMAS_DIR)
RECORD_MODELS = [
    cls
    for name in h.__all__
    if isinstance(cls := getattr(h, name), type) and issubclass(cls, Record)
]
ENUMS = {
    "hermes.mcp.Priority": h.Priority,
    "hermes.mcp.TrustLevel": h.TrustLevel,
    "hermes.mcp.ContentType": h.ContentType,
    "hermes.mcp.Role": h.Role,
    "hermes.mcp.MemoryTier": h.MemoryTier,
}


def test_every_record_schema_has_a_model() -> None:
    records = {n for n in SCHEMAS.names() if SCHEMAS.definition(n)["type"] == "record"}
    assert records == {cls.avro_name for cls in RECORD_MODELS}


@pytest.mark.parametrize("model", RECORD_MODELS, ids=lambda cls: cls.__name__)
def test_model_fields_mirror_the_schema(model: type[Record]) -> None:
    schema = SCHEMAS.definition(model.avro_name)
    assert [f["name"] for f in schema["fields"]] == list(model.model_fields)
    for field in schema["fields"]:
        declared = model.model_fields[field["name"]]
        if "default" not in field:
            assert declared.is_required(), f"{field['name']} has no Avro default"
            continue
        default = declared.get_default(call_default_factory=True)
        if isinstance(default, Record):
            default = default.model_dump(mode="json")
        elif isinstance(default, tuple):
            default = list(default)
        elif isinstance(default, enum.Enum):
            default = default.value
        assert default == field["default"], field["name"]


@pytest.mark.parametrize("name", sorted(ENUMS))
def test_enums_mirror_the_schema(name: str) -> None:
    assert [m.value for m in ENUMS[name]] == SCHEMAS.definition(name)["symbols"]


def _avro_round_trip(model: Record) -> Record:
    """Write one model with its own record schema and read it back, with plain fastavro."""
    schema = fastavro.parse_schema(SCHEMAS.expanded(model.avro_name))
    record: dict[str, Any] = model.model_dump()
    tagger = _tagger(type(model))
    if tagger is not None:
        tagger(record)
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, record)
    buffer.seek(0)
    back = fastavro.schemaless_reader(
        buffer, schema, None, return_record_name=True, return_record_name_override=True
    )
    return type(model).model_validate(back)


@pytest.mark.parametrize("body", list(s.BODIES), ids=lambda cls: cls.__name__)
def test_every_payload_model_round_trips_through_avro(body: type[Record]) -> None:
    @given(s.BODIES[body])
    def check(value: Record) -> None:
        assert _avro_round_trip(value) == value

    check()


@given(s.snapshot)
def test_context_snapshot_round_trips_through_avro(value: h.ContextSnapshot) -> None:
    assert _avro_round_trip(value) == value


@given(s.metadata)
def test_metadata_round_trips_through_avro(value: h.Metadata) -> None:
    assert _avro_round_trip(value) == value


@given(s.diagnostics)
def test_diagnostics_round_trips_through_avro(value: h.Diagnostics) -> None:
    assert _avro_round_trip(value) == value


def test_seed_envelope_fields_are_there() -> None:
    """The protocol's message fields, with the tracing and snapshot ones."""
    fields = set(h.Envelope.model_fields)
    assert {
        "message_id",
        "timestamp",
        "source",
        "target",
        "payload",
        "trace_id",
        "metadata",
    } <= fields
    assert {
        "session_id",
        "user_id",
        "span_id",
        "parent_span_id",
        "causation_id",
        "snapshot",
    } <= fields
    assert {"priority", "timeout_ms", "retry_policy", "attempt"} <= set(h.Metadata.model_fields)
    assert {"max_attempts", "backoff_ms"} == set(h.RetryPolicy.model_fields)
    assert {"processing_time_ms", "memory_used_kb", "external_calls", "confidence_score"} == set(
        h.Diagnostics.model_fields
    )
    assert {"task", "context"} <= set(h.Payload.model_fields)


def test_the_seed_message_validates() -> None:
    """The protocol's JSON example message, as an app would send it."""
    seed = json.loads(
        '{"message_id": "msg_abc123", "timestamp": 1715234567890, "source": "conversation:S2",'
        ' "target": "mcp:dispatcher", "payload": {"task": "validate_expense", "context":'
        ' {"user_id": "u_xyz789", "session_id": "sess_456"}}, "trace_id": "trace_def456",'
        ' "metadata": {"priority": "high", "timeout_ms": 5000, "retry_policy":'
        ' {"max_attempts": 2, "backoff_ms": 100}}}'
    )
    envelope = h.Envelope.model_validate({**seed, "session_id": "sess_456", "user_id": "u_xyz789"})
    assert envelope.timestamp == datetime(2024, 5, 9, 6, 2, 47, 890000, tzinfo=UTC)
    assert envelope.metadata.priority is h.Priority.HIGH
    assert envelope.metadata.retry_policy.max_attempts == 2


def test_timestamps_keep_milliseconds_like_avro() -> None:
    verification = h.Verification(
        tool="org_tool", verified_at=datetime(2024, 5, 1, 12, 0, 0, 123999, tzinfo=UTC)
    )
    assert verification.verified_at.microsecond == 123000


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"source": "Conversation S2"}, "source"),
        ({"target": "mcp"}, "target"),
        ({"message_id": ""}, "message_id"),
        ({"timestamp": datetime(2024, 5, 1, 12, 0)}, "timestamp"),
    ],
)
def test_envelope_contract_is_enforced(change: dict[str, Any], field: str) -> None:
    values = s.envelope_with().model_dump()
    with pytest.raises(ValidationError, match=field):
        h.Envelope.model_validate({**values, **change})


def test_snapshot_summary_is_at_most_50_characters() -> None:
    with pytest.raises(ValidationError, match="summary"):
        h.ContextSnapshot(state_id="S2", entered_at=datetime.now(UTC), summary="长" * 51)


def test_confidence_score_is_between_0_and_1() -> None:
    with pytest.raises(ValidationError, match="confidence_score"):
        h.Diagnostics(confidence_score=1.2)


def test_context_values_keep_their_json_type() -> None:
    payload = h.Payload(context={"n": 1, "x": 1.0, "b": True, "s": "1", "l": ["a"]})
    assert [type(v) for v in payload.context.values()] == [int, float, bool, str, list]
    with pytest.raises(ValidationError, match="context"):
        h.Payload(context={"nested": {"no": "objects"}})


def test_integer_timestamps_are_epoch_milliseconds() -> None:
    early = h.Verification(tool="org_tool", verified_at=86_400_000)  # one day, in ms
    assert early.verified_at == datetime(1970, 1, 2, tzinfo=UTC)
    with pytest.raises(ValidationError, match="outside years 1-9999"):
        h.Verification(tool="org_tool", verified_at=2**62)


def test_offset_timestamps_at_the_limits_are_validation_errors() -> None:
    from datetime import timedelta, timezone

    plus_one = timezone(timedelta(hours=1))
    with pytest.raises(ValidationError, match="outside years 1-9999"):
        h.Verification(tool="x", verified_at=datetime(1, 1, 1, 0, 30, tzinfo=plus_one))


@given(s.envelopes)
def test_envelopes_round_trip_through_json(envelope: h.Envelope) -> None:
    """Apps may send JSON; it carries the body named as Avro's JSON encoding does."""
    assert h.Envelope.model_validate_json(envelope.model_dump_json()) == envelope


def test_a_body_is_named_by_its_type() -> None:
    payload = h.Payload(body={"hermes.mcp.UserTurn": {"text": "不用，就这三张"}})
    assert payload.body == h.UserTurn(text="不用，就这三张")
    assert h.Payload(body={"Continue": {}}).body == h.Continue()
    assert payload.model_dump(mode="json")["body"] == {
        "hermes.mcp.UserTurn": {
            "text": "不用，就这三张",
            "content_type": "text",
            "attachments": [],
            "locale": None,
            "flow": None,
        }
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "name the body type"),
        ({"symbols": []}, "unknown body type 'symbols'"),
        ({"text": "hi", "role": "user"}, "name the body type"),
        ({"hermes.mcp.UserTurn": {"txt": "hi"}}, "text"),
    ],
)
def test_an_unnamed_or_unknown_body_is_refused(body: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        h.Payload(body=body)

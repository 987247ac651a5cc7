"""The compiled codec against the general one (fastavro + pydantic validation).

The compiled path must write the bytes fastavro writes, read back what fastavro and
pydantic read back, and refuse what they refuse: these tests hold it to that.
"""

from __future__ import annotations

import copy
import io
import logging
import pickle
from collections.abc import Iterator
from decimal import Decimal
from typing import Annotated, Any, ClassVar

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ConfigDict, Field, ValidationError, field_serializer, field_validator

import hermesbus as h
from hermesbus.codec import Codec, _wire, default_codec
from hermesbus.codec._compile import CompileError, compile_codec
from hermesbus.codec._convert import to_model, to_record
from hermesbus.codec._wire import Broken
from hermesbus.contract.fields import Record
from hermesbus.errors import ContractError, DecodeError, EncodeError
from tests import strategies as s

CODEC = Codec()
PARSED = fastavro.parse_schema(CODEC.schema)
HEADER = b"\xc3\x01" + CODEC.fingerprint
NAMED: dict[str, dict[str, Any]] = {}
s.avro_value(CODEC.schema, NAMED)  # registers every named type of the envelope


def fastavro_bytes(record: object) -> bytes:
    buffer = io.BytesIO()
    buffer.write(HEADER)
    fastavro.schemaless_writer(buffer, PARSED, record)
    return buffer.getvalue()


def general_decode(data: bytes) -> h.Envelope:
    """What the codec did before it was compiled: fastavro, then pydantic validation."""
    return to_model(CODEC.decode_record(data))


def outcome(decode: Any, data: bytes) -> tuple[str, Any]:
    try:
        envelope = decode(data)
    except DecodeError as exc:
        return "refused", exc
    return repr(envelope), envelope.model_fields_set


def test_the_shipped_schema_is_compiled() -> None:
    assert CODEC.compiled
    assert default_codec().compiled


@given(s.envelopes)
def test_compiled_encode_writes_the_bytes_fastavro_writes(envelope: h.Envelope) -> None:
    assert CODEC.encode(envelope) == fastavro_bytes(to_record(envelope))


@given(s.envelopes)
def test_compiled_decode_builds_what_pydantic_validates(envelope: h.Envelope) -> None:
    data = CODEC.encode(envelope)
    ours, theirs = CODEC.decode(data), general_decode(data)
    assert ours == theirs == envelope
    assert repr(ours) == repr(theirs)  # enum members, tuples and datetimes alike
    assert ours.model_fields_set == theirs.model_fields_set
    assert ours.model_dump() == theirs.model_dump()
    assert pickle.loads(pickle.dumps(ours)) == ours  # noqa: S301 - our own bytes
    assert copy.deepcopy(ours) == ours


def test_decoded_envelopes_are_frozen() -> None:
    envelope = CODEC.decode(CODEC.encode(s.envelope_with(h.Continue(reason="x"))))
    with pytest.raises(ValidationError, match="frozen"):
        envelope.message_id = "other"  # type: ignore[misc]
    assert envelope.model_copy(update={"message_id": "m2"}).message_id == "m2"


# -- contract breaks: one value anywhere replaced by any value its Avro type allows ------


def positions(value: Any, schema: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, Any]]:
    """(path, schema) of every value inside a record, as fastavro writes it."""
    yield path, schema
    if isinstance(schema, str) and schema in NAMED:
        schema = NAMED[schema]
    if isinstance(schema, list):
        if isinstance(value, tuple):  # a named record branch
            yield from positions(value[1], value[0], (*path, "|"))
        return
    if not isinstance(schema, dict):
        return
    if schema["type"] == "record":
        for field in schema["fields"]:
            yield from positions(value[field["name"]], field["type"], (*path, field["name"]))
    elif schema["type"] == "array":
        for index, item in enumerate(value):
            yield from positions(item, schema["items"], (*path, index))
    elif schema["type"] == "map":
        for key, item in value.items():
            yield from positions(item, schema["values"], (*path, key))


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if head == "|":
        return (value[0], replaced(value[1], rest, new))
    if isinstance(value, list | tuple):
        return [replaced(v, rest, new) if i == head else v for i, v in enumerate(value)]
    return {k: replaced(v, rest, new) if k == head else v for k, v in value.items()}


@given(s.envelopes, st.data())
def test_compiled_decode_refuses_exactly_what_pydantic_refuses(
    envelope: h.Envelope, data: st.DataObject
) -> None:
    record = to_record(envelope)
    path, schema = data.draw(st.sampled_from(list(positions(record, CODEC.schema))), "where")
    mutated = replaced(record, path, data.draw(s.avro_value(schema, NAMED), "value"))
    encoded = fastavro_bytes(mutated)
    ours, theirs = outcome(CODEC.decode, encoded), outcome(general_decode, encoded)
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] == "refused":
        error = ours[1]
        assert isinstance(error, DecodeError)
        if isinstance(error, ContractError):  # the error names the field that was replaced
            where = ".".join(str(p) for p in path if p != "|")
            assert str(error).startswith(f"envelope breaks the contract: {where}"), error
    else:
        assert ours[1] == theirs[1]


@given(st.integers(10, 400), st.integers(0, 255))
def test_what_the_compiled_decode_accepts_after_a_flip_the_general_one_reads_alike(
    position: int, value: int
) -> None:
    data = bytearray(CODEC.encode(s.envelope_with(h.UserTurn(text="发票", locale="zh-CN"))))
    data[min(position, len(data) - 1)] = value
    ours = outcome(CODEC.decode, bytes(data))
    if ours[0] != "refused":  # stricter is allowed (fastavro reads index -1); looser is not
        assert outcome(general_decode, bytes(data)) == ours


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("message_id",), "", "message_id: should have at least 1 character"),
        (("source",), "Conversation:S2", "source: should match pattern"),
        (("source",), "conversation:S2\n", "source: should match pattern"),
        (("metadata", "attempt"), 0, "metadata.attempt: should be greater than or equal to 1"),
        (
            ("metadata", "retry_policy", "backoff_ms"),
            -1,
            "metadata.retry_policy.backoff_ms: should be greater than or equal to 0",
        ),
        (
            ("payload", "context", "ratio"),
            float("nan"),
            "payload.context.ratio: should be a finite",
        ),
        (("timestamp",), 2**62, "timestamp: timestamp is outside years 1-9999"),
    ],
)
def test_contract_errors_name_the_field(path: tuple[str, ...], value: Any, message: str) -> None:
    record = to_record(s.envelope_with())
    target = record
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ContractError, match=f"^envelope breaks the contract: {message}"):
        CODEC.decode(fastavro_bytes(record))


def test_a_contract_error_inside_an_array_names_the_index() -> None:
    facts = (
        h.MemoryFact(subject="张三", relation="manager_of", object="李四"),
        h.MemoryFact(
            subject="张主管",
            relation="approves",
            object="采购部",
            verified_by=h.Verification(tool="org_tool", verified_at=0),
        ),
    )
    record = to_record(s.envelope_with(h.MemoryContext(facts=facts)))
    record["payload"]["body"][1]["facts"][1]["verified_by"][1]["tool"] = ""
    with pytest.raises(
        ContractError, match=r"payload\.body\.facts\.1\.verified_by\.tool: should have at least 1"
    ):
        CODEC.decode(fastavro_bytes(record))


def test_malformed_bytes_name_what_is_wrong() -> None:
    data = bytearray(CODEC.encode(s.envelope_with(h.Reply(text="ok", stale=True))))
    position = data.index(b"\x04ok") + 7  # text, role, content_type, two empty arrays
    assert data[position] == 1  # stale: True
    data[position] = 7
    with pytest.raises(
        DecodeError, match=r"fingerprint \w+: payload\.body\.stale: boolean byte 7$"
    ):
        CODEC.decode(bytes(data))


def test_a_huge_block_count_is_refused_before_reading() -> None:
    data = CODEC.encode(s.envelope_with(h.Reply(text="ok", choices=("确认",))))
    position = data.index(b"\x04ok") + 5  # text, role, content_type, then the choices block
    assert data[position] == 2  # one item
    forged = data[:position] + b"\xfe\xff\xff\xff\x0f" + data[position + 1 :]
    with pytest.raises(DecodeError, match=r": payload\.body\.choices: block of 2147483647 items"):
        CODEC.decode(forged)


def test_a_truncated_body_names_the_field_it_ends_in() -> None:
    data = CODEC.encode(s.envelope_with(h.Reply(text="请提供发票照片和行程单")))
    cut = data.index("行程单".encode()) + 2
    with pytest.raises(DecodeError, match=r": payload\.body\.text: the body ends early$"):
        CODEC.decode(data[:cut])


def test_an_out_of_range_varint_names_the_field() -> None:
    record = to_record(s.envelope_with(h.ToolResult(tool="ocr_tool", status_code=200)))
    data = fastavro_bytes(record)
    position = data.index(b"\x90\x03")  # 200 as a zigzag varint
    forged = data[:position] + b"\x80\x80\x80\x80\x10" + data[position + 2 :]
    with pytest.raises(
        DecodeError, match=r"payload\.body\.status_code: varint at byte \d+ is outside"
    ):
        CODEC.decode(forged)


def test_a_subclass_of_a_body_model_is_written_as_that_body() -> None:
    class Pause(h.Continue):
        pass

    envelope = s.envelope_with(Pause(reason="等用户上传"))
    data = CODEC.encode(envelope)
    assert data == fastavro_bytes(to_record(envelope))
    assert CODEC.decode(data) == s.envelope_with(h.Continue(reason="等用户上传"))


def test_memoryview_input_decodes() -> None:
    envelope = s.envelope_with(h.UserTurn(text="hi"))
    assert CODEC.decode(memoryview(CODEC.encode(envelope))) == envelope  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("timestamp", "yesterday"),
        ("message_id", 42),
        ("metadata", {"priority": "high"}),
    ],
)
def test_encoding_a_model_that_skipped_validation_is_an_encode_error(
    field: str, value: Any
) -> None:
    fields = dict(s.envelope_with())
    fields[field] = value
    with pytest.raises(EncodeError, match="cannot write envelope"):
        CODEC.encode(h.Envelope.model_construct(**fields))


def test_an_int_outside_the_avro_range_is_an_encode_error() -> None:
    policy = h.RetryPolicy.model_construct(max_attempts=2**40, backoff_ms=1)
    metadata = h.Metadata.model_construct(retry_policy=policy)
    fields = dict(s.envelope_with())
    fields["metadata"] = metadata
    with pytest.raises(EncodeError, match="outside the Avro int range"):
        CODEC.encode(h.Envelope.model_construct(**fields))


# -- what the compiler refuses: the codec then reads with fastavro and pydantic ----------


def _record_schema(fields: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "record", "name": "Probe", "namespace": "test", "fields": fields}


class Probe(Record):
    avro_name: ClassVar[str] = "test.Probe"
    count: int


class ValidatedProbe(Record):
    avro_name: ClassVar[str] = "test.Probe"
    count: int

    @field_validator("count")
    @classmethod
    def _even(cls, value: int) -> int:
        return value


class MultipleProbe(Record):
    avro_name: ClassVar[str] = "test.Probe"
    count: Annotated[int, Field(multiple_of=2)]


class LooserLaterProbe(Record):
    avro_name: ClassVar[str] = "test.Probe"
    count: Annotated[Annotated[int, Field(ge=5)], Field(ge=1)]  # pydantic keeps ge=1


class ListLengthProbe(Record):
    avro_name: ClassVar[str] = "test.Probe"
    count: Annotated[tuple[str, ...], Field(max_length=1)]


class LaxUnionProbe(Record):
    avro_name: ClassVar[str] = "test.Probe"
    count: int | float


class TwoRecordsProbe(Record):
    avro_name: ClassVar[str] = "test.Probe"
    count: h.Continue | h.Verification


class IntKeysProbe(Record):
    avro_name: ClassVar[str] = "test.Probe"
    count: dict[int, str]


class ConfiguredProbe(Record):
    model_config = ConfigDict(str_strip_whitespace=True)
    avro_name: ClassVar[str] = "test.Probe"
    count: str


class AliasProbe(Record):
    avro_name: ClassVar[str] = "test.Probe"
    count: int = Field(alias="Count")


class SerializedProbe(Record):
    avro_name: ClassVar[str] = "test.Probe"
    count: str

    @field_serializer("count")
    def _upper(self, value: str) -> str:
        return value.upper()


class DecimalBoundProbe(Record):
    avro_name: ClassVar[str] = "test.Probe"
    count: Annotated[float, Field(le=Decimal("0.5"))]


def test_a_matching_model_compiles() -> None:
    compiled = compile_codec(_record_schema([{"name": "count", "type": "long"}]), Probe)
    out = bytearray()
    compiled.encode(out, Probe(count=-3))
    assert bytes(out) == b"\x05"
    assert compiled.decode(b"\x05", 0) == (Probe(count=-3), 1)


@pytest.mark.parametrize(
    ("fields", "model", "cause"),
    [
        ([{"name": "count", "type": "long"}], ValidatedProbe, "validators"),
        ([{"name": "count", "type": "long"}], MultipleProbe, "unknown constraint"),
        ([{"name": "total", "type": "long"}], Probe, "fields of the schema and of Probe differ"),
        ([{"name": "count", "type": "string"}], Probe, "Avro string is paired with"),
        ([{"name": "count", "type": "bytes"}], Probe, "Avro type bytes"),
        ([{"name": "count", "type": "float"}], Probe, "Avro type float"),
        ([{"name": "count", "type": "long"}], LooserLaterProbe, "a looser ge after a stricter"),
        (
            [{"name": "count", "type": {"type": "array", "items": "string"}}],
            ListLengthProbe,
            "constraints on a array",
        ),
        ([{"name": "count", "type": ["long", "double"]}], LaxUnionProbe, "not strict"),
        (
            [
                {
                    "name": "count",
                    "type": [NAMED["hermes.mcp.Continue"], NAMED["hermes.mcp.Verification"]],
                }
            ],
            TwoRecordsProbe,
            "several records in a union without the named body",
        ),
        (
            [{"name": "count", "type": {"type": "map", "values": "string"}}],
            IntKeysProbe,
            "map keys are paired with",
        ),
        ([{"name": "count", "type": "string"}], ConfiguredProbe, "model configuration"),
        ([{"name": "count", "type": "long"}], AliasProbe, "aliases"),
        ([{"name": "count", "type": "string"}], SerializedProbe, "serializers"),
        ([{"name": "count", "type": "double"}], DecimalBoundProbe, "not numbers"),
    ],
)
def test_the_compiler_refuses_what_it_cannot_reproduce(
    fields: list[dict[str, Any]], model: type[Record], cause: str
) -> None:
    with pytest.raises(CompileError, match=cause):
        compile_codec(_record_schema(fields), model)


def test_a_schema_the_models_do_not_mirror_falls_back_to_fastavro(tmp_path: Any) -> None:
    from tests.unit.test_codec import _v2_schemas

    v2 = Codec(_v2_schemas(tmp_path))
    assert not v2.compiled
    assert v2.decode_record(CODEC.encode(s.envelope_with()))["tenant"] == "default"


def test_names_that_are_not_avro_names_are_not_compiled() -> None:
    schema = _record_schema([{"name": "count", "type": "long"}])
    schema["name"] = "Probe\nimport os"
    with pytest.raises(CompileError, match="not an Avro full name"):
        compile_codec(schema, Probe)


def test_a_pattern_is_matched_as_pydantic_matches_it() -> None:
    """Rust regex semantics (no backtracking, `$` at the very end), from pydantic-core."""

    class Pattern(Record):
        avro_name: ClassVar[str] = "test.Probe"
        count: Annotated[str, Field(pattern=r"^(a+)+$")]

    compiled = compile_codec(_record_schema([{"name": "count", "type": "string"}]), Pattern)
    hostile = "a" * 40 + "!"  # exponential for a backtracking engine
    out = bytearray()
    compiled.encode(out, Pattern.model_construct(count=hostile))
    with pytest.raises(Broken, match="should match pattern"):
        compiled.decode(bytes(out), 0)
    out = bytearray()
    compiled.encode(out, Pattern.model_construct(count="aaa\n"))
    with pytest.raises(Broken, match="should match pattern"):
        compiled.decode(bytes(out), 0)


def test_a_codec_that_cannot_compile_says_so_and_falls_back(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any) -> Any:
        raise RuntimeError("a bug in the generator")

    monkeypatch.setattr("hermesbus.codec._codec.compile_codec", refuse)
    with caplog.at_level(logging.WARNING, logger="hermesbus.codec._codec"):
        fallback = Codec()
    assert not fallback.compiled
    assert "a bug in the generator" in caplog.text
    envelope = s.envelope_with(h.UserTurn(text="hi"))
    assert fallback.decode(fallback.encode(envelope)) == envelope


# -- the wire primitives behind the generated code's slow paths --------------------------


def _fastavro_long(n: int, kind: str = "long") -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(kind), n)
    return buffer.getvalue()


@given(s.INT64)
def test_long_varints_are_fastavro_s(n: int) -> None:
    data = _fastavro_long(n)
    assert _wire.long_bytes(n) == data
    assert _wire.read_long(data + b"\x00", 0) == (n, len(data))


@given(s.INT32)
def test_int_varints_are_fastavro_s(n: int) -> None:
    data = _fastavro_long(n, "int")
    assert _wire.long_bytes(n, 32) == data
    assert _wire.read_int(data, 0) == (n, len(data))


@given(st.binary(max_size=12))
def test_varint_readers_fail_only_as_truncated_or_malformed(data: bytes) -> None:
    for read in (_wire.read_long, _wire.read_int):
        try:
            read(data, 0)
        except (IndexError, _wire.Malformed):
            pass


def test_varints_past_64_bits_are_malformed() -> None:
    with pytest.raises(_wire.Malformed, match="runs past 10 bytes"):
        _wire.read_long(b"\x80" * 10 + b"\x00", 0)
    with pytest.raises(_wire.Malformed, match="outside the Avro long range"):
        _wire.read_long(b"\xff" * 9 + b"\x7f", 0)
    with pytest.raises(_wire.Malformed, match="outside the Avro int range"):
        _wire.read_int(b"\x80\x80\x80\x80\x10", 0)

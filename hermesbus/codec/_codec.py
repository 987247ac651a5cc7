"""The envelope codec: Avro bodies in single-object or Confluent framing."""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from http import HTTPStatus
from pathlib import Path
from typing import Any, Protocol

import fastavro

from hermesbus.codec.compat import can_read
from hermesbus.codec.frozen import History
from hermesbus.codec.schemaset import SchemaSet, fingerprint, parse
from hermesbus.contract.envelope import Envelope
from hermesbus.errors import ContractError, DecodeError, EncodeError, HermesError, RegistryError
from hermesbus.schemas import ENVELOPE, SCHEMAS_DIR

from . import _wire
from ._compile import Compiled, CompileError, compile_codec
from ._convert import to_model, to_record
from ._framing import SINGLE_OBJECT_MAGIC, Framing, confluent_header, split

__all__ = ["UNKNOWN_ID_TTL_S", "Codec", "SchemaRegistry", "WriterSchema"]

logger = logging.getLogger(__name__)

_Header = tuple[Framing, bytes | int]
"""The framing of a message and its fingerprint or schema id."""

UNKNOWN_ID_TTL_S = 30.0
"""How long a schema id the registry does not know is refused without asking again."""


class SchemaRegistry(Protocol):
    """What the codec needs of a schema registry (SchemaRegistryClient is one)."""

    def register(self, subject: str, schema: dict[str, Any]) -> int: ...

    def schema(self, schema_id: int) -> dict[str, Any]: ...


class WriterSchema:
    """A schema known to the codec: its JSON and fastavro's parsed form."""

    __slots__ = ("parsed", "schema")

    def __init__(self, schema: dict[str, Any], where: str, parsed: Any = None) -> None:
        self.schema = schema
        self.parsed = parse(schema, where) if parsed is None else parsed


class Codec:
    """Encodes envelopes and decodes them back, resolving writer schemas by fingerprint or id.

    Every schema is parsed once, when the codec is built or first meets a schema id.
    The current schema is also compiled with the models (``_compile``): envelopes are
    written and read by generated code, constraints checked inline. Data of any other
    writer schema, or read with another reader schema, goes through fastavro and pydantic
    validation; so does everything when the schema and the models do not pair exactly,
    or with ``compiled=False`` (``compiled`` then reads False).
    """

    def __init__(
        self,
        schemas_dir: Path = SCHEMAS_DIR,
        *,
        registry: SchemaRegistry | None = None,
        name: str = ENVELOPE,
        compiled: bool = True,
    ) -> None:
        schemas = SchemaSet.from_dir(schemas_dir)
        self.name = name
        self.schema = schemas.expanded(name)
        self.fingerprint = fingerprint(self.schema)
        self._current = WriterSchema(self.schema, name, schemas.parsed(name))
        self._by_fingerprint = {self.fingerprint: self._current}
        for version in History(schemas_dir / "history").versions(name):
            frozen = version.load()
            key = fingerprint(frozen)
            if key not in self._by_fingerprint:
                self._by_fingerprint[key] = WriterSchema(frozen, str(version.path))
        self._header = SINGLE_OBJECT_MAGIC + self.fingerprint
        self._registry = registry
        self._registered_id: int | None = None
        self._by_id: dict[int, WriterSchema] = {}
        self._unknown_ids: dict[int, float] = {}
        self._readers: dict[str, WriterSchema] = {}
        self._last_reader: tuple[object, WriterSchema] | None = None
        self._resolvable: set[tuple[int, int]] = set()
        self._lock = threading.Lock()
        self._compiled = _compile_or_none(self.schema, name) if compiled else None

    @property
    def compiled(self) -> bool:
        """Whether envelopes of the current schema go through the generated codec."""
        return self._compiled is not None

    def encode(self, envelope: Envelope, framing: Framing = "single-object") -> bytes:
        """Envelope -> bytes in the given framing (Confluent needs a registry)."""
        if framing == "single-object":
            header = self._header
        elif framing == "confluent":
            header = confluent_header(self._schema_id())
        else:
            raise EncodeError(f"unknown framing {framing!r}: use 'single-object' or 'confluent'")
        try:
            if self._compiled is not None:
                out = bytearray(header)
                self._compiled.encode(out, envelope)
                return bytes(out)
            buffer = io.BytesIO()
            buffer.write(header)
            fastavro.schemaless_writer(buffer, self._current.parsed, to_record(envelope))
        except Exception as exc:
            raise EncodeError(f"cannot write envelope with {self.name}: {exc}") from exc
        return buffer.getvalue()

    def decode(self, data: bytes, reader_schema: dict[str, Any] | str | None = None) -> Envelope:
        """Bytes in either framing -> Envelope; every failure is a DecodeError."""
        if self._compiled is None or reader_schema is not None:
            return to_model(self.decode_record(data, reader_schema))
        if type(data) is not bytes:
            data = bytes(data)
        writer, offset, header = self._resolve(data)
        if writer is not self._current:  # older data: fastavro resolves it to the current one
            return to_model(self._read_record(data, writer, offset, header, None))
        try:
            envelope, end = self._compiled.decode(data, offset)
        except _wire.Broken as exc:
            raise ContractError(f"envelope breaks the contract: {exc}") from exc
        except _wire.Malformed as exc:  # the generated code turns short bodies into these too
            raise DecodeError(
                f"body does not decode with writer schema {_label(*header)}: {exc}"
            ) from exc
        if end != len(data):
            raise DecodeError(
                f"{len(data) - end} bytes left after the record written with {_label(*header)}"
            )
        return envelope  # type: ignore[no-any-return]

    def decode_record(
        self, data: bytes, reader_schema: dict[str, Any] | str | None = None
    ) -> dict[str, Any]:
        """Bytes -> the Avro record as read with ``reader_schema`` (default: the current one)."""
        writer, offset, header = self._resolve(data)
        return self._read_record(data, writer, offset, header, reader_schema)

    def _resolve(self, data: bytes) -> tuple[WriterSchema, int, _Header]:
        """The writer schema named by the framing header, where the body starts, the header."""
        framing, key, offset = split(data)
        if framing == "single-object":
            return self._writer_by_fingerprint(key), offset, (framing, key)
        return self._writer_by_id(key), offset, (framing, key)

    def _read_record(
        self,
        data: bytes,
        writer: WriterSchema,
        offset: int,
        header: _Header,
        reader_schema: dict[str, Any] | str | None,
    ) -> dict[str, Any]:
        """fastavro reads the body, resolved to ``reader_schema`` or the current schema."""
        reader = self._reader(reader_schema)
        if reader is None and writer is not self._current:
            reader = self._current  # older data is resolved to the current schema
        if reader is not None:
            self._check_resolvable(reader, writer)
        stream = io.BytesIO(data)
        stream.seek(offset)
        try:
            record = fastavro.schemaless_reader(
                stream,
                writer.parsed,
                reader.parsed if reader is not None else None,
                return_record_name=True,
                return_record_name_override=True,
            )
        except Exception as exc:
            raise DecodeError(
                f"body does not decode with writer schema {_label(*header)}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        trailing = len(data) - stream.tell()
        if trailing:
            raise DecodeError(
                f"{trailing} bytes left after the record written with {_label(*header)}"
            )
        if not isinstance(record, dict):
            raise DecodeError(f"decoded a {type(record).__name__}, not a record")
        return record

    def writer_schema(self, data: bytes) -> dict[str, Any]:
        """The schema ``data`` was written with (by its fingerprint or registry id), as
        JSON: what someone needs to read it without this codec's schemas or registry."""
        return self._resolve(data)[0].schema

    def learn(self, schema: dict[str, Any], where: str) -> None:
        """Know ``schema`` as a writer schema by its fingerprint (e.g. one an exported
        bundle carries, written by another version of hermesbus)."""
        key = fingerprint(schema)
        if key not in self._by_fingerprint:
            with self._lock:
                self._by_fingerprint[key] = WriterSchema(schema, where)

    def _writer_by_fingerprint(self, key: bytes | int) -> WriterSchema:
        writer = self._by_fingerprint.get(key) if isinstance(key, bytes) else None
        if writer is None:
            raise DecodeError(
                f"unknown writer schema fingerprint {_label('single-object', key)}: "
                f"not {self.name} nor any version in schemas/history"
            )
        return writer

    def _writer_by_id(self, key: bytes | int) -> WriterSchema:
        """The writer schema of a Confluent id; an outage of the registry is a RegistryError.

        Only a registry that answers "no such id" (404) makes the bytes undecodable; that
        answer is remembered for a while so a burst of such messages costs one request.
        """
        if not isinstance(key, int):
            raise DecodeError("a Confluent header carries an integer schema id")
        writer = self._by_id.get(key)
        if writer is not None:
            return writer
        if self._registry is None:
            raise DecodeError(
                f"schema id {key} needs a schema registry: set HERMES_SCHEMA_REGISTRY_URL"
            )
        refused_at = self._unknown_ids.get(key)
        if refused_at is not None and time.monotonic() - refused_at < UNKNOWN_ID_TTL_S:
            raise DecodeError(f"unknown schema id {key}: the registry has no such id")
        try:
            schema = self._registry.schema(key)
        except RegistryError as exc:
            if exc.status_code != HTTPStatus.NOT_FOUND:
                raise  # the registry is down or refuses us: the bytes may be fine
            self._unknown_ids[key] = time.monotonic()
            raise DecodeError(f"unknown schema id {key}: {exc}") from exc
        try:  # a schema we ship is used as is: same fingerprint, no resolution needed
            writer = self._by_fingerprint.get(fingerprint(schema)) or WriterSchema(
                schema, f"registry id {key}"
            )
        except HermesError as exc:
            raise DecodeError(f"schema id {key} is not a valid Avro schema: {exc}") from exc
        with self._lock:
            self._by_id[key] = writer
        return writer

    def _reader(self, reader_schema: dict[str, Any] | str | None) -> WriterSchema | None:
        """The parsed reader schema; the same object passed again costs one identity check."""
        if reader_schema is None:
            return None
        last = self._last_reader
        if last is not None and last[0] is reader_schema:
            return last[1]
        text = (
            reader_schema
            if isinstance(reader_schema, str)
            else json.dumps(reader_schema, sort_keys=True)
        )
        reader = self._readers.get(text)
        if reader is None:
            try:
                schema = json.loads(text) if isinstance(reader_schema, str) else reader_schema
                reader = WriterSchema(schema, "reader schema")
            except (HermesError, json.JSONDecodeError) as exc:
                raise DecodeError(f"unusable reader schema: {exc}") from exc
            with self._lock:
                self._readers[text] = reader
        self._last_reader = (reader_schema, reader)
        return reader

    def _check_resolvable(self, reader: WriterSchema, writer: WriterSchema) -> None:
        pair = (id(reader), id(writer))
        if pair in self._resolvable:
            return
        try:
            problems = can_read(reader.schema, writer.schema)
        except HermesError as exc:
            raise DecodeError(f"reader schema cannot be resolved: {exc}") from exc
        if problems:
            raise DecodeError(
                "reader schema cannot read the writer's data: "
                + "; ".join(str(p) for p in problems[:3])
            )
        with self._lock:
            self._resolvable.add(pair)

    def _schema_id(self) -> int:
        if self._registered_id is None:
            if self._registry is None:
                raise EncodeError(
                    "Confluent framing needs a schema registry: set HERMES_SCHEMA_REGISTRY_URL"
                )
            try:
                schema_id = self._registry.register(self.name, self.schema)
            except RegistryError as exc:
                if exc.outage:
                    raise  # the registry is away or busy: held in place, never an encode error
                raise EncodeError(f"cannot register {self.name}: {exc}") from exc
            with self._lock:
                self._by_id[schema_id] = self._current  # our own messages decode at once
            self._registered_id = schema_id
        return self._registered_id


def _compile_or_none(schema: dict[str, Any], name: str) -> Compiled | None:
    if name != Envelope.avro_name:
        return None
    try:
        return compile_codec(schema, Envelope)
    except CompileError as exc:  # a schema that the models do not mirror, e.g. a newer one
        logger.info("codec: %s is not compiled, fastavro and pydantic read it: %s", name, exc)
    except Exception:  # a bug in the generator must cost speed, not the codec
        logger.warning(
            "codec: compiling %s failed; fastavro and pydantic read it", name, exc_info=True
        )
    return None


def _label(framing: str, key: bytes | int) -> str:
    if isinstance(key, bytes):
        return f"fingerprint {key.hex()}"
    return f"id {key}"

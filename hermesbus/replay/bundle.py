"""Exported bundles: one session's records, the schemas to read them and its index documents.

``hermesbus export SESSION -o bundle.tar.gz`` writes one; ``hermesbus replay --bundle
bundle.tar.gz --shadow`` replays it on a machine with no broker, no registry and no
index. A bundle is a gzipped tar of four JSON files:

* ``manifest.json``: the format and its version, the sessions, where the records were
  read, the topic prefix, counts;
* ``records.jsonl``: one record per line as the broker had it: topic, partition, offset,
  timestamp, key, headers and value (bytes in base64), in log order;
* ``schemas.json``: the writer schema of every record, by single-object fingerprint
  (hex) and by schema-registry id, so the bytes decode anywhere;
* ``documents.jsonl``: the trace index's documents of the records (when an index had them);
* ``flows.json`` (from version 2): every registered version of the flows the session ran,
  as the registry held them (text and the time each was registered), so its replay runs
  them where there is no registry.

Besides the session's own records, a bundle holds the memory topic's records of the
same user up to the session's end: memory's stores span sessions, and a replay of the
session rebuilds them from those. Other users' records are never exported.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import tarfile
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final, Protocol

from hermesbus.codec import Codec, default_codec
from hermesbus.errors import ConfigError, HermesError, SettingError
from hermesbus.replay.shadow import Recording, recording_of
from hermesbus.trace.index import ArchivedRecord, Document

__all__ = [
    "FORMAT",
    "LIMITS",
    "VERSION",
    "Bundle",
    "Limits",
    "read_bundle",
    "same_user",
    "write_bundle",
]

FORMAT: Final = "hermesbus-bundle"
VERSION: Final = 2
READS: Final = frozenset({1, VERSION})
"""The bundle versions this hermesbus reads (version 1 has no ``flows.json``)."""
_MEMBERS: Final = ("manifest.json", "records.jsonl", "schemas.json", "documents.jsonl")
_FLOWS: Final = "flows.json"


@dataclass(frozen=True)
class Limits:
    """How much a bundle may hold once decompressed, checked while it is decompressed: a
    bomb is refused as soon as it passes one, having held at most a chunk and a line of
    what does not fit (a member's size is checked from its header, before it is read)."""

    total: int = 256 << 20
    """Bytes of the whole tar (headers and members), decompressed."""
    members: Mapping[str, int] = field(
        default_factory=lambda: {
            "manifest.json": 1 << 20,
            "records.jsonl": 256 << 20,
            "schemas.json": 16 << 20,
            "documents.jsonl": 256 << 20,
            _FLOWS: 16 << 20,
        }
    )
    """Bytes of each member."""
    line: int = 8 << 20
    """Bytes of one line of ``records.jsonl`` or ``documents.jsonl`` (a record's value
    is at most about 1 MB on a default broker: 1.4 MB in base64)."""
    lines: int = 200_000
    """Lines of ``records.jsonl`` or ``documents.jsonl`` (blank ones too)."""
    header: int = 1 << 20
    """Bytes of one member's tar headers (pax, long names) before its data."""


LIMITS: Final = Limits()
_CHUNK: Final = 1 << 20
"""Bytes read from a member at a time."""


@dataclass(frozen=True)
class Bundle:
    """A bundle read back: its manifest, records, documents and a codec that reads them."""

    manifest: dict[str, Any]
    records: tuple[ArchivedRecord, ...]
    documents: tuple[Document, ...]
    codec: Codec
    path: Path
    flows: tuple[dict[str, Any], ...] = ()
    """The flow versions it carries: ``flow``, ``version``, ``registered_at_ms``, ``text``
    (read as specs by whoever runs them)."""

    @property
    def sessions(self) -> list[str]:
        return list(self.manifest["sessions"])

    @property
    def prefix(self) -> str:
        return str(self.manifest.get("prefix", ""))

    def recording(self) -> Recording:
        where = f"bundle {self.path} (exported from {self.manifest.get('source', '?')})"
        return recording_of(self.records, where, prefix=self.prefix, codec=self.codec)


def same_user(
    records: Iterable[ArchivedRecord],
    sessions: Sequence[str],
    topic: str,
    codec: Codec | None = None,
) -> list[ArchivedRecord]:
    """``records`` without the records of ``topic`` (the memory topic) that belong to
    other users or come after the sessions' last record: what a bundle may carry."""
    codec = codec or default_codec()
    kept, users, last_ms, shared = [], set(), 0, []
    for record in records:
        envelope = _decoded(codec, record)
        mine = envelope is not None and envelope.session_id in sessions
        if mine and envelope is not None:
            users.add(envelope.user_id)
            last_ms = max(last_ms, record.timestamp_ms)
        if record.topic == topic and not mine:
            shared.append((record, envelope))
        else:
            kept.append(record)
    for record, envelope in shared:
        if envelope is not None and envelope.user_id in users and record.timestamp_ms <= last_ms:
            kept.append(record)
    return kept


def _decoded(codec: Codec, record: ArchivedRecord) -> Any:
    try:
        return codec.decode(record.value)
    except HermesError:
        return None


def write_bundle(
    path: Path,
    records: Sequence[ArchivedRecord],
    *,
    sessions: Sequence[str],
    source: str,
    prefix: str = "",
    documents: Sequence[Document] = (),
    codec: Codec | None = None,
    flows: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Write the bundle to ``path`` (a temporary file renamed into place); its manifest.
    ``flows``: the flow versions the sessions ran (see :attr:`Bundle.flows`)."""
    codec = codec or default_codec()
    ordered = sorted(records, key=lambda r: (r.timestamp_ms, r.topic, r.partition, r.offset))
    schemas: dict[str, dict[str, Any]] = {"single_object": {}, "confluent": {}}
    for record in ordered:
        _remember_schema(codec, record.value, schemas)
    exported_ms = int(time.time() * 1000)  # when, for people; replay never reads it
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION if flows else 1,  # what older readers read, when it can be
        "sessions": list(sessions),
        "source": source,
        "prefix": prefix,
        "records": len(ordered),
        "documents": len(documents),
        "flows": [f"{f['flow']} v{f['version']}" for f in flows],
        "exported_at_ms": exported_ms,
    }
    members = {
        "manifest.json": json.dumps(manifest, ensure_ascii=False, indent=2).encode(),
        "records.jsonl": b"".join(_record_line(r) for r in ordered),
        "schemas.json": json.dumps(schemas, sort_keys=True).encode(),
        "documents.jsonl": b"".join(
            json.dumps(doc, ensure_ascii=False, sort_keys=True).encode() + b"\n"
            for doc in documents
        ),
        _FLOWS: json.dumps(list(flows), ensure_ascii=False, sort_keys=True).encode(),
    }
    partial = path.with_name(path.name + ".partial")
    with tarfile.open(partial, "w:gz") as tar:
        for name in (*_MEMBERS, _FLOWS) if flows else _MEMBERS:
            data = members[name]
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), exported_ms // 1000, 0o644
            tar.addfile(info, io.BytesIO(data))
    partial.replace(path)
    return manifest


def _remember_schema(codec: Codec, value: bytes, schemas: dict[str, dict[str, Any]]) -> None:
    if not value:
        return
    try:
        schema = codec.writer_schema(value)
    except HermesError:
        return  # undecodable then too: its bytes travel, there is no schema to add
    if value[:1] == b"\x00":
        schemas["confluent"][str(int.from_bytes(value[1:5], "big", signed=True))] = schema
    else:
        schemas["single_object"][value[2:10].hex()] = schema


def _record_line(record: ArchivedRecord) -> bytes:
    line = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp_ms": record.timestamp_ms,
        "key": _b64(record.key) if record.key is not None else None,
        "headers": [[k, _b64(v)] for k, v in record.headers],
        "value": _b64(record.value),
    }
    return json.dumps(line).encode() + b"\n"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def read_bundle(path: Path, limits: Limits = LIMITS) -> Bundle:
    """Read a bundle within ``limits``; a file that is not one, or one that would not fit
    (a gzip bomb), is a SettingError saying what is wrong (a bad ``--bundle``: exit 2)."""
    try:
        with gzip.open(path, "rb") as raw:
            stream = _Capped(raw, limits, path)
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                read = _Read(path, limits)
                for info in tar:
                    read.member(tar, info, stream)
    except FileNotFoundError:
        raise SettingError(f"no bundle at {path}") from None
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise SettingError(
            f"{path} is not a hermesbus bundle (a .tar.gz from `hermesbus export`): {exc}"
        ) from None
    return read.bundle()


def _mib(size: int) -> str:
    """``256 MiB``; under a MiB, in bytes."""
    return f"{size / (1 << 20):g} MiB" if size >= 1 << 20 else f"{size:,} bytes"


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class _Capped(io.RawIOBase):
    """The decompressed tar stream, refusing to go past ``limits.total`` bytes, or past
    ``limits.header`` bytes of headers before a member's data (a pax header can say it is
    gigabytes long, and tarfile reads it whole)."""

    def __init__(self, raw: _Readable, limits: Limits, path: Path) -> None:
        super().__init__()
        self._raw, self._limits, self._path = raw, limits, path
        self._read = 0
        self._headers = 0
        self.in_data = False

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            size = self._limits.total + 1 - self._read
        data = self._raw.read(min(size, self._limits.total + 1 - self._read))
        self._read += len(data)
        if self._read > self._limits.total:
            raise _too_big(self._path, f"more than {_mib(self._limits.total)}")
        if not self.in_data:
            self._headers += len(data)
            if self._headers > self._limits.header:
                raise _too_big(self._path, f"a tar header of more than {_mib(self._limits.header)}")
        return data

    def data(self) -> None:
        """A member's data is read from now on (until :meth:`headers`)."""
        self.in_data, self._headers = True, 0

    def headers(self) -> None:
        self.in_data = False


def _too_big(path: Path, what: str) -> SettingError:
    return SettingError(
        f"{path}: refused, it holds {what} once decompressed (a gzip bomb, or not one "
        "session's bundle)"
    )


class _Read:
    """A bundle's members as they come out of the tar stream, each parsed as it is read."""

    def __init__(self, path: Path, limits: Limits) -> None:
        self._path, self._limits = path, limits
        self._parsed: dict[str, Any] = {}

    def member(self, tar: tarfile.TarFile, info: tarfile.TarInfo, stream: _Capped) -> None:
        name, path = info.name, self._path
        if name not in (*_MEMBERS, _FLOWS) or name in self._parsed:
            held = ", ".join((*_MEMBERS, _FLOWS))
            why = "twice" if name in self._parsed else "a bundle holds only " + held
            raise SettingError(f"{path}: not a hermesbus bundle, it holds {name!r} ({why})")
        cap = self._limits.members.get(name, self._limits.line)
        if not info.isfile() or info.issparse():
            raise SettingError(f"{path}: {name} is not a plain file")
        if info.size > cap:
            raise _too_big(path, f"{name} of {info.size:,} bytes (at most {_mib(cap)})")
        handle = tar.extractfile(info)
        if handle is None:
            raise SettingError(f"{path}: {name} cannot be read")
        stream.data()
        try:
            self._parsed[name] = self._parse(name, handle)
        finally:
            stream.headers()

    def _parse(self, name: str, handle: IO[bytes]) -> Any:
        try:
            if name.endswith(".jsonl"):
                parse = _record if name == "records.jsonl" else _document
                return tuple(parse(json.loads(line)) for line in self._lines(name, handle))
            return json.loads(handle.read())
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise SettingError(
                f"{self._path}: a damaged bundle ({type(exc).__name__}: {exc})"
            ) from None

    def _lines(self, name: str, handle: IO[bytes]) -> Iterator[bytes]:
        """The member's non-blank lines, read a chunk at a time: never more than a chunk
        and a line in memory, however many lines (a bomb of newlines) or long."""
        limits, carry, count = self._limits, b"", 0
        while chunk := handle.read(_CHUNK):
            parts = (carry + chunk).split(b"\n")
            carry = parts.pop()
            count += len(parts)
            if count > limits.lines:
                raise _too_big(self._path, f"{name} of more than {limits.lines:,} lines")
            if len(carry) > limits.line or any(len(p) > limits.line for p in parts):
                raise _too_big(self._path, f"{name} with a line longer than {_mib(limits.line)}")
            yield from filter(None, parts)
        if carry:
            yield carry

    def bundle(self) -> Bundle:
        path = self._path
        for name in _MEMBERS:
            if name not in self._parsed:
                raise SettingError(f"{path}: not a hermesbus bundle, it has no {name}")
        parsed = self._parsed
        _check_manifest(parsed["manifest.json"], path)
        try:
            codec = _codec(parsed["schemas.json"], path)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SettingError(f"{path}: a damaged bundle ({type(exc).__name__}: {exc})") from None
        flows = parsed.get(_FLOWS, [])
        if not isinstance(flows, list) or not all(isinstance(f, dict) for f in flows):
            raise SettingError(f"{path}: a damaged bundle ({_FLOWS} is not a list of objects)")
        return Bundle(
            parsed["manifest.json"],
            parsed["records.jsonl"],
            parsed["documents.jsonl"],
            codec,
            path,
            tuple(flows),
        )


def _check_manifest(manifest: Any, path: Path) -> None:
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise SettingError(f"{path}: manifest.json is not a {FORMAT} manifest")
    if manifest.get("version") not in READS:
        raise SettingError(
            f"{path}: bundle version {manifest.get('version')!r}; this hermesbus reads "
            f"versions {', '.join(str(v) for v in sorted(READS))}"
        )


def _document(value: Any) -> Document:
    if not isinstance(value, dict):
        raise TypeError(f"a document is a JSON object, not {type(value).__name__}")
    return value


def _record(line: dict[str, Any]) -> ArchivedRecord:
    key = line["key"]
    return ArchivedRecord(
        topic=str(line["topic"]),
        partition=int(line["partition"]),
        offset=int(line["offset"]),
        timestamp_ms=int(line["timestamp_ms"]),
        key=base64.b64decode(key) if key is not None else None,
        value=base64.b64decode(line["value"]),
        headers=tuple((str(k), base64.b64decode(v)) for k, v in line["headers"]),
    )


class _BundleRegistry:
    """The registry ids a bundle carries, read-only: nothing is asked of a real registry."""

    def __init__(self, schemas: dict[str, dict[str, Any]], path: Path) -> None:
        self._schemas = {int(k): v for k, v in schemas.items()}
        self._path = path

    def register(self, subject: str, schema: dict[str, Any]) -> int:
        raise ConfigError(f"a bundle's schemas are read-only ({self._path})")

    def schema(self, schema_id: int) -> dict[str, Any]:
        found = self._schemas.get(schema_id)
        if found is None:
            raise ConfigError(f"{self._path}: schema id {schema_id} is not in the bundle")
        return found


def _codec(schemas: dict[str, Any], path: Path) -> Codec:
    codec = Codec(registry=_BundleRegistry(schemas.get("confluent", {}), path))
    for fingerprint, schema in schemas.get("single_object", {}).items():
        codec.learn(schema, f"{path} ({fingerprint})")
    return codec

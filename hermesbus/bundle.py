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
* ``documents.jsonl``: the trace index's documents of the records (when an index had them).

Besides the session's own records, a bundle holds the memory topic's records of the
same user up to the session's end: memory's stores span sessions, and a replay of the
session rebuilds them from those. Other users' records are never exported.
"""

from __future__ import annotations

import base64
import io
import json
import tarfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from hermesbus.codec import Codec, default_codec
from hermesbus.errors import ConfigError, HermesError
from hermesbus.index import ArchivedRecord, Document
from hermesbus.replay import Recording, recording_of

__all__ = ["FORMAT", "VERSION", "Bundle", "read_bundle", "same_user", "write_bundle"]

FORMAT: Final = "hermesbus-bundle"
VERSION: Final = 1
_MEMBERS: Final = ("manifest.json", "records.jsonl", "schemas.json", "documents.jsonl")
_MAX_MEMBER: Final = 1 << 30
"""A member larger than 1 GiB is refused (a bundle is one session)."""


@dataclass(frozen=True)
class Bundle:
    """A bundle read back: its manifest, records, documents and a codec that reads them."""

    manifest: dict[str, Any]
    records: tuple[ArchivedRecord, ...]
    documents: tuple[Document, ...]
    codec: Codec
    path: Path

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
) -> dict[str, Any]:
    """Write the bundle to ``path`` (a temporary file renamed into place); its manifest."""
    codec = codec or default_codec()
    ordered = sorted(records, key=lambda r: (r.timestamp_ms, r.topic, r.partition, r.offset))
    schemas: dict[str, dict[str, Any]] = {"single_object": {}, "confluent": {}}
    for record in ordered:
        _remember_schema(codec, record.value, schemas)
    exported_ms = int(time.time() * 1000)  # when, for people; replay never reads it
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "sessions": list(sessions),
        "source": source,
        "prefix": prefix,
        "records": len(ordered),
        "documents": len(documents),
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
    }
    partial = path.with_name(path.name + ".partial")
    with tarfile.open(partial, "w:gz") as tar:
        for name in _MEMBERS:
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


def read_bundle(path: Path) -> Bundle:
    """Read a bundle; a file that is not one is a ConfigError saying what is wrong."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            members = {name: _member(tar, name, path) for name in _MEMBERS}
    except FileNotFoundError:
        raise ConfigError(f"no bundle at {path}") from None
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ConfigError(
            f"{path} is not a hermesbus bundle (a .tar.gz from `hermesbus export`): {exc}"
        ) from None
    try:
        manifest = json.loads(members["manifest.json"])
        if manifest.get("format") != FORMAT:
            raise ConfigError(f"{path}: manifest.json is not a {FORMAT} manifest")
        if manifest.get("version") != VERSION:
            raise ConfigError(
                f"{path}: bundle version {manifest.get('version')!r}; this hermesbus reads "
                f"version {VERSION}"
            )
        records = tuple(
            _record(json.loads(line)) for line in members["records.jsonl"].splitlines() if line
        )
        documents = tuple(
            json.loads(line) for line in members["documents.jsonl"].splitlines() if line
        )
        schemas = json.loads(members["schemas.json"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: a damaged bundle ({type(exc).__name__}: {exc})") from None
    return Bundle(manifest, records, documents, _codec(schemas, path), path)


def _member(tar: tarfile.TarFile, name: str, path: Path) -> bytes:
    try:
        info = tar.getmember(name)
    except KeyError:
        raise ConfigError(f"{path}: not a hermesbus bundle, it has no {name}") from None
    if not info.isfile() or info.size > _MAX_MEMBER:
        raise ConfigError(f"{path}: {name} is not a file of at most 1 GiB")
    handle = tar.extractfile(info)
    if handle is None:
        raise ConfigError(f"{path}: {name} cannot be read")
    return handle.read()


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

"""Frozen earlier versions of the top-level schemas, kept under ``schemas/history/``.

``history/<full name>/v<N>.avsc`` holds version N of a schema, self-contained
(named types inlined). ``history/SHA256SUMS`` records each file as it was frozen:
a frozen file edited in place would silently change how old data decodes, or make
it undecodable, so ``schemas check`` refuses that.

The codec resolves writer schemas of old data by their fingerprint among these;
``hermesbus schemas check`` compares the current schemas against them.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermesbus.codec.schemaset import SchemaSet
from hermesbus.errors import SchemaError

__all__ = ["History", "Version", "same_data"]

_VERSION_FILE = re.compile(r"^v(\d+)\.avsc$")


@dataclass(frozen=True, slots=True)
class Version:
    """One frozen version of a schema."""

    name: str
    number: int
    path: Path

    def load(self) -> dict[str, Any]:
        try:
            schema = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise SchemaError(f"{self.path}: cannot read frozen schema: {exc}") from exc
        if not isinstance(schema, dict):
            raise SchemaError(f"{self.path}: a frozen schema must be a JSON object")
        return schema


class History:
    """The ``history/`` folder of a schemas folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def names(self) -> list[str]:
        if not self.folder.is_dir():
            return []
        return sorted(p.name for p in self.folder.iterdir() if p.is_dir())

    def versions(self, name: str) -> list[Version]:
        folder = self.folder / name
        found = []
        if folder.is_dir():
            for path in folder.iterdir():
                match = _VERSION_FILE.match(path.name)
                if match:
                    found.append(Version(name, int(match.group(1)), path))
        return sorted(found, key=lambda v: v.number)

    def latest(self, name: str) -> Version | None:
        versions = self.versions(name)
        return versions[-1] if versions else None

    def freeze(self, schemas: SchemaSet, name: str) -> Version | None:
        """Record the current ``name`` as a new version unless it reads and writes data as
        the latest does (a changed ``doc`` alone is not a new version)."""
        current = schemas.expanded(name)
        latest = self.latest(name)
        if latest is not None and same_data(latest.load(), current):
            return None
        number = latest.number + 1 if latest else 1
        path = self.folder / name / f"v{number}.avsc"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(current, indent=2, ensure_ascii=False) + "\n"
        path.write_text(text, encoding="utf-8")
        with self.manifest.open("a", encoding="utf-8") as sums:
            sums.write(f"{_sha256(path)}  {name}/{path.name}\n")
        return Version(name, number, path)

    @property
    def manifest(self) -> Path:
        return self.folder / "SHA256SUMS"

    def tampered(self) -> list[str]:
        """Frozen files that were edited, removed or never recorded since freezing."""
        recorded = self._recorded()
        problems = []
        for name in self.names():
            for version in self.versions(name):
                key = f"{name}/{version.path.name}"
                digest = recorded.pop(key, None)
                if digest is None:
                    problems.append(f"{key} is not recorded in {self.manifest.name}")
                elif digest != _sha256(version.path):
                    problems.append(f"{key} was edited after it was frozen")
        problems += [f"{key} was removed after it was frozen" for key in sorted(recorded)]
        return problems

    def _recorded(self) -> dict[str, str]:
        if not self.manifest.is_file():
            return {}
        recorded = {}
        for line in self.manifest.read_text(encoding="utf-8").splitlines():
            digest, _, key = line.partition("  ")
            if key:
                recorded[key] = digest
        return recorded


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


_SCHEMAS_IN = ("type", "items", "values", "fields")
"""The keys of an Avro schema (or field) whose values are schemas (or fields) again."""


def same_data(one: Any, other: Any) -> bool:
    """True when two schemas differ at most in their ``doc`` strings: a doc changes neither
    the bytes nor how they resolve, so it needs no new frozen version. Everything else
    does: names, aliases, order, symbols and defaults (a default is data, compared whole)."""
    return bool(_without_docs(one) == _without_docs(other))


def _without_docs(schema: Any) -> Any:
    if isinstance(schema, list):  # a union, or a record's fields
        return [_without_docs(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {
        key: _without_docs(value) if key in _SCHEMAS_IN else value
        for key, value in schema.items()
        if key != "doc"
    }

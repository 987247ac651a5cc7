"""Frozen earlier versions of the top-level schemas, kept under ``schemas/history/``.

``history/<full name>/v<N>.avsc`` holds version N of a schema, self-contained
(named types inlined). The codec resolves writer schemas of old data by their
fingerprint among these; ``hermesbus schemas check`` compares the current
schemas against the newest of them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermesbus.errors import SchemaError
from hermesbus.schemaset import SchemaSet

__all__ = ["History", "Version"]

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
        """Record the current ``name`` as a new version unless it equals the latest."""
        current = schemas.expanded(name)
        latest = self.latest(name)
        if latest is not None and latest.load() == current:
            return None
        number = latest.number + 1 if latest else 1
        path = self.folder / name / f"v{number}.avsc"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(current, indent=2, ensure_ascii=False) + "\n"
        path.write_text(text, encoding="utf-8")
        return Version(name, number, path)

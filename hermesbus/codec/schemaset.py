"""Named Avro types read from a folder of ``.avsc`` files, resolved across files.

Each file defines one named type (``hermes.mcp.Envelope.avsc``) and refers to the
others by full name. :meth:`SchemaSet.expanded` inlines those references so that a
schema is self-contained: that form is what gets fingerprinted, registered, frozen
into ``history/`` and handed to fastavro.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import fastavro.schema

from hermesbus.errors import SchemaError

__all__ = [
    "PRIMITIVES",
    "SchemaSet",
    "canonical_form",
    "fingerprint",
    "fullname",
    "qualify",
    "walk",
]

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED = frozenset({"record", "enum", "fixed", "error"})

Schema = Any  # Avro schema JSON: a str, a list (union) or a dict


def fullname(schema: Mapping[str, Any], namespace: str | None) -> str:
    """Full name of a named schema, following the Avro namespace rules."""
    name = str(schema["name"])
    if "." in name:
        return name
    space = schema.get("namespace", namespace)
    return f"{space}.{name}" if space else name


def qualify(ref: str, namespace: str | None) -> str:
    """Full name of a reference written inside ``namespace``."""
    if ref in PRIMITIVES or "." in ref or not namespace:
        return ref
    return f"{namespace}.{ref}"


def canonical_form(schema: Schema) -> str:
    """Avro Parsing Canonical Form of a self-contained schema."""
    try:
        return str(fastavro.schema.to_parsing_canonical_form(schema))
    except Exception as exc:
        raise SchemaError(f"cannot compute the canonical form: {exc}") from exc


def fingerprint(schema: Schema) -> bytes:
    """CRC-64-AVRO fingerprint of the canonical form, 8 bytes little-endian.

    fastavro's hex string already lists the bytes in little-endian order.
    """
    return bytes.fromhex(fastavro.schema.fingerprint(canonical_form(schema), "CRC-64-AVRO"))


class SchemaSet:
    """The named types of one schemas folder (or of a dict of file texts)."""

    def __init__(self, definitions: Mapping[str, Mapping[str, Any]], origin: str) -> None:
        self._defs = dict(definitions)
        self.origin = origin
        self._all: dict[str, Mapping[str, Any]] = {}
        references: dict[str, list[str]] = {}
        for name, schema in self._defs.items():
            defined, references[name] = walk(schema, None, f"{origin}: {name}")
            self._all.update(defined)
        for name, refs in references.items():
            unknown = [ref for ref in refs if ref not in self._all]
            if unknown:
                raise SchemaError(f"{origin}: {name} refers to unknown type {unknown[0]}")
        # valid Avro, defaults included, before anyone relies on it; kept for the codec
        self._parsed = {
            name: parse(self.expanded(name), f"{origin}: {name}") for name in self._defs
        }

    @classmethod
    def from_dir(cls, folder: Path) -> SchemaSet:
        """Read every ``*.avsc`` directly in ``folder`` (not ``history/``)."""
        if not folder.is_dir():
            raise SchemaError(f"schemas folder {folder} does not exist")
        texts = {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.avsc"))}
        return cls.from_texts(texts, origin=str(folder))

    @classmethod
    def from_texts(cls, texts: Mapping[str, str], origin: str) -> SchemaSet:
        """Parse file texts keyed by file name; each file holds one named type."""
        defs: dict[str, Mapping[str, Any]] = {}
        for file_name, text in texts.items():
            try:
                schema = json.loads(text)
            except json.JSONDecodeError as exc:
                raise SchemaError(f"{origin}/{file_name}: not JSON: {exc}") from exc
            if not isinstance(schema, dict) or schema.get("type") not in _NAMED:
                raise SchemaError(f"{origin}/{file_name}: must define one named type")
            name = fullname(schema, None)
            if name in defs:
                raise SchemaError(f"{origin}/{file_name}: {name} is defined twice")
            defs[name] = schema
        if not defs:
            raise SchemaError(f"{origin}: no .avsc files")
        return cls(defs, origin)

    def names(self) -> list[str]:
        return sorted(self._defs)

    def __contains__(self, name: object) -> bool:
        return name in self._defs

    def definition(self, name: str) -> Mapping[str, Any]:
        """The schema as written (references not inlined); also types defined inline."""
        try:
            return self._all[name]
        except KeyError:
            raise SchemaError(f"{self.origin}: no schema named {name}") from None

    def expanded(self, name: str) -> dict[str, Any]:
        """The schema of ``name`` with every referenced named type inlined once."""
        result = self._expand(self.definition(name), None, set())
        if not isinstance(result, dict):
            raise SchemaError(f"{name} did not expand to a named type")
        return result

    def parsed(self, name: str) -> Any:
        """fastavro's parsed form of the expanded ``name`` (parsed once, when loaded)."""
        if name not in self._parsed:
            raise SchemaError(f"{self.origin}: no schema file for {name}")
        return self._parsed[name]

    def _expand(self, schema: Schema, namespace: str | None, seen: set[str]) -> Schema:
        if isinstance(schema, str):
            ref = qualify(schema, namespace)
            if ref in PRIMITIVES or ref in seen:
                return ref
            return self._expand(self.definition(ref), None, seen)
        if isinstance(schema, list):
            return [self._expand(branch, namespace, seen) for branch in schema]
        return self._expand_complex(dict(schema), namespace, seen)

    def _expand_complex(
        self, schema: dict[str, Any], namespace: str | None, seen: set[str]
    ) -> Schema:
        kind = schema.get("type")
        if kind in _NAMED:
            name = fullname(schema, namespace)
            if name in seen:  # already inlined where it was first referenced
                return name
            seen.add(name)
            namespace = name.rpartition(".")[0] or None
            schema["name"], schema["namespace"] = name.rpartition(".")[2], namespace
        if kind in ("record", "error"):
            schema["fields"] = [
                {**f, "type": self._expand(f["type"], namespace, seen)} for f in schema["fields"]
            ]
        elif kind == "array":
            schema["items"] = self._expand(schema["items"], namespace, seen)
        elif kind == "map":
            schema["values"] = self._expand(schema["values"], namespace, seen)
        elif isinstance(kind, (dict, list)) or (
            isinstance(kind, str) and kind not in PRIMITIVES and kind not in _NAMED
        ):
            return {**schema, "type": self._expand(kind, namespace, seen)}
        return schema


def walk(
    schema: Schema, namespace: str | None = None, where: str = "schema"
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The named types a schema defines (in order) and the full names it refers to.

    Raises SchemaError, naming the place, where the JSON is not an Avro schema.
    """
    walker = _Walker()
    walker.visit(schema, namespace, where)
    return walker.defined, walker.refs


class _Walker:
    def __init__(self) -> None:
        self.defined: dict[str, dict[str, Any]] = {}
        self.refs: list[str] = []

    def visit(self, node: Schema, space: str | None, path: str) -> None:
        if isinstance(node, str):
            ref = qualify(node, space)
            if ref not in PRIMITIVES and ref not in self.defined:
                self.refs.append(ref)
        elif isinstance(node, list):
            for branch in node:
                self.visit(branch, space, path)
        elif not isinstance(node, dict) or "type" not in node:
            raise SchemaError(f"{path}: not an Avro schema: {node!r:.80}")
        elif node["type"] in _NAMED:
            self._named(node, space, path)
        elif node["type"] in ("array", "map"):
            key = "items" if node["type"] == "array" else "values"
            if key not in node:
                raise SchemaError(f"{path}: an {node['type']} needs {key!r}")
            self.visit(node[key], space, path)
        else:
            self.visit(node["type"], space, path)  # {"type": "long", "logicalType": ...}

    def _named(self, node: dict[str, Any], space: str | None, path: str) -> None:
        if not isinstance(node.get("name"), str):
            raise SchemaError(f"{path}: a {node['type']} needs a name")
        name = fullname(node, space)
        self.defined[name] = node
        if node["type"] not in ("record", "error"):
            return
        fields = node.get("fields")
        if not isinstance(fields, list):
            raise SchemaError(f"{name}: a record needs a list of fields")
        for field in fields:
            if not isinstance(field, dict) or "name" not in field or "type" not in field:
                raise SchemaError(f"{name}: every field needs a name and a type")
            self.visit(field["type"], name.rpartition(".")[0] or None, f"{name}.{field['name']}")


def parse(schema: Schema, where: str) -> Any:
    """fastavro.parse_schema with its errors translated."""
    try:
        return fastavro.schema.parse_schema(schema)
    except Exception as exc:
        raise SchemaError(f"{where}: invalid Avro schema: {exc}") from exc

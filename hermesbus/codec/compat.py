"""Avro schema compatibility by the resolution rules of the Avro specification.

``can_read(reader, writer)`` lists what stops a reader schema from resolving data
written with a writer schema: fields matched by name (or reader alias), reader
fields missing from the writer need defaults, promotions int->long->float->double
and string<->bytes, enum symbols unknown to the reader need a reader default,
unions branch by branch. BACKWARD means the new schema reads old data, FORWARD
means the old schema reads new data, FULL means both.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from hermesbus.codec.schemaset import PRIMITIVES, fullname, qualify, walk
from hermesbus.errors import SchemaError

__all__ = ["Compatibility", "Incompatibility", "Level", "can_read", "compare", "named_types"]

_COMPLEX = frozenset({"record", "error", "enum", "fixed", "array", "map"})
_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}


class Level(enum.StrEnum):
    """Compatibility levels, from strongest to weakest."""

    FULL = "FULL"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    NONE = "NONE"

    def satisfies(self, required: Level) -> bool:
        return required is Level.NONE or self is required or self is Level.FULL


@dataclass(frozen=True, slots=True)
class Incompatibility:
    """One reason a reader cannot resolve a writer's data; ``path`` names the field."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass(frozen=True, slots=True)
class Compatibility:
    """How a new version of one named type relates to its previous version."""

    name: str
    backward: tuple[Incompatibility, ...]
    forward: tuple[Incompatibility, ...]

    @property
    def level(self) -> Level:
        if not self.backward and not self.forward:
            return Level.FULL
        if not self.backward:
            return Level.BACKWARD
        if not self.forward:
            return Level.FORWARD
        return Level.NONE


def named_types(schema: Any, namespace: str | None = None) -> dict[str, dict[str, Any]]:
    """Every named type defined inline in a (self-contained) schema, by full name."""
    return walk(schema, namespace)[0]


def can_read(
    reader: Any,
    writer: Any,
    reader_names: Mapping[str, Any] | None = None,
    writer_names: Mapping[str, Any] | None = None,
) -> list[Incompatibility]:
    """What stops ``reader`` from resolving data written with ``writer`` (empty: nothing)."""
    resolver = _Resolver(
        reader_names if reader_names is not None else named_types(reader),
        writer_names if writer_names is not None else named_types(writer),
    )
    return list(resolver.check(reader, writer, None, None, _root_path(reader)))


def compare(
    name: str,
    new: Any,
    old: Any,
    new_names: Mapping[str, Any],
    old_names: Mapping[str, Any],
) -> Compatibility:
    """Compatibility of the new version of ``name`` with the old one."""
    return Compatibility(
        name,
        backward=tuple(_Resolver(new_names, old_names).check(new, old, None, None, name)),
        forward=tuple(_Resolver(old_names, new_names).check(old, new, None, None, name)),
    )


def _root_path(schema: Any) -> str:
    if isinstance(schema, dict) and "name" in schema:
        return fullname(schema, None)
    return "<root>"


class _Resolver:
    """One reader/writer pair of name tables; remembers named pairs already checked."""

    def __init__(self, reader_names: Mapping[str, Any], writer_names: Mapping[str, Any]) -> None:
        self.reader_names = reader_names
        self.writer_names = writer_names
        self.visited: set[tuple[str, str]] = set()

    def check(
        self, reader: Any, writer: Any, r_ns: str | None, w_ns: str | None, path: str
    ) -> Iterator[Incompatibility]:
        reader, r_ns = _deref(reader, r_ns, self.reader_names, path)
        writer, w_ns = _deref(writer, w_ns, self.writer_names, path)
        if isinstance(writer, list):
            yield from self._writer_union(reader, writer, r_ns, w_ns, path)
        elif isinstance(reader, list):
            yield from self._reader_union(reader, writer, r_ns, w_ns, path)
        else:
            yield from self._same_kind(reader, writer, r_ns, w_ns, path)

    def _writer_union(
        self, reader: Any, writer: list[Any], r_ns: str | None, w_ns: str | None, path: str
    ) -> Iterator[Incompatibility]:
        for branch in writer:
            label = f"{path}<{_type_name(branch, w_ns)}>"
            if isinstance(reader, list):
                yield from self._reader_union(reader, branch, r_ns, w_ns, label)
            else:
                yield from self.check(reader, branch, r_ns, w_ns, label)

    def _reader_union(
        self, reader: list[Any], writer: Any, r_ns: str | None, w_ns: str | None, path: str
    ) -> Iterator[Incompatibility]:
        writer, w_ns = _deref(writer, w_ns, self.writer_names, path)
        for branch in reader:
            deref, ns = _deref(branch, r_ns, self.reader_names, path)
            if _matches(deref, writer, ns, w_ns):
                yield from self.check(deref, writer, ns, w_ns, path)
                return
        yield Incompatibility(
            path,
            f"the reader's union has no branch for the writer's {_type_name(writer, w_ns)}",
        )

    def _same_kind(
        self, reader: Any, writer: Any, r_ns: str | None, w_ns: str | None, path: str
    ) -> Iterator[Incompatibility]:
        r_kind, w_kind = _kind(reader), _kind(writer)
        if r_kind != w_kind:
            if r_kind not in _PROMOTIONS.get(w_kind, set()):
                yield Incompatibility(path, f"type changed from {w_kind} to {r_kind}")
            return
        if r_kind in PRIMITIVES:
            return
        if r_kind in ("record", "error", "enum", "fixed"):
            yield from self._named(reader, writer, r_ns, w_ns, path)
        elif r_kind == "array":
            yield from self.check(reader["items"], writer["items"], r_ns, w_ns, f"{path}[]")
        elif r_kind == "map":
            yield from self.check(reader["values"], writer["values"], r_ns, w_ns, f"{path}{{}}")

    def _named(
        self,
        reader: dict[str, Any],
        writer: dict[str, Any],
        r_ns: str | None,
        w_ns: str | None,
        path: str,
    ) -> Iterator[Incompatibility]:
        r_name, w_name = fullname(reader, r_ns), fullname(writer, w_ns)
        if not _names_match(reader, r_name, w_name):
            yield Incompatibility(path, f"named type changed from {w_name} to {r_name}")
            return
        if (r_name, w_name) in self.visited:
            return
        self.visited.add((r_name, w_name))
        r_ns, w_ns = r_name.rpartition(".")[0] or None, w_name.rpartition(".")[0] or None
        kind = reader["type"]
        if kind == "enum":
            yield from _enum(reader, writer, path)
        elif kind == "fixed":
            if reader["size"] != writer["size"]:
                yield Incompatibility(
                    path, f"fixed size changed from {writer['size']} to {reader['size']}"
                )
        else:
            yield from self._record(reader, writer, r_ns, w_ns, path)

    def _record(
        self,
        reader: dict[str, Any],
        writer: dict[str, Any],
        r_ns: str | None,
        w_ns: str | None,
        path: str,
    ) -> Iterator[Incompatibility]:
        written = {f["name"]: f for f in writer["fields"]}
        for field in reader["fields"]:
            names = [field["name"], *field.get("aliases", [])]
            match = next((written[n] for n in names if n in written), None)
            where = f"{path}.{field['name']}"
            if match is None:
                if "default" not in field:
                    yield Incompatibility(
                        where, "field is missing from the writer and has no default"
                    )
                continue
            yield from self.check(field["type"], match["type"], r_ns, w_ns, where)


def _enum(reader: dict[str, Any], writer: dict[str, Any], path: str) -> Iterator[Incompatibility]:
    unknown = [s for s in writer["symbols"] if s not in reader["symbols"]]
    if unknown and "default" not in reader:
        yield Incompatibility(
            path, f"enum symbols {unknown} unknown to the reader, which has no enum default"
        )


def _deref(
    schema: Any, namespace: str | None, names: Mapping[str, Any], path: str
) -> tuple[Any, str | None]:
    """Unwrap ``{"type": X}`` forms and replace a name reference by the type it names."""
    while isinstance(schema, dict) and schema.get("type") not in _COMPLEX:
        schema = schema["type"]
    if isinstance(schema, str) and schema not in PRIMITIVES:
        full = qualify(schema, namespace)
        if full not in names and schema in names:
            full = schema  # a reference to a type with no namespace
        if full not in names:
            raise SchemaError(f"{path}: unknown named type {schema}")
        return names[full], full.rpartition(".")[0] or None  # the namespace it was defined in
    return schema, namespace


def _kind(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    return str(schema["type"])


def _type_name(schema: Any, namespace: str | None) -> str:
    if isinstance(schema, dict) and "name" in schema:
        return fullname(schema, namespace)
    if isinstance(schema, dict):
        return str(schema["type"]) if isinstance(schema["type"], str) else "union"
    return "union" if isinstance(schema, list) else str(schema)


def _names_match(reader: dict[str, Any], r_name: str, w_name: str) -> bool:
    short = w_name.rpartition(".")[2]
    aliases = set(reader.get("aliases", []))
    return short == r_name.rpartition(".")[2] or w_name in aliases or short in aliases


def _matches(reader: Any, writer: Any, r_ns: str | None, w_ns: str | None) -> bool:
    """Whether a reader union branch is the one the writer's type selects."""
    r_kind, w_kind = _kind(reader), _kind(writer)
    if r_kind in ("record", "error", "enum", "fixed") and r_kind == w_kind:
        return _names_match(reader, fullname(reader, r_ns), fullname(writer, w_ns))
    return r_kind == w_kind or r_kind in _PROMOTIONS.get(w_kind, set())

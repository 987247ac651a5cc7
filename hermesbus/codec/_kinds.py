"""Pair an Avro schema with the pydantic models that mirror it, type by type.

The result is a small tree of *kinds* (string with its constraints, record with its
model class, union with its branches, ...) from which ``_compile`` writes the codec.
Pairing refuses, with a :class:`CompileError` naming the place, anything it cannot
reproduce exactly: a field the model and the schema disagree on, a validator it does
not know, an Avro type the models do not use. The codec then uses fastavro and
pydantic instead, so a refusal costs speed, never correctness.
"""

from __future__ import annotations

import enum
import keyword
import re
import types
import typing
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import AfterValidator, BeforeValidator, Strict, WrapSerializer

from hermesbus.codec.schemaset import fullname, qualify
from hermesbus.contract import payloads
from hermesbus.contract.fields import Record, _epoch_millis, to_millis_datetime

from ._constraints import (
    Checks,
    CompileError,
    checks_of,
    is_general,
    is_strict,
    unwrap,
    validators_of,
)

__all__ = [
    "Array",
    "Bool",
    "Checks",
    "CompileError",
    "Double",
    "Enum",
    "Kind",
    "Long",
    "Map",
    "Millis",
    "Null",
    "RecordKind",
    "Str",
    "Union",
    "pair_record",
]

# Validators whose effect on a decoded value the compiled codec reproduces itself, each
# only where it stands in the models: Millis turns epoch ms into an aware UTC datetime
# (decode builds exactly that); the named body turns (full name, fields) into that
# branch's model (decode builds it). Any other validator or serializer is refused.
_MILLIS = frozenset({_epoch_millis, to_millis_datetime})
_NAMED_BODY = frozenset({payloads._named_body, payloads._tag_body})
_CONFIG_KEYS = frozenset({"frozen", "extra"})
_FULL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class Null:
    pass


@dataclass(frozen=True)
class Bool:
    pass


@dataclass(frozen=True)
class Long:
    bits: int
    checks: Checks


@dataclass(frozen=True)
class Double:
    checks: Checks


@dataclass(frozen=True)
class Str:
    checks: Checks


@dataclass(frozen=True)
class Millis:
    pass


@dataclass(frozen=True)
class Enum:
    name: str
    members: tuple[enum.Enum, ...]


@dataclass(frozen=True)
class Array:
    items: Kind
    container: type  # tuple or list, as the model holds it


@dataclass(frozen=True)
class Map:
    values: Kind


@dataclass(frozen=True)
class Union:
    branches: tuple[Kind, ...]


@dataclass(eq=False)
class RecordKind:
    """A record and its model; ``fields`` is filled after creation, so types may recurse."""

    name: str
    model: type[Record]
    fields: list[tuple[str, Kind]] = field(default_factory=list)


Kind = Null | Bool | Long | Double | Str | Millis | Enum | Array | Map | Union | RecordKind


def pair_record(schema: dict[str, Any], model: type[Record]) -> RecordKind:
    """The kind tree of a self-contained record schema and the model that mirrors it."""
    return _Pairing().record(schema, None, model)


class _Pairing:
    def __init__(self) -> None:
        self.named: dict[str, Any] = {}  # full name -> schema dict, as they are defined
        self.records: dict[str, RecordKind] = {}

    def record(self, schema: dict[str, Any], namespace: str | None, model: Any) -> RecordKind:
        name = fullname(schema, namespace)
        if name in self.records:
            return self.records[name]
        _check_names(name, [f["name"] for f in schema["fields"]])
        if not _is_record(model):
            raise CompileError(f"{name}: the model side is {model!r}, not a Record")
        if model.avro_name != name:
            raise CompileError(f"{name}: the model is {model.__name__} ({model.avro_name})")
        _check_model(model)
        self.named[name] = schema
        kind = self.records[name] = RecordKind(name, model)
        space = name.rpartition(".")[0] or None
        fields = schema["fields"]
        if [f["name"] for f in fields] != list(model.model_fields):
            raise CompileError(f"{name}: the fields of the schema and of {model.__name__} differ")
        for avro_field in fields:
            info = model.model_fields[avro_field["name"]]
            where = f"{name}.{avro_field['name']}"
            pair = self.kind(avro_field["type"], space, info.annotation, list(info.metadata), where)
            kind.fields.append((avro_field["name"], pair))
        return kind

    def kind(self, schema: Any, space: str | None, hint: Any, meta: list[Any], where: str) -> Kind:
        hint, meta = unwrap(hint, meta)
        if isinstance(schema, list):
            return self.union(schema, space, hint, meta, where)
        if isinstance(schema, str) and qualify(schema, space) in self.named:
            schema = self.named[qualify(schema, space)]
        if isinstance(schema, str):
            schema = {"type": schema}
        kind = schema["type"]
        if kind not in ("record", "error", "enum", "array", "map"):
            return _primitive(schema, hint, meta, where)
        if meta:  # a length, strictness or validator on a container is not reproduced
            raise CompileError(f"{where}: constraints on a {kind} are not compiled: {meta!r}")
        if kind in ("record", "error"):
            return self.record(schema, space, hint)
        if kind == "enum":
            return self.enum(schema, space, hint, where)
        if kind == "array":
            return self.array(schema, space, hint, where)
        key, values = _args(hint, dict, 2, where)
        key, key_meta = unwrap(key, [])
        if key is not str or not all(isinstance(m, Strict) for m in key_meta):
            raise CompileError(f"{where}: map keys are paired with {key!r} {key_meta!r}, not str")
        return Map(self.kind(schema["values"], space, values, [], f"{where}.<value>"))

    def enum(self, schema: dict[str, Any], space: str | None, hint: Any, where: str) -> Enum:
        name = fullname(schema, space)
        self.named[name] = schema
        if not (isinstance(hint, type) and issubclass(hint, enum.Enum)):
            raise CompileError(f"{where}: enum {name} is paired with {hint!r}")
        try:
            members = tuple(hint(symbol) for symbol in schema["symbols"])
        except ValueError as exc:
            raise CompileError(f"{where}: {hint.__name__} lacks a symbol of {name}") from exc
        if len(members) != len(hint):
            raise CompileError(f"{where}: {hint.__name__} has members {name} does not")
        return Enum(name, members)

    def array(self, schema: dict[str, Any], space: str | None, hint: Any, where: str) -> Array:
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:  # noqa: PLR2004
            container: type = tuple
        elif origin is list and len(args) == 1:
            container = list
        else:
            raise CompileError(f"{where}: an array is paired with {hint!r}")
        items = self.kind(schema["items"], space, args[0], [], f"{where}.<item>")
        if isinstance(items, Null):
            raise CompileError(f"{where}: arrays of zero-byte items are not compiled")
        return Array(items, container)

    def union(
        self, branches: list[Any], space: str | None, hint: Any, meta: list[Any], where: str
    ) -> Union:
        if typing.get_origin(hint) not in (typing.Union, types.UnionType):
            raise CompileError(f"{where}: a union is paired with {hint!r}")
        members = list(typing.get_args(hint))
        _check_union(members, meta, where)
        kinds = []
        for branch in branches:
            match = [m for m in members if _fits(branch, space, m, self.named)]
            if len(match) != 1:
                raise CompileError(f"{where}: branch {branch!r} fits {len(match)} model types")
            members.remove(match[0])
            kinds.append(self.kind(branch, space, match[0], [], where))
        if members:
            raise CompileError(f"{where}: model types {members!r} have no branch")
        categories = [_category(kind) for kind in kinds if not isinstance(kind, RecordKind)]
        if len(set(categories)) != len(categories):
            raise CompileError(f"{where}: two branches take the same kind of Python value")
        return Union(tuple(kinds))


def _check_union(members: list[Any], meta: list[Any], where: str) -> None:
    """Refuse unions whose branch pydantic could pick differently from the Avro index.

    Decode takes the branch the writer named. pydantic takes, from an exact-typed value,
    the member of that type, if no other member coerces it first: so the other members
    must be strict (or records, which take only dicts, or None). Records in a union of
    several come as (full name, fields), which only the named-body validator accepts.
    """
    records = [m for m in members if _is_record(m)]
    others = [m for m in members if not _is_record(m) and m is not type(None)]
    named_body = validators_of(meta) == _NAMED_BODY
    general = [m for m in meta if not isinstance(m, BeforeValidator | WrapSerializer)]
    if any(not is_general(m) or set(vars(m)) != {"union_mode"} for m in general):
        raise CompileError(f"{where}: constraints on a union are not compiled: {meta!r}")
    if validators_of(meta) and not named_body:
        raise CompileError(f"{where}: unknown validators on a union: {meta!r}")
    if len(records) > 1 and not (named_body and not others):
        raise CompileError(f"{where}: several records in a union without the named body")
    if named_body and set(records) != set(payloads.BODY_TYPES.values()):
        raise CompileError(f"{where}: the named body is paired with {records!r}")
    if len(others) + bool(records) > 1 and not all(is_strict(m) for m in others):
        raise CompileError(f"{where}: a union of several types whose members are not strict")


def _check_names(record: str, fields: list[str]) -> None:
    """Names go into the generated source: only Avro names, which are Python identifiers."""
    if not _FULL_NAME.fullmatch(record):
        raise CompileError(f"{record!r} is not an Avro full name")
    for name in fields:
        if not name.isidentifier() or keyword.iskeyword(name) or not name.isascii():
            raise CompileError(f"{record}: field {name!r} is not an Avro name")


def _check_model(model: type[Record]) -> None:
    """Refuse models whose instances the codec could not build, or dump, as pydantic does."""
    decorators = model.__pydantic_decorators__
    config = dict(model.model_config)
    if (
        decorators.validators
        or decorators.field_validators
        or decorators.root_validators
        or decorators.model_validators
        or decorators.field_serializers
        or decorators.model_serializers
        or decorators.computed_fields
        or model.__pydantic_post_init__ is not None
        or model.__private_attributes__
    ):
        raise CompileError(f"{model.__name__}: validators, serializers or private attributes")
    if set(config) - _CONFIG_KEYS or config.get("extra") not in (None, "forbid", "ignore"):
        raise CompileError(f"{model.__name__}: model configuration {config!r} is not compiled")
    for name, info in model.model_fields.items():
        if info.alias or info.validation_alias or info.serialization_alias:
            raise CompileError(f"{model.__name__}.{name}: aliases are not compiled")
        if info.exclude or info.discriminator is not None:
            raise CompileError(f"{model.__name__}.{name}: exclude or discriminator")


def _args(hint: Any, origin: type, count: int, where: str) -> tuple[Any, ...]:
    args = typing.get_args(hint)
    if typing.get_origin(hint) is not origin or len(args) != count:
        raise CompileError(f"{where}: expected {origin.__name__} in the model, got {hint!r}")
    return args


_PRIMITIVE_TYPES: dict[str, type] = {
    "null": type(None),
    "boolean": bool,
    "int": int,
    "long": int,
    "double": float,
    "string": str,
}


def _primitive(schema: dict[str, Any], hint: Any, meta: list[Any], where: str) -> Kind:
    avro, logical = schema["type"], schema.get("logicalType")
    validators = validators_of(meta)
    if logical == "timestamp-millis" and avro == "long":
        rest = [m for m in meta if not isinstance(m, BeforeValidator | AfterValidator)]
        if hint is not datetime or validators != _MILLIS or rest:
            raise CompileError(f"{where}: timestamp-millis is paired with {hint!r} {meta!r}")
        return Millis()
    if validators:
        raise CompileError(f"{where}: unknown validators {meta!r}")
    if logical is not None or avro not in _PRIMITIVE_TYPES:
        raise CompileError(f"{where}: Avro type {avro} ({logical}) is not compiled")
    if hint is not _PRIMITIVE_TYPES[avro]:
        raise CompileError(f"{where}: Avro {avro} is paired with {hint!r}")
    checks = checks_of(meta, where)
    kinds: dict[str, Kind] = {
        "null": Null(),
        "boolean": Bool(),
        "int": Long(32, checks.without_bounds_of(-(2**31), 2**31 - 1)),
        "long": Long(64, checks.without_bounds_of(-(2**63), 2**63 - 1)),
        "double": Double(checks),
        "string": Str(checks),
    }
    if avro in ("null", "boolean") and checks != Checks():
        raise CompileError(f"{where}: constraints on a {avro} are not compiled")
    return kinds[avro]


def _fits(branch: Any, space: str | None, member: Any, named: dict[str, Any]) -> bool:  # noqa: PLR0911 - one per Avro kind
    """Whether a union branch of the schema is the Avro form of one model union member."""
    member = unwrap(member, [])[0]
    if isinstance(branch, str) and qualify(branch, space) in named:
        branch = named[qualify(branch, space)]
    if isinstance(branch, str):
        return _PRIMITIVE_TYPES.get(branch) is member
    kind = branch["type"]
    if kind in ("record", "error"):
        return _is_record(member) and member.avro_name == fullname(branch, space)
    if kind == "enum":
        return isinstance(member, type) and issubclass(member, enum.Enum)
    if kind == "array":
        return typing.get_origin(member) in (list, tuple)
    if kind == "map":
        return typing.get_origin(member) is dict
    if branch.get("logicalType") == "timestamp-millis":
        return member is datetime
    return _PRIMITIVE_TYPES.get(kind) is member


def _is_record(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, Record)


def _category(kind: Kind) -> str:
    """The Python value class a branch takes on encode: each may appear once per union."""
    if isinstance(kind, Long):
        return "int"
    if isinstance(kind, Double):
        return "float"
    if isinstance(kind, Str | Enum):
        return "str"
    if isinstance(kind, Array):
        return "sequence"
    return type(kind).__name__

"""The constraints pydantic puts on one value, read from its annotation's metadata.

What ``_kinds`` pairs and ``_read`` checks inline. Anything not understood here is a
:class:`CompileError`, so the codec falls back rather than drop a constraint.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, replace
from typing import Any

import annotated_types as at
from pydantic import AfterValidator, BeforeValidator, Strict, WrapSerializer
from pydantic.fields import FieldInfo
from pydantic.types import AllowInfNan

__all__ = [
    "Checks",
    "CompileError",
    "checks_of",
    "is_general",
    "is_strict",
    "unwrap",
    "validators_of",
]

_GENERAL_KEYS = frozenset({"pattern", "allow_inf_nan", "union_mode", "strict"})


class CompileError(Exception):
    """The schema and the models cannot be paired exactly; the codec falls back."""


@dataclass(frozen=True)
class Checks:
    """The constraints pydantic applies to one decoded value."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    finite: bool = False

    def without_bounds_of(self, low: int, high: int) -> Checks:
        """These checks minus bounds that the Avro type already guarantees."""
        ge = None if self.ge is not None and self.ge <= low else self.ge
        le = None if self.le is not None and self.le >= high else self.le
        return replace(self, ge=ge, le=le)


def validators_of(meta: list[Any]) -> frozenset[Any]:
    return frozenset(
        m.func for m in meta if isinstance(m, BeforeValidator | AfterValidator | WrapSerializer)
    )


def is_strict(member: Any) -> bool:
    hint, meta = unwrap(member, [])
    if typing.get_origin(hint) in (list, tuple):  # strict list of strict items
        (item, *_rest) = typing.get_args(hint)
        return is_strict(item)
    return any(isinstance(m, Strict) and m.strict for m in meta)


def is_general(item: Any) -> bool:
    """pydantic's catch-all metadata (pattern, allow_inf_nan, union_mode, strict)."""
    return hasattr(item, "__dict__") and set(vars(item)) <= _GENERAL_KEYS


def unwrap(hint: Any, meta: list[Any]) -> tuple[Any, list[Any]]:
    """``Annotated[T, m...]`` -> (T, metadata), flattening Field(...) infos."""
    while typing.get_origin(hint) is typing.Annotated:
        hint, *extra = typing.get_args(hint)
        meta = [*meta, *extra]
    flat: list[Any] = []
    for item in meta:
        flat.extend(item.metadata if isinstance(item, FieldInfo) else [item])
    return hint, flat


_LOWER = {at.Ge: "ge", at.Gt: "gt", at.MinLen: "min_length"}
_UPPER = {at.Le: "le", at.Lt: "lt", at.MaxLen: "max_length"}


def checks_of(meta: list[Any], where: str) -> Checks:
    """The constraints of one primitive value.

    pydantic keeps the last of repeated bounds; they are compiled only where that is also
    the strictest (a tighter bound after a looser one, as Int32 then Field(ge=1) gives).
    """
    found: dict[str, list[Any]] = {}
    for item in meta:
        if type(item) in _LOWER or type(item) in _UPPER:
            name = {**_LOWER, **_UPPER}[type(item)]
            found.setdefault(name, []).append(getattr(item, name))
        elif isinstance(item, AllowInfNan):
            found.setdefault("allow_inf_nan", []).append(item.allow_inf_nan)
        elif isinstance(item, Strict):
            pass  # decoded values have exactly the Avro type's Python type
        elif is_general(item) and "union_mode" not in vars(item):
            for key, value in vars(item).items():
                found.setdefault(key, []).append(value)
        else:
            raise CompileError(f"{where}: unknown constraint {item!r}")
    values: dict[str, Any] = {}
    for name, seen in found.items():
        if name == "strict":
            continue
        strictest = _strictest(name, seen, where)
        if seen[-1] != strictest:
            raise CompileError(f"{where}: a looser {name} after a stricter one")
        values[name] = strictest
    if "pattern" in values and not isinstance(values["pattern"], str):
        raise CompileError(f"{where}: a pattern that is not a string")
    finite = values.pop("allow_inf_nan", True) is False
    return Checks(**values, finite=finite)


def _strictest(name: str, seen: list[Any], where: str) -> Any:
    if name in ("pattern", "allow_inf_nan"):
        if len(set(map(repr, seen))) > 1:
            raise CompileError(f"{where}: different {name}s on one value")
        return seen[-1]
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in seen):
        raise CompileError(f"{where}: {name} bounds that are not numbers: {seen!r}")
    return max(seen) if name in ("ge", "gt", "min_length") else min(seen)

"""Envelope model <-> the dict fastavro reads and writes.

Records inside unions are written in fastavro's tuple notation
``(full name, record)``: the branch is named instead of found by validating the
record against each branch, which also makes the written branch unambiguous.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from hermesbus.contract.envelope import Envelope
from hermesbus.contract.fields import Record
from hermesbus.contract.payloads import BODY_TYPES
from hermesbus.errors import ContractError

__all__ = ["to_model", "to_record"]

Tagger = Callable[[dict[str, Any]], None]


def to_record(envelope: Envelope) -> dict[str, Any]:
    """The Avro record of an envelope, union branches named."""
    record = envelope.model_dump()
    _ENVELOPE_TAGGER(record)
    payload = record["payload"]
    if payload["body"] is not None:  # dumped as {full name: fields}
        ((name, fields),) = payload["body"].items()
        tagger = _BODY_TAGGERS[name]
        if tagger is not None:
            tagger(fields)
        payload["body"] = (name, fields)
    return record


def to_model(record: dict[str, Any]) -> Envelope:
    """Validate a decoded record into an Envelope; a contract break raises ContractError."""
    try:
        return Envelope.model_validate(record)  # the body arrives as (full name, fields)
    except ValidationError as exc:
        raise ContractError(f"envelope breaks the contract: {_first_errors(exc)}") from exc
    except (KeyError, TypeError, ValueError) as exc:
        raise ContractError(f"envelope breaks the contract: {type(exc).__name__}: {exc}") from exc


def _first_errors(exc: ValidationError, limit: int = 3) -> str:
    parts = [
        f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
        for err in exc.errors()[:limit]
    ]
    more = exc.error_count() - limit
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _tagger(cls: type[Record]) -> Tagger | None:
    """A function that names the union branches of ``cls``'s dumped dict, or None if none."""
    steps: list[tuple[str, Callable[[Any], Any]]] = []
    for name, field in cls.model_fields.items():
        step = _step(field.annotation)
        if step is not None:
            steps.append((name, step))
    if not steps:
        return None

    def tag(record: dict[str, Any]) -> None:
        for name, step in steps:
            value = record[name]
            if value is not None:
                record[name] = step(value)

    return tag


def _step(annotation: Any) -> Callable[[Any], Any] | None:
    """How to tag one field's dumped value, from its annotation."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        records = [a for a in args if _is_record(a)]
        # ``Optional[Record]`` is named here; the multi-record body union in to_record.
        return _named(records[0]) if len(records) == 1 else None
    if typing.get_origin(annotation) is tuple and args and _is_record(args[0]):
        each = _tagger(args[0])
        return None if each is None else _each(each)
    if _is_record(annotation):
        inner = _tagger(annotation)
        return None if inner is None else _one(inner)
    return None


def _named(cls: type[Record]) -> Callable[[Any], Any]:
    inner = _tagger(cls)
    name = cls.avro_name
    if inner is None:
        return lambda value: (name, value)
    return lambda value: (name, _apply(inner, value))


def _apply(tagger: Tagger, value: dict[str, Any]) -> dict[str, Any]:
    tagger(value)
    return value


def _one(tagger: Tagger) -> Callable[[Any], Any]:
    return lambda value: _apply(tagger, value)


def _each(tagger: Tagger) -> Callable[[Any], Any]:
    return lambda items: [_apply(tagger, item) for item in items]


def _is_record(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, Record)


_ENVELOPE_TAGGER: Tagger = _tagger(Envelope) or (lambda record: None)
_BODY_TAGGERS = {name: _tagger(cls) for name, cls in BODY_TYPES.items()}

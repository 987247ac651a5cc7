"""Envelope model <-> the dict fastavro reads and writes."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from hermesbus.envelope import Envelope
from hermesbus.errors import ContractError
from hermesbus.payloads import BODY_TYPES

__all__ = ["to_model", "to_record"]


def to_record(envelope: Envelope) -> dict[str, Any]:
    """The Avro record of an envelope; the body union branch is named explicitly."""
    record = envelope.model_dump()
    body = envelope.payload.body
    if body is not None:
        payload = record["payload"]
        payload["body"] = (body.avro_name, payload["body"])
    return record


def to_model(record: dict[str, Any]) -> Envelope:
    """Validate a decoded record into an Envelope; a contract break raises ContractError."""
    try:
        payload = record["payload"]
        body = payload.get("body")
        if body is not None:
            name, fields = body
            cls = BODY_TYPES.get(name)
            if cls is None:
                raise ContractError(f"payload.body: unknown body type {name}")
            payload["body"] = cls.model_validate(fields)
        return Envelope.model_validate(record)
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

"""Short-term memory: the session's symbol table (symbol -> entity, created, TTL, validator).

It lives in the memory processor's session state (one session is processed in order),
so no store is needed. A ``MemoryWrite(tier=short_term)`` names its entity and validator
in ``value_json``: a JSON string is the entity checked by ``present``; an object
``{"entity": "...", "validator": "graph"}`` names another validator of the registry.
Expired (by envelope time), failing and unknown symbols are reported as invalid so the
asker clarifies.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any

from hermesbus.contract.payloads import MemoryWrite, TrustLevel
from hermesbus.processors.memory._emit import Refused
from hermesbus.processors.memory._model import trust_at_least
from hermesbus.processors.memory._ports import GraphStore

__all__ = [
    "DEFAULT_VALIDATOR",
    "VALIDATORS",
    "Symbol",
    "Validator",
    "is_expired",
    "lookup",
    "parse_symbol",
    "prune",
]

Validator = Callable[[str, GraphStore], Awaitable[bool]]
"""``async (entity, graph) -> bool``: is the entity a symbol points to still valid?"""

Symbol = dict[str, Any]
"""``{"entity": str, "created_ms": int, "ttl_s": int, "validator": str}`` (JSON state)."""

DEFAULT_VALIDATOR = "present"


async def _present(entity: str, graph: GraphStore) -> bool:
    """Valid while it is not expired: the entity is non-empty."""
    return bool(entity)


async def _graph(entity: str, graph: GraphStore) -> bool:
    """The entity is a live node of the graph trusted at verified or above."""
    node = await graph.node(entity)
    return (
        node is not None
        and not node.deprecated
        and trust_at_least(node.trust_level, TrustLevel.VERIFIED)
    )


VALIDATORS: Mapping[str, Validator] = MappingProxyType({"present": _present, "graph": _graph})
"""The named checks a symbol may carry; pass another mapping to MemoryStores to extend it."""


def parse_symbol(
    write: MemoryWrite, now_ms: int, default_ttl_s: int, validators: Mapping[str, Validator]
) -> Symbol | Refused:
    """The table entry a short-term write asks for, or why it cannot be kept."""
    try:
        value = json.loads(write.value_json)
    except ValueError:
        return Refused("memory.bad_value", f"symbol {write.key!r}: value_json is not JSON")
    if isinstance(value, dict):
        entity, validator = value.get("entity"), value.get("validator", DEFAULT_VALIDATOR)
    else:
        entity, validator = value, DEFAULT_VALIDATOR
    if not isinstance(entity, str) or not entity:
        return Refused(
            "memory.bad_value",
            f"symbol {write.key!r}: the entity must be a non-empty string",
            'send a JSON string or {"entity": "...", "validator": "..."}',
        )
    if not isinstance(validator, str) or validator not in validators:
        known = ", ".join(sorted(validators))
        return Refused(
            "memory.unknown_validator",
            f"symbol {write.key!r}: unknown validator {validator!r}",
            f"use one of: {known}",
        )
    ttl_s = default_ttl_s if write.ttl_s is None else write.ttl_s
    return {"entity": entity, "created_ms": now_ms, "ttl_s": ttl_s, "validator": validator}


def is_expired(symbol: Mapping[str, Any], now_ms: int) -> bool:
    return now_ms >= int(symbol["created_ms"]) + int(symbol["ttl_s"]) * 1000


def prune(symbols: Mapping[str, Mapping[str, Any]], now_ms: int) -> dict[str, Symbol]:
    """The table without its expired entries (keeps the session state small)."""
    return {name: dict(s) for name, s in symbols.items() if not is_expired(s, now_ms)}


async def lookup(
    symbols: Mapping[str, Mapping[str, Any]],
    names: tuple[str, ...],
    now_ms: int,
    validators: Mapping[str, Validator],
    graph: GraphStore,
) -> tuple[dict[str, str], tuple[str, ...]]:
    """(valid symbol -> entity, invalid names in asked order) for the names asked."""
    valid: dict[str, str] = {}
    invalid: list[str] = []
    for name in names:
        symbol = symbols.get(name)
        check = validators.get(str(symbol["validator"])) if symbol is not None else None
        if symbol is None or check is None or is_expired(symbol, now_ms):
            invalid.append(name)
        elif await check(str(symbol["entity"]), graph):
            valid[name] = str(symbol["entity"])
        else:
            invalid.append(name)
    return valid, tuple(dict.fromkeys(invalid))

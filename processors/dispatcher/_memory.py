"""Memory traffic outside cycles: writes from verified results, forwards of the conversation's.

Only a fresh result feeds memory — status 200, ``verified=True``, not ``stale`` and not a
``fallback`` answer: its ``facts`` become long-term edges verified by the tool at the
result's time, its ``symbols`` short-term symbols of the session (long-term memory
changes only on a tool's verification). A cached or fallback answer is old news stamped
with today's time: written, it could "win newest" and deprecate a newer edge. One result
feeds at most :data:`MAX_FACTS` facts and :data:`MAX_SYMBOLS` symbols (bounded output).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from hermesbus.contract.envelope import Envelope
from hermesbus.contract.payloads import (
    ContextValue,
    MemoryTier,
    MemoryWrite,
    StateSnapshot,
    ToolResult,
    TrustLevel,
    Verification,
)
from hermesbus.processors.dispatcher._emit import Effects
from hermesbus.processors.protocol import (
    OK,
    RESULT_FACTS,
    RESULT_SYMBOLS,
    SYMBOL_TTL_S,
    memory_at,
)

__all__ = [
    "MAX_FACTS",
    "MAX_SYMBOLS",
    "Written",
    "forward_snapshot",
    "forward_write",
    "is_fresh",
    "verified_writes",
]

log = logging.getLogger(__name__)

_FACT_KEYS = ("subject", "relation", "object")

MAX_FACTS: Final = 100
"""Long-term writes one result may cause; the rest are dropped, counted and alerted."""
MAX_SYMBOLS: Final = 100
"""Short-term writes one result may cause; the rest are dropped, counted and alerted."""


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _facts(tool: str, content: Mapping[str, Any]) -> list[dict[str, str]]:
    facts = content.get(RESULT_FACTS) or []
    good, bad = [], 0
    for fact in facts if isinstance(facts, list) else [facts]:
        if isinstance(fact, dict) and all(isinstance(fact.get(k), str) for k in _FACT_KEYS):
            good.append({k: fact[k] for k in _FACT_KEYS})
        else:
            bad += 1
    if bad:
        log.warning("tool %s: %d facts are not {subject, relation, object}: skipped", tool, bad)
    return good


def _symbols(tool: str, content: Mapping[str, Any]) -> dict[str, str]:
    symbols = content.get(RESULT_SYMBOLS) or {}
    if isinstance(symbols, dict) and all(isinstance(v, str) for v in symbols.values()):
        return {str(k): v for k, v in symbols.items()}
    log.warning("tool %s: symbols are not {name: entity}: skipped", tool)
    return {}


def is_fresh(result: ToolResult) -> bool:
    """A live, verified answer of the tool itself: the only kind that may change memory."""
    return result.status_code == OK and result.verified and not result.stale and not result.fallback


@dataclass(frozen=True, slots=True)
class Written:
    """What one result fed memory: writes sent, and facts/symbols over the caps dropped."""

    sent: int = 0
    dropped_facts: int = 0
    dropped_symbols: int = 0

    @property
    def dropped(self) -> int:
        return self.dropped_facts + self.dropped_symbols


def _content(result: ToolResult) -> dict[str, Any] | None:
    try:
        content = json.loads(result.result_json)
    except ValueError:
        log.warning("tool %s: result_json is not JSON: no memory writes", result.tool)
        return None
    return content if isinstance(content, dict) else None


def verified_writes(
    fx: Effects,
    result: ToolResult,
    *,
    task: str,
    context: Mapping[str, ContextValue],
    verified_at: datetime,
) -> Written:
    """Emit the long- and short-term writes of a fresh verified result, at most
    :data:`MAX_FACTS` facts and :data:`MAX_SYMBOLS` symbols; ``verified_at`` is when the
    tool's answer counts as verified (the caller bounds it by the call's deadline)."""
    content = _content(result) if is_fresh(result) else None
    if content is None:
        return Written()
    verification = Verification(tool=result.tool, verified_at=verified_at)
    facts = _facts(result.tool, content)
    for fact in facts[:MAX_FACTS]:
        key = "|".join(fact[k] for k in _FACT_KEYS)
        write = MemoryWrite(
            tier=MemoryTier.LONG_TERM,
            key=key,
            value_json=_dumps(fact),
            verified_by=verification,
            trust_level=TrustLevel.VERIFIED,
        )
        fx.send(memory_at(MemoryTier.LONG_TERM), write, task=task, context=context)
    symbols = list(_symbols(result.tool, content).items())
    for name, entity in symbols[:MAX_SYMBOLS]:
        write = MemoryWrite(
            tier=MemoryTier.SHORT_TERM, key=name, value_json=_dumps(entity), ttl_s=SYMBOL_TTL_S
        )
        fx.send(memory_at(MemoryTier.SHORT_TERM), write, task=task, context=context)
    sent = min(len(facts), MAX_FACTS) + min(len(symbols), MAX_SYMBOLS)
    return Written(sent, max(0, len(facts) - MAX_FACTS), max(0, len(symbols) - MAX_SYMBOLS))


def forward_snapshot(fx: Effects, envelope: Envelope, body: StateSnapshot) -> None:
    """A checked transition goes on to the session's short-term memory."""
    payload = envelope.payload
    target = memory_at(MemoryTier.SHORT_TERM)
    fx.send(target, body, task=payload.task, context=payload.context, snapshot=envelope.snapshot)


def forward_write(fx: Effects, envelope: Envelope, body: MemoryWrite) -> None:
    """A checked short- or mid-term write of the conversation goes to its tier."""
    payload = envelope.payload
    fx.send(memory_at(body.tier), body, task=payload.task, context=payload.context)

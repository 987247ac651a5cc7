"""The memory processor's handler (processor ``memory``, topic ``hermes.memory``).

``MemoryQuery`` -> one ``MemoryContext`` to the dispatcher (same context, so the cycle
id is kept); ``MemoryWrite`` -> applied to its tier, silently on success, an
``ErrorReport`` to the dispatcher when refused; ``StateSnapshot`` -> the session's
latest snapshot kept in state (nothing emitted; an S5 snapshot ends the session's
symbol table). Time is the envelope's timestamp. Writes of every tier are taken only
from ``mcp:dispatcher`` (``memory.untrusted_source``) and only with ``ttl_s`` at most
``MemorySettings.max_ttl_s`` (``memory.bad_ttl``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from hermesbus.contract.payloads import (
    MemoryContext,
    MemoryQuery,
    MemoryTier,
    MemoryWrite,
    StateSnapshot,
)
from hermesbus.errors import ConfigError
from hermesbus.processors.flow import EXPENSE_TERMINAL
from hermesbus.processors.memory._emit import Refused, audit_envelope, refusal_envelope, reply
from hermesbus.processors.memory._graph import facts_for, plan_write, subject_of
from hermesbus.processors.memory._midterm import apply_mid_term, preferences_for
from hermesbus.processors.memory._model import GraphPlan, millis
from hermesbus.processors.memory._ports import GraphReader
from hermesbus.processors.memory._stores import MemoryStores
from hermesbus.processors.memory._symbols import lookup, parse_symbol, prune
from hermesbus.processors.protocol import DISPATCHER_ADDRESS, ENDS, MEMORY
from hermesbus.runtime import HandlerInput, Outcome

__all__ = ["NAME", "TERMINAL_STATE", "TOPIC", "handle"]

NAME = MEMORY
"""Processor name (consumer group) and the key of its port in ``HandlerInput.ports``."""
TOPIC = "hermes.memory"
TERMINAL_STATE = EXPENSE_TERMINAL
"""A snapshot of this state of the expense report ends the session: its short-term symbols
are dropped (a registered flow's snapshot says so itself: ``ends``)."""

log = logging.getLogger(__name__)


def _stores(inp: HandlerInput) -> MemoryStores:
    stores = inp.ports.get(NAME)
    if not isinstance(stores, MemoryStores):
        raise ConfigError(f'the memory handler needs ports["{NAME}"] = MemoryStores(...)')
    return stores


async def handle(inp: HandlerInput) -> Outcome:
    """Answer queries, apply writes, keep snapshots; anything else is left alone."""
    body = inp.envelope.payload.body
    if isinstance(body, MemoryQuery):
        return await _query(inp, body, _stores(inp))
    if isinstance(body, MemoryWrite):
        return await _write(inp, body, _stores(inp))
    if isinstance(body, StateSnapshot):
        return _snapshot(inp, body)
    return Outcome()


def _symbols(state: Mapping[str, Any]) -> Mapping[str, Mapping[str, Any]]:
    symbols = state.get("symbols")
    return symbols if isinstance(symbols, Mapping) else {}


async def _query(inp: HandlerInput, query: MemoryQuery, stores: MemoryStores) -> Outcome:
    envelope = inp.envelope
    now_ms = millis(envelope.timestamp)
    symbols, invalid = await lookup(
        _symbols(inp.state.data), query.symbols, now_ms, stores.validators, stores.graph
    )
    preferences, candidates = await preferences_for(
        query.preferences,
        envelope.user_id,
        now_ms,
        stores.preferences,
        stores.settings.choice_threshold,
    )
    facts = await facts_for(query.entity, query.trust_level, stores.graph) if query.entity else ()
    context = MemoryContext(
        symbols=symbols,
        preferences=preferences,
        facts=facts,
        invalid=invalid,
        candidates=candidates,
    )
    answer = reply(envelope, 0, target=DISPATCHER_ADDRESS, body=context, task=envelope.payload.task)
    return Outcome(emit=(answer,))


def _admit(write: MemoryWrite, source: str, max_ttl_s: int) -> Refused | None:
    """Every tier takes writes only from the dispatcher, and only with a bounded TTL."""
    if source != DISPATCHER_ADDRESS:
        return Refused(
            "memory.untrusted_source",
            f"{write.tier.value} write {write.key!r} came from {source!r}, "
            f"not {DISPATCHER_ADDRESS}",
            "send memory writes through the dispatcher, which checks them",
        )
    if write.ttl_s is not None and write.ttl_s > max_ttl_s:
        return Refused(
            "memory.bad_ttl",
            f"{write.tier.value} write {write.key!r}: ttl_s = {write.ttl_s} > {max_ttl_s}",
            f"ask for at most {max_ttl_s} s (HERMES_MEMORY_MAX_TTL_S)",
        )
    return None


async def _write(inp: HandlerInput, write: MemoryWrite, stores: MemoryStores) -> Outcome:
    envelope = inp.envelope
    now_ms = millis(envelope.timestamp)
    refused = _admit(write, envelope.source, stores.settings.max_ttl_s)
    if refused is not None:
        return _refuse(inp, write, refused)
    if write.tier is MemoryTier.SHORT_TERM:
        entry = parse_symbol(write, now_ms, stores.settings.symbol_ttl_s, stores.validators)
        if isinstance(entry, Refused):
            return _refuse(inp, write, entry)
        symbols = {**prune(_symbols(inp.state.data), now_ms), write.key: entry}
        return Outcome(state={**inp.state.data, "symbols": symbols})
    if write.tier is MemoryTier.MID_TERM:
        refused = await apply_mid_term(
            write,
            user_id=envelope.user_id,
            message_id=envelope.message_id,
            now_ms=now_ms,
            store=stores.preferences,
            settings=stores.settings,
        )
        return Outcome() if refused is None else _refuse(inp, write, refused)

    async def planner(graph: GraphReader) -> GraphPlan | Refused:
        return await plan_write(
            write, envelope.source, envelope.message_id, graph, stores.settings, now_ms=now_ms
        )

    # the conflict rule reads and writes in one transaction, the fact's subject locked
    applied = await stores.graph.decide(
        envelope.message_id,
        planner,
        lock=subject_of(write),
        keep_changes=stores.settings.change_ledger,
    )
    if isinstance(applied, Refused):
        return _refuse(inp, write, applied)
    audits = tuple(audit_envelope(envelope, i, e) for i, e in enumerate(applied.events))
    return Outcome(emit=audits)


def _refuse(inp: HandlerInput, write: MemoryWrite, refused: Refused) -> Outcome:
    log.info(
        "memory refused %s write %s from %s: %s",
        write.tier.value,
        write.key,
        inp.envelope.source,
        refused.code,
    )
    return Outcome(emit=(refusal_envelope(inp.envelope, write.tier, refused),))


def _snapshot(inp: HandlerInput, body: StateSnapshot) -> Outcome:
    """Keep the latest snapshot; the terminal state (a flow's says so: ``ENDS``) drops the
    symbol table."""
    latest = {
        **body.snapshot.model_dump(mode="json"),
        "previous_state": body.previous_state,
        "trigger": body.trigger,
    }
    state: dict[str, Any] = {**inp.state.data, "snapshot": latest}
    expense_ended = body.snapshot.flow is None and body.snapshot.state_id == TERMINAL_STATE
    if expense_ended or inp.envelope.payload.context.get(ENDS) is True:
        state["symbols"] = {}
    return Outcome(state=state)

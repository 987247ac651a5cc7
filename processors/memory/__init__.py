"""The memory processor: three tiers of memory behind one handler.

- short-term: a symbol table per session (symbol -> entity, created, TTL, validator) in
  the session state; expired or invalid symbols come back in ``MemoryContext.invalid``;
- mid-term: preferences written only with ``confirmed_by``, repeated choices proposed as
  candidates, and items with importance and TTL under a per-user budget;
- long-term: an entity graph changed only by tool-verified facts from the dispatcher,
  queried by trust level, with conflict resolution and every change sent to ``audit:graph``.

Wiring: ``async with hermesbus.compose.backends.memory_stores() as stores:`` (the stores the
settings pick) then run ``handle`` as processor ``NAME`` with ``ports={NAME: stores}``.
"""

from hermesbus.processors.memory._handler import NAME, TERMINAL_STATE, TOPIC, handle
from hermesbus.processors.memory._model import (
    TRUST_RANK,
    ChoiceCount,
    Edge,
    GraphEvent,
    GraphPlan,
    GraphTask,
    MidTermItem,
    Node,
    Preference,
    ReviewItem,
    millis,
    trust_at_least,
)
from hermesbus.processors.memory._ports import (
    CHANGE_LEDGER,
    CHOICE_HISTORY,
    GraphReader,
    GraphStore,
    Planner,
    PreferenceStore,
)
from hermesbus.processors.memory._settings import MAX_TTL_S, MemorySettings
from hermesbus.processors.memory._stores import MemoryStores
from hermesbus.processors.memory._symbols import DEFAULT_VALIDATOR, VALIDATORS, Validator

__all__ = [
    "CHANGE_LEDGER",
    "CHOICE_HISTORY",
    "DEFAULT_VALIDATOR",
    "MAX_TTL_S",
    "NAME",
    "TERMINAL_STATE",
    "TOPIC",
    "TRUST_RANK",
    "VALIDATORS",
    "ChoiceCount",
    "Edge",
    "GraphEvent",
    "GraphPlan",
    "GraphReader",
    "GraphStore",
    "GraphTask",
    "MemorySettings",
    "MemoryStores",
    "MidTermItem",
    "Node",
    "Planner",
    "Preference",
    "PreferenceStore",
    "ReviewItem",
    "Validator",
    "handle",
    "millis",
    "trust_at_least",
]

"""Value types the memory stores keep: preferences, mid-term items, graph nodes and edges.

They are frozen pydantic models so every backend (SQLite now, Redis and Neo4j later)
stores and returns exactly the same shapes; times are epoch milliseconds taken from
envelopes, never from a clock.
"""

from __future__ import annotations

import enum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from hermesbus.contract.fields import epoch_ms
from hermesbus.contract.payloads import TrustLevel

__all__ = [
    "TRUST_RANK",
    "ChoiceCount",
    "Edge",
    "GraphEvent",
    "GraphPlan",
    "GraphTask",
    "MidTermItem",
    "Node",
    "Preference",
    "ReviewItem",
    "millis",
    "trust_at_least",
]

TRUST_RANK: dict[TrustLevel, int] = {
    TrustLevel.RAW: 0,
    TrustLevel.VERIFIED: 1,
    TrustLevel.CERTIFIED: 2,
}


millis = epoch_ms
"""Epoch milliseconds of an envelope time (the stores keep integers)."""


def trust_at_least(level: TrustLevel, minimum: TrustLevel) -> bool:
    """raw < verified < certified: a query at ``minimum`` sees ``level`` when this holds."""
    return TRUST_RANK[level] >= TRUST_RANK[minimum]


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Preference(_Value):
    """A confirmed preference, stored as ``pref:{user_id}:{name}``."""

    user_id: str
    name: str
    value_json: str
    updated_at_ms: int
    confirmed_by: str
    expires_at_ms: int | None = None

    @property
    def key(self) -> str:
        return f"pref:{self.user_id}:{self.name}"


class ChoiceCount(_Value):
    """How often a user chose ``value_json`` for ``name``, and when last."""

    value_json: str
    count: int
    last_at_ms: int


class MidTermItem(_Value):
    """Any other mid-term item (e.g. ``unfinished:<session>``), budgeted per user."""

    user_id: str
    key: str
    value_json: str
    importance: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5
    created_at_ms: int
    updated_at_ms: int
    expires_at_ms: int | None = None
    confirmed_by: str | None = None


class Node(_Value):
    """A graph entity (``user:u_xyz789``, ``dept:采购部``) and its latest verification."""

    entity: str
    trust_level: TrustLevel
    verified_tool: str
    verified_at_ms: int
    deprecated: bool = False


class Edge(_Value):
    """``subject -relation-> object`` with its verification; deprecated edges are kept."""

    subject: str
    relation: str
    object: str
    trust_level: TrustLevel
    verified_tool: str
    verified_at_ms: int
    deprecated: bool = False

    @property
    def key(self) -> str:
        return f"{self.subject}|{self.relation}|{self.object}"


class ReviewItem(_Value):
    """A fact held back for human review: it conflicts with ``conflicts_with`` too closely."""

    review_id: str
    edge: Edge
    conflicts_with: Edge
    queued_at_ms: int


class GraphTask(enum.StrEnum):
    """``payload.task`` of the audit envelope of each graph change."""

    CREATED = "graph.created"
    DEPRECATED = "graph.deprecated"
    REVIEW = "graph.review"
    REFRESHED = "graph.refreshed"
    """An identical live fact verified again: its ``verified_by`` or trust changed."""


class GraphEvent(_Value):
    """One change to report to ``audit:graph``; ``related`` is the other edge's key."""

    task: GraphTask
    edge: Edge
    related: str = ""


class GraphPlan(_Value):
    """Everything one long-term write changes, applied in one transaction by the store.

    ``change_id`` (the write envelope's id) makes the apply idempotent: a redelivered
    write gets the plan recorded the first time back, so it reports the same events.
    """

    change_id: str
    nodes: tuple[Node, ...] = ()
    edges: tuple[Edge, ...] = ()
    """Edges in their new state (upserted by subject, relation, object)."""
    reviews: tuple[ReviewItem, ...] = ()
    events: tuple[GraphEvent, ...] = ()

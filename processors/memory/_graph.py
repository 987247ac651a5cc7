"""Long-term memory: the entity graph, changed only by tool-verified facts.

A write ``"<subject>|<relation>|<object>"`` is accepted only from the dispatcher and only
with ``verified_by``. Relations are single-valued per (subject, relation) unless listed
in ``MemorySettings.multi_valued``. A rival object verified less than the conflict window
apart goes to the review queue (nothing changes); otherwise the newest verification wins
and the loser is kept, deprecated. A repeated identical fact refreshes its verification
(audited as ``graph.refreshed`` when that changes its ``verified_by`` or trust).

Trust in the writer: ``source == "mcp:dispatcher"`` is only a string check of the
envelope; at this layer nothing more is possible, since any producer on ``hermes.memory``
can write that string. The real guard is the broker: Kafka ACLs on ``hermes.memory`` let
only the dispatcher's principal produce there. The check here catches mistakes (a
processor writing long-term memory directly), not a hostile producer.

Trust and time are not taken on the writer's word: a forwarded fact is stored at most
``verified`` (:data:`FORWARDED_TRUST`) whatever ``trust_level`` it claims, because the
dispatcher only relays what a tool verified; ``certified`` (a human or an authority
vouching for the fact) needs a separate, explicit path, e.g. a review decision applied
through ``GraphStore.decide``; no envelope reaches it. And a ``verified_by.verified_at``
later than the write's envelope time plus ``MemorySettings.future_skew_s`` is refused
(``memory.future_verification``): a fact "verified" in the future would win every
conflict and deprecate the true, later fact on arrival.
"""

from __future__ import annotations

import json

from hermesbus.contract.payloads import MemoryFact, MemoryWrite, TrustLevel, Verification
from hermesbus.processors.memory._emit import Refused
from hermesbus.processors.memory._model import (
    TRUST_RANK,
    Edge,
    GraphEvent,
    GraphPlan,
    GraphTask,
    Node,
    ReviewItem,
    millis,
)
from hermesbus.processors.memory._ports import GraphReader, GraphStore
from hermesbus.processors.memory._settings import MemorySettings
from hermesbus.processors.protocol import DISPATCHER_ADDRESS

__all__ = ["FORWARDED_TRUST", "facts_for", "parse_fact", "plan_write", "subject_of"]

FORWARDED_TRUST = TrustLevel.VERIFIED
"""The highest trust a fact written through the bus is stored with."""


def subject_of(write: MemoryWrite) -> str:
    """The entity a long-term write is about, which ``GraphStore.decide`` locks: the
    key's first part (a malformed key is refused by the planner, under its own name)."""
    return write.key.split("|", 1)[0] or write.key


def parse_fact(write: MemoryWrite) -> tuple[str, str, str] | Refused:
    """(subject, relation, object) from the key; a value naming other parts is refused."""
    parts = write.key.split("|")
    if len(parts) != 3 or not all(parts):  # noqa: PLR2004 - subject|relation|object
        return Refused(
            "memory.bad_key", f"{write.key!r}: a long-term key is '<subject>|<relation>|<object>'"
        )
    subject, relation, object_ = parts
    try:
        value = json.loads(write.value_json)
    except ValueError:
        return Refused("memory.bad_value", f"{write.key!r}: value_json is not JSON")
    if isinstance(value, dict):
        stated = (value.get("subject"), value.get("relation"), value.get("object"))
        if stated not in ((None, None, None), (subject, relation, object_)):
            return Refused("memory.bad_value", f"{write.key!r}: value_json states another fact")
    return subject, relation, object_


def _refusal(write: MemoryWrite, source: str, latest_ms: int) -> Refused | None:
    if source != DISPATCHER_ADDRESS:
        return Refused(
            "memory.untrusted_source",
            f"long-term write {write.key!r} came from {source!r}, not {DISPATCHER_ADDRESS}",
            "only tool-verified facts forwarded by the dispatcher change the graph",
        )
    if write.verified_by is None:
        return Refused(
            "memory.unverified_fact",
            f"long-term write {write.key!r} has no verified_by",
            "let a tool verify the fact; the dispatcher forwards verified facts",
        )
    if millis(write.verified_by.verified_at) > latest_ms:
        return Refused(
            "memory.future_verification",
            f"long-term write {write.key!r} claims verified_at = "
            f"{write.verified_by.verified_at.isoformat()}, after the write itself",
            "stamp verified_at with the time the tool answered, never later",
        )
    return None


async def plan_write(
    write: MemoryWrite,
    source: str,
    change_id: str,
    graph: GraphReader,
    settings: MemorySettings,
    *,
    now_ms: int,
) -> GraphPlan | Refused:
    """What the write changes in the graph (for ``GraphStore.decide``), or why it is refused;
    ``now_ms`` is the write envelope's time (a verification may not be later, bar skew)."""
    refused = _refusal(write, source, now_ms + settings.future_skew_s * 1000)
    verified = write.verified_by
    if refused is not None or verified is None:
        return refused or Refused("memory.unverified_fact", f"{write.key!r} has no verified_by")
    parsed = parse_fact(write)
    if isinstance(parsed, Refused):
        return parsed
    subject, relation, object_ = parsed
    new = Edge(
        subject=subject,
        relation=relation,
        object=object_,
        trust_level=_lower(write.trust_level, FORWARDED_TRUST),
        verified_tool=verified.tool,
        verified_at_ms=millis(verified.verified_at),
    )
    rivals: tuple[Edge, ...] = ()
    if relation not in settings.multi_valued:
        rivals = tuple(
            e
            for e in await graph.edges_from(subject, relation)
            if not e.deprecated and e.object != object_
        )
    if not rivals:
        return await _unopposed(new, change_id, graph)
    return await _contested(new, rivals, change_id, graph, settings.conflict_window_s * 1000)


async def _contested(
    new: Edge, rivals: tuple[Edge, ...], change_id: str, graph: GraphReader, window_ms: int
) -> GraphPlan:
    """A single-valued relation with a live rival: review, supersede, or lose."""
    rival = max(rivals, key=lambda e: (e.verified_at_ms, e.object))
    if abs(new.verified_at_ms - rival.verified_at_ms) < window_ms:
        review = ReviewItem(
            review_id=change_id, edge=new, conflicts_with=rival, queued_at_ms=new.verified_at_ms
        )
        event = GraphEvent(task=GraphTask.REVIEW, edge=new, related=rival.key)
        return GraphPlan(change_id=change_id, reviews=(review,), events=(event,))
    nodes = await _nodes(new, graph)
    if new.verified_at_ms > rival.verified_at_ms:
        old = tuple(e.model_copy(update={"deprecated": True}) for e in rivals)
        events = tuple(GraphEvent(task=GraphTask.DEPRECATED, edge=e, related=new.key) for e in old)
        created = GraphEvent(task=GraphTask.CREATED, edge=new, related=rival.key)
        return GraphPlan(
            change_id=change_id, nodes=nodes, edges=(*old, new), events=(*events, created)
        )
    lost = new.model_copy(update={"deprecated": True})  # an older verification loses
    event = GraphEvent(task=GraphTask.DEPRECATED, edge=lost, related=rival.key)
    return GraphPlan(change_id=change_id, nodes=nodes, edges=(lost,), events=(event,))


async def _unopposed(new: Edge, change_id: str, graph: GraphReader) -> GraphPlan:
    """No rival: create the edge, or refresh the identical one (``graph.refreshed`` when
    its verification or trust changed; nothing to audit when it did not)."""
    nodes = await _nodes(new, graph)
    same = await graph.edge(new.subject, new.relation, new.object)
    if same is None or same.deprecated:
        event = GraphEvent(task=GraphTask.CREATED, edge=new)
        return GraphPlan(change_id=change_id, nodes=nodes, edges=(new,), events=(event,))
    latest = new if new.verified_at_ms >= same.verified_at_ms else same
    refreshed = latest.model_copy(
        update={"trust_level": _higher(same.trust_level, new.trust_level)}
    )
    if refreshed == same:
        return GraphPlan(change_id=change_id, nodes=nodes)
    event = GraphEvent(task=GraphTask.REFRESHED, edge=refreshed)
    return GraphPlan(change_id=change_id, nodes=nodes, edges=(refreshed,), events=(event,))


def _higher(a: TrustLevel, b: TrustLevel) -> TrustLevel:
    return a if TRUST_RANK[a] >= TRUST_RANK[b] else b


def _lower(a: TrustLevel, b: TrustLevel) -> TrustLevel:
    return a if TRUST_RANK[a] <= TRUST_RANK[b] else b


async def _nodes(edge: Edge, graph: GraphReader) -> tuple[Node, ...]:
    """Subject and object nodes carrying the newest verification and the highest trust."""
    nodes = []
    for entity in dict.fromkeys((edge.subject, edge.object)):
        old = await graph.node(entity)
        node = Node(
            entity=entity,
            trust_level=edge.trust_level,
            verified_tool=edge.verified_tool,
            verified_at_ms=edge.verified_at_ms,
        )
        if old is not None:
            newest = node if node.verified_at_ms >= old.verified_at_ms else old
            trust = _higher(old.trust_level, edge.trust_level)
            node = newest.model_copy(update={"trust_level": trust, "deprecated": old.deprecated})
        nodes.append(node)
    return tuple(nodes)


async def facts_for(entity: str, trust: TrustLevel, graph: GraphStore) -> tuple[MemoryFact, ...]:
    """The entity's live facts at ``trust`` or above, as ``MemoryContext.facts``."""
    return tuple(
        MemoryFact(
            subject=e.subject,
            relation=e.relation,
            object=e.object,
            trust_level=e.trust_level,
            verified_by=Verification(tool=e.verified_tool, verified_at=e.verified_at_ms),
            deprecated=e.deprecated,
        )
        for e in await graph.facts(entity, trust)
    )

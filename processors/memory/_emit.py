"""The envelopes memory emits: context answers, refusals and audit records of graph changes."""

from __future__ import annotations

import json
from dataclasses import dataclass

from hermesbus.contract.envelope import Envelope
from hermesbus.contract.payloads import (
    Body,
    ContextValue,
    ErrorReport,
    MemoryTier,
    MemoryWrite,
    Verification,
)
from hermesbus.processors.memory._model import Edge, GraphEvent
from hermesbus.processors.protocol import AUDIT, DISPATCHER_ADDRESS, answer, memory_at

__all__ = ["Refused", "audit_envelope", "edge_write", "refusal_envelope", "reply"]


@dataclass(frozen=True, slots=True)
class Refused:
    """Why a write was not applied; becomes an ``ErrorReport`` to the dispatcher."""

    code: str
    message: str
    advice: str = ""


def reply(
    inp: Envelope,
    index: int,
    *,
    target: str,
    body: Body,
    task: str,
    context: dict[str, ContextValue] | None = None,
) -> Envelope:
    """An envelope answering ``inp``: same trace, session, user and time; a derived span."""
    return answer(
        inp,
        index,
        source=inp.target,
        target=target,
        body=body,
        task=task,
        context=inp.payload.context if context is None else context,
    )


def refusal_envelope(inp: Envelope, tier: MemoryTier, refused: Refused) -> Envelope:
    """``ErrorReport(component="memory:<tier>", code="memory.<why>")`` to the dispatcher."""
    report = ErrorReport(
        component=memory_at(tier),
        code=refused.code,
        message=refused.message,
        advice=refused.advice,
        retryable=False,
    )
    return reply(inp, 0, target=DISPATCHER_ADDRESS, body=report, task=inp.payload.task)


def edge_write(edge: Edge) -> MemoryWrite:
    """The long-term ``MemoryWrite`` that describes ``edge`` in its current state."""
    fact = {"subject": edge.subject, "relation": edge.relation, "object": edge.object}
    return MemoryWrite(
        tier=MemoryTier.LONG_TERM,
        key=edge.key,
        value_json=json.dumps(fact, ensure_ascii=False, sort_keys=True),
        verified_by=Verification(tool=edge.verified_tool, verified_at=edge.verified_at_ms),
        trust_level=edge.trust_level,
    )


def audit_envelope(inp: Envelope, index: int, event: GraphEvent) -> Envelope:
    """One graph change to ``audit:graph``; context ``related`` names the other edge."""
    context: dict[str, ContextValue] = {"deprecated": event.edge.deprecated}
    if event.related:
        context["related"] = event.related
    return reply(
        inp,
        index,
        target=AUDIT,
        body=edge_write(event.edge),
        task=event.task.value,
        context=context,
    )

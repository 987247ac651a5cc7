"""Who may call what, how often: checked when memory has answered, before any call goes out.

The user's roles are the ``has_role`` facts memory answers the round with (verified or
certified, not deprecated: a role is a fact a tool verified, never something the user
said). Each call waiting in the round is put to the access port in the cycle's tool order;
the first refusal fails the round fast, naming the tool, with the one sentence the user is
told; nothing of the round goes out. The refusal is counted in the session's state and
alerted on ``alerts:dispatcher``; what was decided is recorded on the envelopes sent (the
dispatched call's ``context["access"]``, the refusal's), so a replay decides the same.
"""

from __future__ import annotations

from hermesbus.contract.payloads import ErrorReport, MemoryContext, TrustLevel
from hermesbus.processors.dispatcher._dispatch import cycle_context, fail
from hermesbus.processors.dispatcher._emit import ALERTS_ADDRESS, Effects
from hermesbus.processors.dispatcher._ports import Ports
from hermesbus.processors.dispatcher._state import CallStatus, Cycle, DispatcherState
from hermesbus.processors.protocol import (
    ACCESS,
    ADMITTED,
    FORBIDDEN,
    HAS_ROLE,
    Admission,
    tool_at,
)

__all__ = ["refused", "roles_of"]

_ROLE = "role:"


def roles_of(memory: MemoryContext | None, user: str) -> frozenset[tuple[str, str]]:
    """The roles memory holds for ``user`` as verified facts, each with the tool that
    verified it (the access rules say which tools may grant a role)."""
    if memory is None or not user:
        return frozenset()
    subject = f"user:{user}"
    return frozenset(
        (fact.object.removeprefix(_ROLE), fact.verified_by.tool)
        for fact in memory.facts
        if fact.subject == subject
        and fact.relation.lower() == HAS_ROLE
        and fact.object.startswith(_ROLE)
        and fact.trust_level is not TrustLevel.RAW
        and fact.verified_by is not None
        and not fact.deprecated
    )


async def refused(
    fx: Effects, state: DispatcherState, cid: str, cycle: Cycle, ports: Ports
) -> bool:
    """Put the round's waiting calls to the access port, roles first for every call (so a
    round refused for a role uses no quota), then their limits; True when one was refused
    (the round then failed, told and alerted)."""
    if ports.access is None:
        return False
    waiting = [
        (tool, call)
        for tool in cycle.tools
        if (call := cycle.calls.get(tool)) is not None and call.status is CallStatus.WAITING
    ]
    for counted in (False, True):
        for tool, call in waiting:
            if counted and not call.access:
                continue  # a tool without rules: nothing to count, no store to ask again
            envelope = call.envelope
            user = envelope.user_id or ""
            key = getattr(envelope.payload.body, "idempotency_key", "") or envelope.message_id
            roles = roles_of(cycle.memory, user)
            admission = await ports.access.admit(tool, user, roles, fx.now_ms, key, count=counted)
            if admission.refusal is not None:
                _refuse(fx, state, cid, cycle, tool=tool, admission=admission)
                return True
            call.access = ADMITTED if admission.checked else ""
    return False


def _refuse(
    fx: Effects, state: DispatcherState, cid: str, cycle: Cycle, *, tool: str, admission: Admission
) -> None:
    """Fail the round naming the tool, with the sentence; alert and count it."""
    code, told = admission.refusal or FORBIDDEN, admission.reason
    component = tool_at(tool)
    context = {ACCESS: code, "tool": tool}
    later = code != FORBIDDEN  # a rate or a quota passes; a role does not come by waiting
    fail(fx, cid, cycle, component=component, code=code, message=told, advice="",
         retryable=later, context=context)  # fmt: skip
    alert = ErrorReport(component=component, code=f"access.{code}", message=told)
    fx.send(ALERTS_ADDRESS, alert, task=cycle.task, context=cycle_context(cid, cycle) | context)
    state.refused_calls[code] = state.refused_calls.get(code, 0) + 1

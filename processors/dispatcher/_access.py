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
from hermesbus.processors.protocol import ACCESS, ADMITTED, HAS_ROLE, tool_at

__all__ = ["refused", "roles_of"]

_ROLE = "role:"


def roles_of(memory: MemoryContext | None, user: str) -> frozenset[str]:
    """The roles memory holds for ``user`` as verified facts."""
    if memory is None or not user:
        return frozenset()
    subject = f"user:{user}"
    return frozenset(
        fact.object.removeprefix(_ROLE)
        for fact in memory.facts
        if fact.subject == subject
        and fact.relation.lower() == HAS_ROLE
        and fact.object.startswith(_ROLE)
        and fact.trust_level is not TrustLevel.RAW
        and not fact.deprecated
    )


async def refused(
    fx: Effects, state: DispatcherState, cid: str, cycle: Cycle, ports: Ports
) -> bool:
    """Put the round's waiting calls to the access port; True when one was refused (the
    round then failed, told and alerted)."""
    if ports.access is None:
        return False
    for tool in cycle.tools:
        call = cycle.calls.get(tool)
        if call is None or call.status is not CallStatus.WAITING:
            continue
        envelope = call.envelope
        user = envelope.user_id or ""
        key = getattr(envelope.payload.body, "idempotency_key", "") or envelope.message_id
        roles = roles_of(cycle.memory, user)
        admission = await ports.access.admit(tool, user, roles, fx.now_ms, key)
        if admission.refusal is None:
            call.access = ADMITTED if admission.checked else ""
            continue
        code, told = admission.refusal, admission.reason
        component = tool_at(tool)
        context = {ACCESS: code, "tool": tool}
        fail(fx, cid, cycle, component=component, code=code, message=told, advice="",
             retryable=False, context=context)  # fmt: skip
        alert = ErrorReport(component=component, code=f"access.{code}", message=told)
        fx.send(ALERTS_ADDRESS, alert, task=cycle.task, context=cycle_context(cid, cycle) | context)
        state.refused_calls[code] = state.refused_calls.get(code, 0) + 1
        return True
    return False

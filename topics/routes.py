"""Which topic an envelope goes to, from the component part of its ``target``.

``tool:rule_engine_tool`` goes to ``hermes.tool``, ``mcp:dispatcher`` to
``hermes.dispatcher``; replies to a user (``user:...`` or ``app:...``) go to
``hermes.conversation.out``, where apps read them; ``audit:graph`` to ``hermes.audit`` and
``alerts:tool`` to ``hermes.alerts``, ``diagnostics:<key>`` to ``hermes.diagnostics``.
"""

from __future__ import annotations

from hermesbus.errors import ConfigError

__all__ = [
    "ALERTS",
    "AUDIT",
    "CONVERSATION_IN",
    "CONVERSATION_OUT",
    "DIAGNOSTICS",
    "DLQ",
    "FLOWS",
    "IDENTITY_ALIASES",
    "ROUTES",
    "identity_of",
    "topic_for",
]

CONVERSATION_IN = "hermes.conversation.in"
CONVERSATION_OUT = "hermes.conversation.out"
DLQ = "hermes.dlq"
AUDIT = "hermes.audit"
ALERTS = "hermes.alerts"
DIAGNOSTICS = "hermes.diagnostics"
"""The diagnostics rollup's closed windows (``WindowRollup``), keyed by rollup key."""
FLOWS = "hermes.flows"
"""The flow registry: one signed record per registered flow version (compacted)."""

ROUTES: dict[str, str] = {
    "conversation": CONVERSATION_IN,
    "mcp": "hermes.dispatcher",
    "dispatcher": "hermes.dispatcher",
    "tool": "hermes.tool",
    "model": "hermes.tool",
    "memory": "hermes.memory",
    "user": CONVERSATION_OUT,
    "app": CONVERSATION_OUT,
    "audit": AUDIT,
    "alerts": ALERTS,
    "diagnostics": DIAGNOSTICS,
}


def topic_for(target: str, prefix: str = "") -> str:
    """The topic for an envelope addressed to ``target`` (``component:instance``)."""
    component = target.split(":", 1)[0]
    topic = ROUTES.get(component)
    if topic is None:
        known = ", ".join(sorted(ROUTES))
        raise ConfigError(f"no topic for target {target!r}: component must be one of {known}")
    return prefix + topic


IDENTITY_ALIASES: dict[str, str] = {"mcp": "dispatcher", "model": "tool"}
"""Components whose address names differ from the identity that signs for them: the
dispatcher speaks as ``mcp:dispatcher`` (the design's name for it), the tool processor
answers for the model as ``model:chat``."""


def identity_of(address: str) -> str:
    """The identity that must have signed an envelope whose ``source`` is ``address``."""
    component = address.split(":", 1)[0]
    return IDENTITY_ALIASES.get(component, component)

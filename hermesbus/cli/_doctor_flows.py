"""``hermesbus doctor``'s flow registry check: what the registry topic holds, as every
processor reads it, and what in it is not believed. Read-only, like the other checks."""

from __future__ import annotations

from hermesbus.compose.flows import read_flows
from hermesbus.compose.settings import Settings
from hermesbus.errors import ConfigError

from ._check import Check

__all__ = ["flows_check"]

NAME = "flows"
_SHOWN = 3


async def flows_check(settings: Settings, prefix: str) -> list[Check]:
    """Every registered flow with its newest version; a warning for each record the readers
    refuse (unsigned, signed by another identity or a key rotated out, no valid spec), for
    other text written for a taken version, and for agent states with no model to ask."""
    try:
        keys = settings.keys.load()
    except ConfigError as exc:
        return [Check(NAME, "skip", f"not checked: no keys to verify the registry with ({exc})")]
    registered = await read_flows(settings.kafka, prefix, keys)
    flows = registered.flows()
    newest = [v for v in (registered.newest(flow) for flow in flows) if v is not None]
    if flows:
        listed = ", ".join(f"{v.spec.flow} v{v.spec.version}" for v in newest)
        said = f"{len(flows)} registered on {registered.topic}: {listed}"
    else:
        said = f"none registered on {registered.topic}"
    agents = [v.spec.flow for v in newest if any(s.kind == "agent" for s in v.spec.states)]
    checks = []
    if agents and not settings.conversation.llm_url:
        checks.append(
            Check(
                NAME,
                "warn",
                f"{', '.join(agents)}: agent states, and HERMES_LLM_URL is not set: their "
                "model rounds are answered that no model is configured, and they fail",
                "set HERMES_LLM_URL (and _MODEL, _API_KEY) to an OpenAI-compatible endpoint "
                "with tool calling; `up --demo` answers them with its scripted model",
            )
        )
    doubtful = sorted([*registered.refused, *registered.conflicts], key=lambda r: r.offset)
    if not doubtful:
        return [Check(NAME, "ok", said), *checks]
    shown = "; ".join(f"offset {r.offset} ({r.key}): {r.reason}" for r in doubtful[:_SHOWN])
    more = f"; and {len(doubtful) - _SHOWN} more" if len(doubtful) > _SHOWN else ""
    fix = (
        "readers skip these records; `hermesbus flows list` names them. A version signed "
        "with a key rotated out: register its text again (it is signed anew)"
    )
    return [
        Check(NAME, "warn", f"{said}; {len(doubtful)} not believed: {shown}{more}", fix),
        *checks,
    ]

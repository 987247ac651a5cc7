"""The conversation's per-session state (saved as JSON) and the snapshot drawn from it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hermesbus.contract.fields import from_epoch_ms
from hermesbus.contract.snapshot import ContextSnapshot, ToolCallTrace
from hermesbus.errors import StoreError
from hermesbus.processors.conversation._history import History
from hermesbus.runtime import carried_model

__all__ = [
    "MAX_PROBLEMS",
    "MAX_TRACES",
    "NEW",
    "Pending",
    "Session",
    "canonical_json",
    "digest",
    "load_session",
    "snapshot_of",
    "summary_of",
]

MAX_TRACES: Final = 16
MAX_PROBLEMS: Final = 10
"""Recent problems (failures, refusals outside a cycle) kept in the session state."""
SUMMARY_CHARS: Final = 50
NEW: Final = "new"
"""Where a session is before it enters its flow's first state (the source of its first
replies: a flow that cannot start says so from here)."""


class Pending(BaseModel):
    """The cycle the conversation waits for: its id, task and tools, and the turn it serves."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cycle: str
    task: str
    tools: tuple[str, ...]
    turn_id: str


class Session(BaseModel):
    """Everything the conversation keeps about one session; small and JSON-serialisable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    state: str | None = None
    entered_at_ms: int = 0
    facts: dict[str, str] = Field(default_factory=dict)
    """Pinned facts (a flow's ``pin``: the expense report's user, goal, city, period, dept,
    amounts, dates, approver): every history fold keeps them."""
    turn_id: str = ""
    """The latest user message: it confirms what it answers (``confirmed_by``)."""
    pending: Pending | None = None
    timers: dict[str, str] = Field(default_factory=dict)
    """Armed timer purpose -> token; a fired timer whose token differs is stale."""
    preferences: dict[str, str] = Field(default_factory=dict)
    candidates: dict[str, str] = Field(default_factory=dict)
    declined: tuple[str, ...] = ()
    steps: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    """The verification steps of each cycle's answer, by task (a reply names whose)."""
    notes: tuple[str, ...] = ()
    """Stale/degraded notices for the next reply."""
    stale: bool = False
    degraded: bool = False
    context: dict[str, bool | int | float | str] = Field(default_factory=dict)
    """What the user stated that every later cycle carries (a flow's ``carry``: the expense
    report's ``user_tolerates_blur``, ``ocr_confidence_min``)."""
    problems: tuple[dict[str, str], ...] = ()
    """The last :data:`MAX_PROBLEMS` error reports (component, code, message, cycle, at)."""
    traces: tuple[dict[str, Any], ...] = ()
    history: History = History()
    outcome: str = ""
    flow: str | None = None
    """The registered flow the session runs (None: the built-in expense report, or none)."""
    flow_version: int | None = None
    """The version of ``flow`` it started with: it keeps it to its end."""
    values: dict[str, Any] = Field(default_factory=dict)
    """A flow's values, by template root: intent, entities, symbols, context, results,
    hooks (the user's and session's ids are the envelope's)."""
    next_action: int = 0
    """The action to run next (after the pending cycle)."""
    acting: int = -1
    """Whose actions run: the state's on-enter actions (-1), or the ``do:`` of the move
    that stayed (its index among the transitions: it may wait for a cycle too)."""
    queued: str = ""
    """The first turn's intent: a move of the start state once its actions are done."""
    asked: dict[str, Any] = Field(default_factory=dict)
    """A flow's last reply (``text``, ``buttons``): asked again when a turn is not understood."""
    flow_summary: str = ""
    """A flow's snapshot summary, rendered from its state's template."""
    failures: int = 0
    """A flow's failures since the user last spoke: past MAX_FAILURES no exit is taken."""
    said_more: bool = False
    """A flow's last reply to the current turn said more would follow."""
    path: tuple[str, ...] = ()
    """The states a flow session went through, in order, each once (frequent paths)."""
    trigger: str = ""
    """The trigger of the move that entered the current state."""
    unshown_steps: tuple[str, ...] = ()
    """The verification steps of tool results a flow has not shown yet: its next reply
    carries them, so what the user reads says how it was checked."""

    def entered_at(self) -> datetime:
        return from_epoch_ms(self.entered_at_ms)


def load_session(data: Mapping[str, Any], session_id: str) -> Session:
    """The saved state, or a fresh session when nothing was saved yet; the very model the
    previous envelope left when the runtime kept it (see ``runtime.ModelState``)."""
    session = carried_model(data, Session)
    if session is not None:
        return session
    try:
        return Session.model_validate(_migrated(data))
    except ValidationError as exc:
        raise StoreError(
            f"conversation state of session {session_id!r} is invalid", retriable=False
        ) from exc


_BUILT_IN_FIELDS: Final = ("ask", "ask_pref", "materials", "validation", "locked")
"""What the expense report kept in the session itself before it was a flow: its working
data, now its flow's context."""


def _migrated(data: Mapping[str, Any]) -> dict[str, Any]:
    """A saved session as this version keeps it: an expense session saved before the
    report ran on the engine has its working data moved into its flow's context (and its
    flow's values started), so it goes on where it was."""
    data = dict(data)
    old = {key: data.pop(key) for key in _BUILT_IN_FIELDS if key in data}
    if not old:
        return data
    values = dict(data.get("values") or {})
    values.setdefault("intent", {"name": ""})
    for root in ("entities", "symbols", "results", "hooks"):
        values.setdefault(root, {})
    values["context"] = {**old, **values.get("context", {})}
    data["values"] = values
    return data


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, UTF-8 text: the same value always gives the same bytes."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def digest(arguments_json: str) -> str:
    """The argument digest of a tool-call trace: sha256 of the canonical JSON, 12 hex."""
    return hashlib.sha256(arguments_json.encode()).hexdigest()[:12]


def summary_of(session: Session) -> str:
    """The <= 50-character progress line of the snapshot (its flow's)."""
    return session.flow_summary[:SUMMARY_CHARS]


def snapshot_of(session: Session) -> ContextSnapshot:
    """The session's current ``ContextSnapshot`` (traces: tool, args digest, status)."""
    traces = tuple(
        ToolCallTrace(tool=t["tool"], args_digest=t["args_digest"], status_code=t["status_code"])
        for t in session.traces
    )
    return ContextSnapshot(
        state_id=session.state or NEW,
        entered_at=session.entered_at(),
        tokens_used=session.history.tokens(session.facts),
        summary=summary_of(session),
        tool_calls=traces,
        flow=session.flow,
        flow_version=session.flow_version,
    )

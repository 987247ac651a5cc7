"""The dispatcher's session state: open cycles, violation and refusal counts, last speaker.

The state is loaded from the saved JSON into fresh models on every envelope and dumped
back into the outcome, so the working copy is private to one handler call and may be
changed in place. It is saved as a ``ModelState``: the model a call leaves is never touched
again, and the next call validates a new one from its JSON dump (the JSON round trip of
a plain dict is skipped). Closed cycles keep only what late envelopes are checked against.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from hermesbus.contract.envelope import Envelope
from hermesbus.contract.payloads import MemoryContext, ToolResult
from hermesbus.processors.protocol import MEMORY_CONTEXT, tool_at
from hermesbus.runtime import ModelState

__all__ = ["KEEP_CLOSED", "Call", "CallStatus", "Cycle", "CycleStatus", "DispatcherState"]

KEEP_CLOSED = 16
"""Closed cycles remembered per session, so their late results are recognised."""
PAUSE_SLACK_MS = 1_000
"""Beyond two notice gaps, how long a pause may still be going on without a notice."""


class CycleStatus(enum.StrEnum):
    OPEN = "open"
    ANSWERED = "answered"
    FAILED = "failed"


class CallStatus(enum.StrEnum):
    WAITING = "waiting"
    """Received, held until the cycle's memory context arrives (memory first)."""
    SENT = "sent"
    RETRYING = "retrying"
    """A 5xx came back; a retry timer will send it again."""
    DONE = "done"
    CANCELLED = "cancelled"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Call(_Model):
    """One tool call of a cycle: the conversation's envelope and how far it got."""

    envelope: Envelope
    status: CallStatus = CallStatus.WAITING
    attempt: int = 1
    health: str = ""
    expected_ms: float | None = None
    """The tool's usual latency by its live health when the call was sent (None unknown):
    whether a timed-out tool had a fair chance."""
    access: str = ""
    """``admitted`` when the tool's access rules were checked and counted this call: the
    dispatched envelope records it, so a replay decides the same."""


class Cycle(_Model):
    """One request of the conversation for tool work, answered once per round."""

    requester: str
    task: str
    tools: list[str]
    round: int = 1
    deadline_ms: int | None = None
    budget_ms: int = 0
    asked_ms: int = -1
    """When the round's first call was sent (its record's Kafka timestamp), -1 unknown."""
    memory_ms: int = -1
    """How long memory took to answer the round, by the records' timestamps; -1 unknown.
    The envelopes' own times cannot tell: memory answers with its query's time."""
    paused_ms: int = 0
    """Downtime of backend outages that held the round's query or calls (pauses over)."""
    pause_from_ms: int = -1
    """When the pause going on (as far as notices tell) began; -1: none seen."""
    pause_seen_ms: int = -1
    """The latest pause notice's time; the pause lasted at least until then."""
    pause_every_ms: int = 0
    """The longest gap between two pause notices while a pause lasts."""
    paused_by: list[str] = Field(default_factory=list)
    """Who the pause going on holds (memory, tools): it is over once they all answered."""
    status: CycleStatus = CycleStatus.OPEN
    received: list[str] = Field(default_factory=list)
    """Tools whose call arrived this round: a second one is a violation (one dispatch)."""
    calls: dict[str, Call] = Field(default_factory=dict)
    memory: MemoryContext | None = None
    results: dict[str, ToolResult] = Field(default_factory=dict)
    latency_ms: dict[str, float] = Field(default_factory=dict)
    notices: list[str] = Field(default_factory=list)
    notified: list[str] = Field(default_factory=list)
    """Tools the user was already told about this round (one notice per tool)."""

    @property
    def is_open(self) -> bool:
        return self.status is CycleStatus.OPEN

    @property
    def downtime_ms(self) -> int:
        """Backend downtime credited to the round: not charged to its budget."""
        going = self.pause_seen_ms - self.pause_from_ms if self.pause_from_ms >= 0 else 0
        return self.paused_ms + going

    def still_paused(self, now_ms: int) -> bool:
        """A pause notice came recently enough that the pause may still be going on."""
        if self.pause_from_ms < 0 or not any(map(self.waits_on, self.paused_by)):
            return False
        return now_ms - self.pause_seen_ms <= 2 * self.pause_every_ms + PAUSE_SLACK_MS

    def waits_on(self, component: str) -> bool:
        """The round still waits for ``component`` (memory, or one of its tools)."""
        if component == MEMORY_CONTEXT:
            return self.memory is None
        return any(component == tool_at(t) and t not in self.results for t in self.tools)

    def close(self, status: CycleStatus) -> None:
        """Mark the round answered or failed and drop what only an open round needs."""
        self.status = status
        self.calls = {}
        self.memory = None
        self.results = {}
        self.latency_ms = {}
        self.notices = []
        self.notified = []

    def reopen(self) -> None:
        """A ``Continue``: one more round, one more answer; memory is asked again."""
        self.status = CycleStatus.OPEN
        self.round += 1
        self.deadline_ms = None
        self.budget_ms = 0
        self.asked_ms = self.memory_ms = -1
        self.paused_ms, self.pause_from_ms, self.pause_seen_ms = 0, -1, -1
        self.paused_by = []
        self.received = []


class DispatcherState(_Model):
    """Everything the dispatcher keeps per session (saved with ``json.dumps``)."""

    cycles: dict[str, Cycle] = Field(default_factory=dict)
    violations: dict[str, int] = Field(default_factory=dict)
    late: int = 0
    refused_writes: int = 0
    """Memory writes memory refused (notifications, never a cycle's answer)."""
    capped_writes: int = 0
    """Facts and symbols of results dropped over the per-result caps (never written)."""
    last_speaker: str | None = None
    """The conversation address that last spoke: where memory's error reports go."""
    refused_calls: dict[str, int] = Field(default_factory=dict)
    """Calls refused before they went out, by refusal (forbidden, rate_limited, over_quota)."""
    models: dict[str, str] = Field(default_factory=dict)
    """Open model rounds: cycle -> the agent state that asked (its answer goes there)."""

    @classmethod
    def load(cls, data: Mapping[str, Any]) -> DispatcherState:
        """A new model of the saved state (a handler changes it in place); from the JSON
        of the model the previous call left, when the runtime kept it."""
        return cls.model_validate(dict(data))

    def dump(self) -> ModelState:
        """The state to save: this model, which its handler no longer touches."""
        self._prune()
        return ModelState(self)

    def _prune(self) -> None:
        closed = [cid for cid, cycle in self.cycles.items() if not cycle.is_open]
        for cid in closed[: max(0, len(closed) - KEEP_CLOSED)]:
            del self.cycles[cid]

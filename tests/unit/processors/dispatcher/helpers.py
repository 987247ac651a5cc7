"""Envelopes of the protocol and a driver that feeds the dispatcher's state back to it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from hermesbus import (
    Continue,
    Diagnostics,
    Envelope,
    ExternalCalls,
    MemoryContext,
    Metadata,
    Payload,
    RetryPolicy,
    ToolCall,
    ToolResult,
)
from hermesbus.contract.payloads import Body, ErrorReport, ToolResults
from hermesbus.processors.dispatcher import (
    NAME,
    TOPIC,
    StaticBacklog,
    StaticHealth,
    Violations,
    dispatcher_ports,
    handle,
)
from hermesbus.processors.flow import EXPENSE_SPEC, FlowCatalog
from hermesbus.processors.protocol import AccessView, ToolHealth
from hermesbus.processors.recorded import RecordedHealth
from hermesbus.runtime import Outcome, SessionState, derive_id
from hermesbus.testing import Armed, Harness

T0 = datetime(2024, 6, 3, 9, 0, tzinfo=UTC)
USER_ID = "u_xyz789"
SESSION = "sess_456"
CYCLE = "cycle-1"

ORG_RESULT = {
    "user_id": USER_ID,
    "name": "张三",
    "dept": "采购部",
    "manager": "张主管",
    "approval_chain": ["主管", "总监"],
    "symbols": {"user_dept": "采购部"},
    "facts": [{"subject": "user:u_xyz789", "relation": "belongs_to", "object": "dept:采购部"}],
}
FINANCE_RESULT = {"dept": "采购部", "budget_remaining": 125000, "currency": "CNY"}


def envelope(body: Body | None, *, source: str, message_id: str, **fields: Any) -> Envelope:
    """An envelope to the dispatcher; ``task``/``context`` go into the payload."""
    payload = Payload(task=fields.pop("task", ""), context=fields.pop("context", {}), body=body)
    values: dict[str, Any] = {
        "message_id": message_id,
        "timestamp": T0,
        "source": source,
        "target": "mcp:dispatcher",
        "session_id": SESSION,
        "user_id": USER_ID,
        "trace_id": "trace-1",
        "span_id": f"span-{message_id}"[:16],
        "payload": payload,
    }
    return Envelope(**{**values, **fields})


def call(
    tool: str,
    tools: list[str],
    *,
    cycle: str = CYCLE,
    state: str = "S1",
    task: str = "check_budget",
    args: dict[str, Any] | None = None,
    message_id: str | None = None,
    max_attempts: int = 2,
    backoff_ms: int = 100,
    **extra: Any,
) -> Envelope:
    """The conversation's call of ``tool`` in ``cycle`` (as the conversation sends it)."""
    context = {"cycle": cycle, "tools": tools, **extra.pop("context", {})}
    body = ToolCall(
        tool=tool,
        arguments_json=json.dumps(args or {"user_id": USER_ID}),
        idempotency_key=derive_id("turn-1", "call", tool),
        fallback_allowed=extra.pop("fallback_allowed", True),
    )
    metadata = Metadata(
        timeout_ms=extra.pop("timeout_ms", EXPENSE_SPEC.budget_of(state)),
        retry_policy=RetryPolicy(max_attempts=max_attempts, backoff_ms=backoff_ms),
    )
    return envelope(
        body,
        source=extra.pop("source", f"conversation:{state}"),
        message_id=message_id or f"call-{cycle}-{tool}",
        task=task,
        context=context,
        metadata=metadata,
        **extra,
    )


def answer_query(query: Envelope, body: MemoryContext | None = None) -> Envelope:
    """Memory's answer to the dispatcher's query (same context, causation = the query)."""
    return envelope(
        body or MemoryContext(symbols={"user_dept": "采购部"}),
        source="memory:context",
        message_id=f"mem-{query.message_id}",
        task="query_context",
        context=dict(query.payload.context),
        causation_id=query.message_id,
        timestamp=query.timestamp,
    )


def result_for(
    dispatched: Envelope,
    status: int = 200,
    content: Any = None,
    *,
    verified: bool = True,
    latency_ms: float = 12.0,
    **fields: Any,
) -> Envelope:
    """The tool processor's result of a dispatched call (context echoed)."""
    tool_call = dispatched.payload.body
    assert isinstance(tool_call, ToolCall)
    body = ToolResult(
        tool=tool_call.tool,
        status_code=status,
        result_json=json.dumps(content if content is not None else {}, ensure_ascii=False),
        verified=verified,
        verification_steps=("signature ok",) if verified else (),
        **fields,
    )
    return envelope(
        body,
        source=f"tool:{tool_call.tool}",
        message_id=f"res-{dispatched.message_id}-{status}",
        task=dispatched.payload.task,
        context={k: v for k, v in dispatched.payload.context.items() if k in ("cycle", "tools")},
        causation_id=dispatched.message_id,
        timestamp=dispatched.timestamp,
        metadata=dispatched.metadata,
        diagnostics=Diagnostics(external_calls=ExternalCalls(count=1, avg_latency_ms=latency_ms)),
    )


def cont(cycle: str = CYCLE, state: str = "S1", message_id: str = "continue-1") -> Envelope:
    return envelope(
        Continue(reason="one more"),
        source=f"conversation:{state}",
        message_id=message_id,
        context={"cycle": cycle},
    )


@dataclass
class Driver:
    """Runs the handler envelope by envelope through :class:`Harness`, which keeps the
    state and the durable timers as the runtime does."""

    health: StaticHealth = field(default_factory=StaticHealth)
    backlog: StaticBacklog = field(default_factory=StaticBacklog)
    recorded: RecordedHealth | None = None
    """A replay's health and backlogs, used for both instead of ``health`` and ``backlog``."""
    counter: Violations = field(default_factory=Violations)
    flows: FlowCatalog | None = None
    """The registered flows whose sessions the dispatcher checks (None: the expense report)."""
    access: AccessView | None = None
    """Who may call which tool (None: every user may call every tool)."""
    outcomes: list[Outcome] = field(default_factory=list)
    session: str = SESSION
    harness: Harness = field(init=False)

    def __post_init__(self) -> None:
        if self.recorded is not None:
            ports = dispatcher_ports(self.recorded, self.counter, self.recorded)
        else:
            ports = dispatcher_ports(
                self.health, self.counter, self.backlog, self.flows, self.access
            )
        self.harness = Harness().processor(NAME, handle, [TOPIC], ports=ports)

    @classmethod
    def with_health(cls, *entries: ToolHealth) -> Driver:
        return cls(health=StaticHealth(entries))

    @property
    def state(self) -> SessionState:
        """The state of the session last sent."""
        return self.harness.state(NAME, self.session)

    @property
    def timers(self) -> dict[str, Armed]:
        """Armed timers by purpose."""
        return {armed.purpose: armed for armed in self.harness.timers(NAME)}

    async def send(self, env: Envelope, *, appended_ms: int = -1) -> tuple[Envelope, ...]:
        """``appended_ms``: the record's Kafka timestamp the runtime would give (-1 none)."""
        self.session = env.session_id
        handled = await self.harness.handle(NAME, env, appended_ms=appended_ms)
        self.outcomes.append(handled.outcome)
        return handled.emitted

    def fired(self, purpose: str) -> Envelope:
        """The ``timer_fired`` envelope the runtime sends for a pending timer (disarmed)."""
        return self.harness.take(purpose).envelope

    async def fire(self, purpose: str) -> tuple[Envelope, ...]:
        return await self.send(self.fired(purpose))

    @property
    def data(self) -> dict[str, Any]:
        return dict(self.state.data)


def to(emitted: tuple[Envelope, ...], target_prefix: str) -> list[Envelope]:
    return [e for e in emitted if e.target.startswith(target_prefix)]


def kinds(emitted: tuple[Envelope, ...]) -> list[tuple[str, str]]:
    """(target, body type) of each emitted envelope, in order."""
    return [(e.target, type(e.payload.body).__name__) for e in emitted]


def answers(emitted: tuple[Envelope, ...]) -> list[Envelope]:
    """The cycle answers (ToolResults or ErrorReport) sent to the conversation."""
    return [
        e
        for e in emitted
        if e.target.startswith("conversation:")
        and isinstance(e.payload.body, ToolResults | ErrorReport)
    ]

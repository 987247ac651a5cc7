"""The protocol between the four processors: who sends which envelope to whom.

Every envelope between components goes through the dispatcher (``mcp:dispatcher``,
topic ``hermes.dispatcher``); only replies to the user go straight out (``user:app``,
topic ``hermes.conversation.out``). Addresses are ``component:instance``; the runtime
picks the topic from the component (``topics/routes.py``).

A **cycle** is one request of the conversation for tool work, answered exactly once:

1. conversation -> dispatcher: one ``ToolCall`` envelope per tool, all with
   ``context[CYCLE]`` = the cycle id and ``context[TOOLS]`` = every tool of the cycle
   in order; ``source`` = ``conversation:<state>``; ``metadata.timeout_ms`` = the
   state's budget (its flow's ``timeout_ms`` for it); ``snapshot`` = the conversation's
   snapshot.
2. dispatcher -> memory (``memory:context``): one ``MemoryQuery`` per cycle, before any
   of its tool calls goes out (memory first).
3. memory -> dispatcher: ``MemoryContext`` with the same ``context[CYCLE]``.
4. dispatcher -> ``tool:<name>``: each call once (one dispatch per component per cycle;
   a retry of the same call is the same dispatch), ``context[FALLBACK]`` = ``True`` when
   live health says the tool is unhealthy and its fallback must answer.
5. tool -> dispatcher: ``ToolResult`` with the same ``context[CYCLE]``.
6. dispatcher -> ``conversation:<state>`` (the requester): ONE envelope per cycle, a
   ``ToolResults`` with every result in call order and the memory context; or, fail
   fast, one ``ErrorReport`` (a 5xx or a timeout cancels the cycle's pending calls).
   A second answer in the same cycle needs a ``Continue`` from the conversation.

A **model round** of a flow's agent state is answered the same way, once: the conversation
sends a ``ModelRequest`` (``context[CYCLE]``) to the dispatcher, which forwards it to
``model:chat`` (the tool processor) and the ``ModelAnswer`` back to the requester; the
tool calls the model chooses then go out as an ordinary cycle.

Outside cycles: the conversation sends ``StateSnapshot`` on every transition and
``MemoryWrite`` for mid-term items to the dispatcher, which validates and forwards them
to ``memory:<tier>``; verified tool results that carry ``RESULT_FACTS`` /
``RESULT_SYMBOLS`` become long-term / short-term ``MemoryWrite`` envelopes from the
dispatcher; memory sends every graph change to ``audit:graph``; the tool processor sends
verification failures to ``alerts:tool`` as ``ErrorReport`` envelopes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Final, Protocol

from pydantic import BaseModel

from hermesbus.contract.envelope import Envelope
from hermesbus.contract.fields import from_epoch_ms
from hermesbus.contract.payloads import (
    Body,
    ContextValue,
    Continue,
    ErrorReport,
    MemoryContext,
    MemoryQuery,
    MemoryTier,
    MemoryWrite,
    ModelAnswer,
    ModelRequest,
    Payload,
    Reply,
    StateSnapshot,
    TimerFired,
    ToolCall,
    ToolResult,
    ToolResults,
    UserTurn,
    WindowRollup,
)
from hermesbus.identity import APP
from hermesbus.runtime import Pause, derive_id
from hermesbus.topics import ALERTS as ALERTS_TOPIC
from hermesbus.topics import AUDIT as AUDIT_TOPIC
from hermesbus.topics import CONVERSATION_IN, CONVERSATION_OUT, identity_of
from hermesbus.topics import DIAGNOSTICS as DIAGNOSTICS_TOPIC

__all__ = [
    "ACCESS",
    "ADMIT",
    "ADMITTED",
    "AGENT_TOOLS_TASK",
    "ALERTS",
    "APP",
    "AUDIT",
    "BAD_ARGUMENTS",
    "BUSY_BEHIND",
    "BUSY_PREFIX",
    "CONVERSATION",
    "CYCLE",
    "DIAGNOSTICS",
    "DISPATCHER",
    "DISPATCHER_ADDRESS",
    "DISPATCHER_TOPIC",
    "ENDS",
    "FALLBACK",
    "FLOW_SNAPSHOT",
    "FORBIDDEN",
    "HAS_ROLE",
    "IDENTITIES",
    "INVALID_SYMBOLS",
    "MAX_BUDGET_FACTOR",
    "MEMORY",
    "MEMORY_CONTEXT",
    "MEMORY_TOPIC",
    "MODEL_ADDRESS",
    "MORE",
    "NOT_REGISTERED",
    "OK",
    "OVER_QUOTA",
    "PAUSED",
    "PAUSED_SINCE",
    "PAUSE_EVERY",
    "PROGRESS",
    "RATE_LIMITED",
    "REFUSALS",
    "RESULT_FACTS",
    "RESULT_SYMBOLS",
    "SYMBOLS_HELD",
    "SYMBOL_TTL_S",
    "TASK_QUERY_CONTEXT",
    "TIMEOUT",
    "TOOL",
    "TOOLS",
    "TOOL_TOPIC",
    "UNAVAILABLE",
    "USER",
    "VERIFICATION_FAILED",
    "WRITERS",
    "AccessView",
    "Admission",
    "BacklogView",
    "FlowMachine",
    "HealthView",
    "ProtocolPolicy",
    "ToolHealth",
    "answer",
    "component_of",
    "conversation_at",
    "cycle_of",
    "is_failure",
    "memory_at",
    "pause_notice",
    "progress_notice",
    "result_confidence",
    "tool_at",
]

# processor names: consumer groups and state namespaces
CONVERSATION: Final = "conversation"
DISPATCHER: Final = "dispatcher"
TOOL: Final = "tool"
MEMORY: Final = "memory"
DIAGNOSTICS: Final = "diagnostics"
"""The diagnostics rollup: it reads every topic and writes only its window figures."""

IDENTITIES: Final = (APP, CONVERSATION, DISPATCHER, TOOL, MEMORY, DIAGNOSTICS)
"""Who signs envelopes: the four processors, the diagnostics rollup, and ``app`` for
applications."""

# topics the processors consume (the others are in hermesbus.topics)
DISPATCHER_TOPIC: Final = "hermes.dispatcher"
TOOL_TOPIC: Final = "hermes.tool"
MEMORY_TOPIC: Final = "hermes.memory"

# addresses
DISPATCHER_ADDRESS: Final = "mcp:dispatcher"
USER: Final = "user:app"
MEMORY_CONTEXT: Final = "memory:context"
"""Where query_context goes; writes go to ``memory:<tier>``."""
MODEL_ADDRESS: Final = "model:chat"
"""Where a flow's agent state asks the model (``ModelRequest``): the tool processor, which
alone speaks to the world outside, calls ``HERMES_LLM_URL`` and answers ``ModelAnswer``."""
AUDIT: Final = "audit:graph"
ALERTS: Final = "alerts:tool"

# payload.context keys
CYCLE: Final = "cycle"
"""The cycle an envelope belongs to (a str id); the dispatcher answers each cycle once."""
TOOLS: Final = "tools"
"""Every tool of the cycle, in call order (a list of str), on each conversation call."""
FALLBACK: Final = "fallback"
"""``True`` on a dispatched call: the tool is unhealthy, answer with its fallback."""

FLOW_SNAPSHOT: Final = "flow:"
"""The mid-term key prefix of a finished flow session's snapshot (``flow:<flow>:<session>``);
its value names the flow and its ``version``."""
SYMBOLS_HELD: Final = "symbols_held"
"""``True`` on a call whose arguments read the short-term symbols its cycle asks memory
for (``context["symbols"]``): when memory says one no longer holds, the dispatcher
dispatches nothing of the cycle and answers ``INVALID_SYMBOLS`` (a flow asks instead of
guessing). The expense report's calls do not set it: they check after the answer."""
INVALID_SYMBOLS: Final = "invalid_symbols"
"""``ErrorReport.code`` of a cycle refused for a symbol that no longer holds."""
ENDS: Final = "ends"
"""``True`` in the context of a flow's state snapshot whose state is terminal: memory drops
the session's symbols (the expense report's terminal state is known by its name, S5)."""
MORE: Final = "more"
"""``True`` on a flow's reply when more replies to the same turn follow (``say --wait``
waits for the one without it); the expense report's replies do not carry it (one each)."""

TASK_QUERY_CONTEXT: Final = "query_context"

# keys of a tool's result JSON that the dispatcher turns into memory writes
RESULT_FACTS: Final = "facts"
"""``[{"subject", "relation", "object"}]``: graph edges the tool verified (long-term)."""
RESULT_SYMBOLS: Final = "symbols"
"""``{"name": "entity"}``: short-term symbols of the session (TTL ``SYMBOL_TTL_S``)."""
SYMBOL_TTL_S: Final = 600

# ToolResult.status_code
OK: Final = 200
BAD_ARGUMENTS: Final = 400
NOT_REGISTERED: Final = 404
VERIFICATION_FAILED: Final = 502
UNAVAILABLE: Final = 503
TIMEOUT: Final = 504
BUSY_PREFIX: Final = "busy, no free worker:"
"""How a 503's ``ToolResult.error`` starts when the tool is only busy (its workers all taken
until the call's time ran out), not failing: the dispatcher tells the user the bus is busy.
No tool's own error can start so (a worker's errors start with the tool's name, which
has no space)."""
BUSY_BEHIND: Final = "busy_behind"
"""The context key of a round the dispatcher failed as ``busy``: the components records or
calls waited for then (``memory:context``, ``tool:<name>``, ``dispatcher``), so a replay
finds the same backlogs."""

# a pause notice: a backend outage holds a request of the dispatcher in place
PAUSED: Final = "paused"
"""``ErrorReport.code`` of a pause notice (``retryable``: it is answered once it is back)."""
PAUSED_SINCE: Final = "paused_since_ms"
"""Context key of a pause notice: when the outage began holding the request (epoch ms)."""
PAUSE_EVERY: Final = "pause_every_ms"
"""Context key of a pause notice: the longest gap before the next while the outage lasts."""

# a progress notice: a tool's call is under way and says how far it is (MCP progress)
PROGRESS: Final = "progress"
"""``ErrorReport.code`` of a progress notice: the dispatcher tells the user the tool is
processing (once per tool and round, like a slow tool's notice)."""

_WAITS_IN_PLACE: Final = (
    "后端暂时不可用，请求原地等待\uff08a backend is away: the request waits in place\uff09"
)


def is_failure(status_code: int) -> bool:
    """5xx (timeouts are 504): fail fast."""
    return status_code >= 500  # noqa: PLR2004 - HTTP's server-error class


def cycle_of(envelope: Envelope) -> str:
    """The envelope's ``context[CYCLE]``, or ``""`` when it has none (or not a str)."""
    value = envelope.payload.context.get(CYCLE)
    return value if isinstance(value, str) else ""


def component_of(address: str) -> str:
    return address.split(":", 1)[0]


def conversation_at(state: str) -> str:
    return f"conversation:{state}"


def tool_at(name: str) -> str:
    return f"tool:{name}"


def memory_at(tier: MemoryTier) -> str:
    return f"memory:{tier.value}"


# -- who may write what where: checked by every receiver's runtime ----------------------

MAX_BUDGET_FACTOR: Final = 10
"""A call may carry up to this many times its state's budget (the conversation scales its
budgets by at most 10 for a slow machine: ``HERMES_CONVERSATION_BUDGET_SCALE``)."""


@dataclass(frozen=True, slots=True)
class FlowMachine:
    """What the dispatcher checks of the flow a session runs: its states, the
    ``(previous_state, state)`` moves it can make, and the most ``metadata.timeout_ms``
    each state's calls may carry. Each comes from a flow spec (``processors.flow.machine_of``),
    the expense report's too (``processors.flow.EXPENSE_MACHINE``)."""

    name: str
    states: frozenset[str]
    pairs: frozenset[tuple[str | None, str]]
    budgets: Mapping[str, int]
    agents: Mapping[str, frozenset[str]] = field(default_factory=lambda: MappingProxyType({}))
    """Each agent state's allow-list: the tools its model rounds may offer and run."""

    def budget_ms(self, state: str) -> int:
        return self.budgets.get(state, 0)


Bodies = tuple[type[BaseModel], ...]

WRITERS: Final[Mapping[str, Mapping[str, Bodies]]] = {
    CONVERSATION_IN: {
        APP: (UserTurn,),  # apps speak only here, and only as the user
        DISPATCHER: (ToolResults, ErrorReport, ModelAnswer),  # one answer per cycle, or a refusal
        CONVERSATION: (TimerFired,),  # its own durable timers
    },
    CONVERSATION_OUT: {
        CONVERSATION: (Reply,),
        DISPATCHER: (Reply,),  # notices ("ocr_tool is slow, about 30 s")
    },
    DISPATCHER_TOPIC: {
        CONVERSATION: (ToolCall, StateSnapshot, MemoryWrite, Continue, ModelRequest),
        TOOL: (ToolResult, ErrorReport, ModelAnswer),  # an error report only as a pause notice
        MEMORY: (MemoryContext, ErrorReport),
        DISPATCHER: (TimerFired,),
    },
    TOOL_TOPIC: {DISPATCHER: (ToolCall, ModelRequest)},  # only the dispatcher calls tools
    MEMORY_TOPIC: {DISPATCHER: (MemoryQuery, MemoryWrite, StateSnapshot)},  # memory trusts it
    AUDIT_TOPIC: {MEMORY: (MemoryWrite,)},
    ALERTS_TOPIC: {  # the processors' alerts, and the diagnostics' rules' (processors/diagnostics)
        who: (ErrorReport,) for who in (CONVERSATION, DISPATCHER, TOOL, MEMORY, DIAGNOSTICS)
    },
    DIAGNOSTICS_TOPIC: {DIAGNOSTICS: (WindowRollup,)},
}
"""Topic -> signing identity -> the bodies it may write there. Nothing else is admitted:
every processor's runtime checks it before a handler runs (the dispatcher's ``body``
rule reads its own row), and the broker ACLs of a real cluster mirror it (README)."""


class ProtocolPolicy:
    """:data:`WRITERS` as the runtime's write policy (``hermesbus.identity.WritePolicy``)."""

    def identity_of(self, address: str) -> str:
        return identity_of(address)

    def refusal(self, topic: str, identity: str, envelope: Envelope) -> str | None:
        writers = WRITERS.get(topic)
        if writers is None:
            return f"{topic} is not a topic of the protocol"
        allowed = writers.get(identity)
        if allowed is None:
            return f"{identity!r} may not write {topic} (writers: {sorted(writers)})"
        body = envelope.payload.body
        if isinstance(body, ErrorReport) and identity == TOOL and topic == DISPATCHER_TOPIC:
            return _tool_report_refusal(envelope, body)
        if isinstance(body, allowed):
            return None
        name = type(body).__name__ if body is not None else None
        names = [cls.__name__ for cls in allowed]
        return f"{identity!r} may write only {names} to {topic}, not {name!r}"


# -- live tool health, read by the dispatcher and written by the tool processor -----------


def result_confidence(result: ToolResult) -> float:
    """How far an answer can be trusted, as its diagnostics say it: 1.0 verified, 0.6 not
    verified, at most 0.5 stale or from a fallback, 0.0 failed (an HTTP error)."""
    if result.status_code >= 400:  # noqa: PLR2004 - HTTP
        return 0.0
    score = 1.0 if result.verified else 0.6
    return min(score, 0.5) if result.stale or result.fallback else score


@dataclass(frozen=True, slots=True)
class ToolHealth:
    """A tool's latest health (latency, success rate, quota)."""

    tool: str
    latency_ms: float
    success_rate: float
    quota_remaining: int | None = None
    """None: the tool has no quota."""
    checked_at_ms: int = 0
    slow_after_ms: float = 1_000.0
    """Above this (and healthy) the user is told the result will take about ``estimate_s``."""
    unhealthy_after_ms: float = 2_000.0
    min_success_rate: float = 0.95
    estimate_s: int = 30
    queued: int = 0
    """Calls waiting for a free worker of the tool now: a queue means busy, not failing."""
    alert: str = ""
    """The open diagnostics alerts that make the tool unhealthy (their rules, comma
    separated: ``low_confidence``); empty: none."""

    @property
    def healthy(self) -> bool:
        return (
            not self.alert
            and self.latency_ms <= self.unhealthy_after_ms
            and self.success_rate >= self.min_success_rate
            and self.quota_remaining != 0
        )

    @property
    def slow(self) -> bool:
        return self.healthy and self.latency_ms > self.slow_after_ms


class HealthView(Protocol):
    """The dispatcher's port onto live tool health (``ports["health"]``)."""

    async def health(self, tool: str) -> ToolHealth | None:
        """The tool's latest health; None when the tool is not registered."""
        ...


AGENT_TOOLS_TASK: Final = "@tools#"
"""What the task of an agent state's cycle holds: ``<state>@tools#<round>`` (its calls are
the ones the model chose, each on the state's allow-list)."""


# -- who may call what, how often: read by the dispatcher before a call goes out ----------

FORBIDDEN: Final = "forbidden"
"""``ErrorReport.code`` of a round refused because the user holds none of a tool's roles
(or has no user id, for a tool limited per user)."""
RATE_LIMITED: Final = "rate_limited"
"""... because the user called the tool too often lately (its ``rate``)."""
OVER_QUOTA: Final = "over_quota"
"""... because the user used the tool's ``quota`` for the day or month."""
REFUSALS: Final = (FORBIDDEN, RATE_LIMITED, OVER_QUOTA)
ACCESS: Final = "access"
"""Context key of the dispatcher's access decision, recorded on what it emits (``admitted``
on a dispatched call, the refusal's code on the refusal) so a replay decides the same."""
ADMITTED: Final = "admitted"
HAS_ROLE: Final = "has_role"
"""The long-term relation of a user's role: ``user:<id> -has_role-> role:<name>``, written
by a verified tool's result like any fact; only verified or certified facts count."""


@dataclass(frozen=True, slots=True)
class Admission:
    """The access decision on one call: ``refusal`` is None when it may go out (``checked``:
    the tool has rules and the call was counted), else one of :data:`REFUSALS` with the
    one sentence the user is told (``reason``)."""

    refusal: str | None = None
    reason: str = ""
    checked: bool = False


ADMIT: Final = Admission()
"""A call to a tool without access rules."""


class AccessView(Protocol):
    """The dispatcher's port onto the tools' access rules and per-user usage
    (``ports["access"]``)."""

    async def admit(
        self,
        tool: str,
        user: str,
        roles: frozenset[tuple[str, str]],
        at_ms: int,
        key: str,
        *,
        count: bool = True,
    ) -> Admission:
        """Whether ``user`` may call ``tool`` at ``at_ms`` (the envelope's time), holding
        ``roles`` (each with the tool that verified it); with ``count``, an admitted call
        is counted against its limits once per ``key`` (the call's idempotency key: a
        redelivered round is not counted again), else only its roles are checked."""
        ...


class BacklogView(Protocol):
    """The dispatcher's port onto what waits in the bus now (``ports["backlog"]``): a round
    whose deadline passed while records waited for what it waits for was held by a busy
    bus, and the user is told so, not that a component failed."""

    async def backlog(self, component: str, within_ms: int = 0) -> int:
        """What waits now for a free worker of ``component``'s processor (sessions none
        took, records it paused before fetching): ``memory:context`` (memory),
        ``tool:<name>`` (the tool's processor) or ``dispatcher``; with none now, 1 if some
        waited in the last ``within_ms``. 0 when none, when not known, or when the
        processor is stuck (none of its records left it lately: a failure, not a busy
        bus). Records queued behind their own session wait for it, not for the bus."""
        ...


def answer(
    to: Envelope,
    index: int,
    *,
    source: str,
    target: str,
    body: Body,
    task: str,
    context: Mapping[str, ContextValue],
    causation_id: str | None = None,
    **fields: Any,
) -> Envelope:
    """The ``index``-th envelope a processor emits for ``to``: same trace, session, user
    and time (handlers never read the clock), ids and span derived from ``to``'s id."""
    return Envelope(
        message_id=derive_id(to.message_id, "out", index),
        timestamp=to.timestamp,
        source=source,
        target=target,
        session_id=to.session_id,
        user_id=to.user_id,
        trace_id=to.trace_id,
        span_id=derive_id(to.message_id, "span", index)[:16],
        parent_span_id=to.span_id or None,
        causation_id=causation_id or to.message_id,
        payload=Payload(task=task, context=dict(context), body=body),
        **fields,
    )


def _news(
    held: Envelope,
    report: ErrorReport,
    number: int,
    at: datetime,
    context: Mapping[str, ContextValue],
) -> Envelope:
    """The ``number``-th notice ``report`` of the component ``held`` went to, back to the
    dispatcher in ``held``'s cycle: ids derived from ``held``'s id and the report's code."""
    return Envelope(
        message_id=derive_id(held.message_id, report.code, number),
        timestamp=at,
        source=report.component,
        target=DISPATCHER_ADDRESS,
        session_id=held.session_id,
        user_id=held.user_id,
        trace_id=held.trace_id,
        span_id=derive_id(held.message_id, report.code, "span", number)[:16],
        parent_span_id=held.span_id or None,
        causation_id=held.message_id,
        payload=Payload(task=held.payload.task, context=dict(context), body=report),
    )


def _tool_report_refusal(envelope: Envelope, report: ErrorReport) -> str | None:
    """A tool writes an error report only as its own pause or progress notice."""
    if report.code in (PAUSED, PROGRESS) and report.component == envelope.source:
        return None
    return (
        f"'tool' may write an ErrorReport only as a pause or progress notice of its own "
        f"(code {PAUSED!r} or {PROGRESS!r}, component = source), not code {report.code!r} "
        f"for {report.component!r}"
    )


def progress_notice(
    envelope: Envelope, progress: float, total: float | None, number: int
) -> Envelope | None:
    """What a tool tells the dispatcher while its call (``envelope``) is under way and its
    server reports progress: an ``ErrorReport`` coded ``progress`` in the call's cycle,
    dated like the call. Only the figures travel, never the server's own words (untrusted
    text). None for an envelope that is no call of a cycle."""
    body = envelope.payload.body
    if envelope.source != DISPATCHER_ADDRESS or not isinstance(body, ToolCall):
        return None
    if not cycle_of(envelope):
        return None
    component = envelope.target
    done = f"{progress:g}/{total:g}" if total else f"{progress:g}"
    report = ErrorReport(
        component=component,
        code=PROGRESS,
        message=f"{component} is processing ({done})",
        advice=f"处理中（{done}）",
        retryable=True,
    )
    return _news(envelope, report, number, envelope.timestamp, envelope.payload.context)


def pause_notice(envelope: Envelope, pause: Pause) -> Envelope | None:
    """What memory and a tool tell the dispatcher while a backend outage holds its query or
    call in place (the runtime's ``PauseNotice``): an ``ErrorReport`` coded ``paused`` in
    the request's cycle, so the cycle is not charged the downtime. Nothing for others."""
    body = envelope.payload.body
    if envelope.source != DISPATCHER_ADDRESS or not isinstance(body, MemoryQuery | ToolCall):
        return None
    if not cycle_of(envelope):
        return None
    component = envelope.target
    report = ErrorReport(
        component=component,
        code=PAUSED,
        message=f"{component} waits for a backend that is away ({type(pause.error).__name__})",
        advice=_WAITS_IN_PLACE,
        retryable=True,
    )
    context = dict(envelope.payload.context)
    context[PAUSED_SINCE] = pause.since_ms
    context[PAUSE_EVERY] = pause.every_ms
    return _news(envelope, report, pause.number, from_epoch_ms(pause.now_ms), context)

"""The contract the dispatcher enforces, as data: a table of rule name -> check.

The codec already checked the Avro schema and field ranges; these rules check the
protocol (``processors/protocol.py``). A check returns None when the envelope keeps
the rule, or a message naming the field and its value. Rules run in table order and
the first one broken is the violation, so an envelope is refused for one reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from pydantic import BaseModel

from hermesbus.contract.envelope import Envelope
from hermesbus.contract.payloads import (
    Continue,
    MemoryContext,
    MemoryTier,
    MemoryWrite,
    ModelAnswer,
    ModelRequest,
    StateSnapshot,
    ToolCall,
    ToolResult,
)
from hermesbus.contract.snapshot import ContextSnapshot
from hermesbus.processors.dispatcher._state import CallStatus, DispatcherState
from hermesbus.processors.flow import EXPENSE_MACHINE
from hermesbus.processors.protocol import (
    AGENT_TOOLS_TASK,
    CONVERSATION,
    CYCLE,
    DISPATCHER,
    DISPATCHER_ADDRESS,
    DISPATCHER_TOPIC,
    MEMORY,
    MODEL_ADDRESS,
    TOOL,
    TOOLS,
    WRITERS,
    FlowMachine,
    component_of,
    cycle_of,
)
from hermesbus.topics import identity_of

__all__ = [
    "ALLOWED_BODIES",
    "MAX_ATTEMPTS",
    "MAX_OPEN_CYCLES",
    "MAX_TIMEOUT_MS",
    "MAX_TOOLS",
    "RULES",
    "TIMER_SOURCE",
    "Rule",
    "Violation",
    "first_violation",
    "flow_snapshot",
]

MAX_TIMEOUT_MS: Final = max(EXPENSE_MACHINE.budgets.values())
"""The largest retry ``backoff_ms`` a call may carry, and ``metadata.timeout_ms`` where no
flow state says (a state's calls carry at most its flow's budget for it)."""
MAX_ATTEMPTS: Final = 10
"""The largest ``retry_policy.max_attempts``: bounds the backoff ``2**(attempt-1)``."""
MAX_TOOLS: Final = 16
"""The most tools one cycle may name in ``context["tools"]``."""
MAX_OPEN_CYCLES: Final = 8
"""Open cycles per session: each keeps its calls in state until it is answered."""

TIMER_SOURCE: Final = f"{DISPATCHER}:timer"
"""The source of the dispatcher's own timers as the runtime fires them."""

ALLOWED_BODIES: Final[dict[str, tuple[type[BaseModel], ...]]] = {
    identity: bodies for identity, bodies in WRITERS[DISPATCHER_TOPIC].items()
}
"""Which bodies each source component may send to the dispatcher: its row of ``WRITERS``
(which every runtime also checks against the proven signer)."""

_IN_CYCLE = (ToolCall, ToolResult, MemoryContext, Continue, ModelRequest, ModelAnswer)

Flow = FlowMachine | None
"""The machine of the flow the envelope's snapshot names (None: a flow not registered)."""
Check = Callable[[Envelope, DispatcherState, Flow], str | None]


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    check: Check
    summary: str


@dataclass(frozen=True, slots=True)
class Violation:
    """A broken rule: ``code`` is ``violation.<rule>``; ``message`` names field and value."""

    rule: str
    message: str
    summary: str = ""
    """What the rule asks for, for the advice of the report."""

    @property
    def code(self) -> str:
        return f"violation.{self.rule}"


def _target(envelope: Envelope, _: DispatcherState, _flow: Flow) -> str | None:
    if envelope.target == DISPATCHER_ADDRESS or component_of(envelope.target) == DISPATCHER:
        return None
    target = envelope.target
    return f"target = {target!r}: the dispatcher takes {DISPATCHER_ADDRESS!r} or 'dispatcher:*'"


def _source(envelope: Envelope, _: DispatcherState, flow: Flow) -> str | None:
    component, _sep, instance = envelope.source.partition(":")
    if component == CONVERSATION and flow is not None and instance not in flow.states:
        states = sorted(flow.states)
        return (
            f"source = {envelope.source!r}: the conversation speaks as one of the states of "
            f"{flow.name} {states}"
        )
    if component in (CONVERSATION, TOOL, MEMORY) or envelope.source in (
        TIMER_SOURCE,
        MODEL_ADDRESS,
    ):
        return None
    allowed = f"conversation:<state>, tool:*, memory:*, {MODEL_ADDRESS!r} or {TIMER_SOURCE!r}"
    return f"source = {envelope.source!r}: must be {allowed}"


def _body(envelope: Envelope, _: DispatcherState, _flow: Flow) -> str | None:
    body = envelope.payload.body
    allowed = ALLOWED_BODIES.get(identity_of(envelope.source), ())
    if isinstance(body, allowed):
        return None
    name = type(body).__name__ if body is not None else None
    names = [cls.__name__ for cls in allowed]
    return f"payload.body = {name!r} from {envelope.source!r}: that source may send only {names}"


def _tool_source(envelope: Envelope, _: DispatcherState, _flow: Flow) -> str | None:
    body = envelope.payload.body
    if isinstance(body, ModelAnswer) and envelope.source != MODEL_ADDRESS:
        return f"payload.body = 'ModelAnswer' from {envelope.source!r}: only {MODEL_ADDRESS!r}"
    if not isinstance(body, ToolResult) or envelope.source == f"{TOOL}:{body.tool}":
        return None
    return (
        f"payload.body.tool = {body.tool!r} from {envelope.source!r}: "
        f"a tool answers only for itself ('{TOOL}:{body.tool}')"
    )


def _memory_tier(envelope: Envelope, _: DispatcherState, _flow: Flow) -> str | None:
    body = envelope.payload.body
    if isinstance(body, MemoryWrite) and body.tier is MemoryTier.LONG_TERM:
        field = f"payload.body.tier = {body.tier.value!r} (key {body.key!r})"
        return f"{field}: only tool-verified facts go to long-term memory"
    return None


def flow_snapshot(envelope: Envelope) -> ContextSnapshot | None:
    """The snapshot naming the flow an envelope is checked against: a state snapshot's
    own (its move), else the one the envelope carries."""
    body = envelope.payload.body
    return body.snapshot if isinstance(body, StateSnapshot) else envelope.snapshot


def _flow_known(envelope: Envelope, _: DispatcherState, flow: Flow) -> str | None:
    snapshot = flow_snapshot(envelope)
    if snapshot is None:
        return None
    carried = envelope.snapshot
    named = (snapshot.flow, snapshot.flow_version)
    if carried is not None and (carried.flow, carried.flow_version) != named:
        return (
            f"snapshot.flow = {carried.flow!r} v{carried.flow_version!r}, but the state "
            f"snapshot's is {snapshot.flow!r} v{snapshot.flow_version!r}: one session, one flow"
        )
    if flow is not None:
        return None
    return (
        f"snapshot.flow = {snapshot.flow!r}, snapshot.flow_version = {snapshot.flow_version!r}:"
        " not a registered flow version (hermesbus flows list)"
    )


def _snapshot(envelope: Envelope, _: DispatcherState, flow: Flow) -> str | None:
    snapshot = flow_snapshot(envelope)
    if snapshot is None or flow is None or snapshot.state_id in flow.states:
        return None
    states = sorted(flow.states)
    return f"snapshot.state_id = {snapshot.state_id!r}: not a state of {flow.name} {states}"


def _transition(envelope: Envelope, _: DispatcherState, flow: Flow) -> str | None:
    body = envelope.payload.body
    if not isinstance(body, StateSnapshot) or flow is None:
        return None
    pair = (body.previous_state, body.snapshot.state_id)
    if pair in flow.pairs:
        return None
    return f"(previous_state, snapshot.state_id) = {pair!r}: not a transition of {flow.name}"


def _cycle(envelope: Envelope, _: DispatcherState, _flow: Flow) -> str | None:
    if not isinstance(envelope.payload.body, _IN_CYCLE) or cycle_of(envelope):
        return None
    value = envelope.payload.context.get(CYCLE)
    return f"payload.context[{CYCLE!r}] = {value!r}: must be the cycle id (a non-empty str)"


def _tools(envelope: Envelope, state: DispatcherState, _flow: Flow) -> str | None:
    body, tools = envelope.payload.body, envelope.payload.context.get(TOOLS)
    if isinstance(body, ToolResult) and tools is None:
        return None
    if not isinstance(body, ToolCall | ToolResult):
        return None
    field = f"payload.context[{TOOLS!r}] = {tools!r}"
    if not isinstance(tools, list) or body.tool not in tools or len(set(tools)) != len(tools):
        return f"{field}: must list the cycle's tools once each, including {body.tool!r}"
    if len(tools) > MAX_TOOLS:
        return f"payload.context[{TOOLS!r}] has {len(tools)} tools: at most {MAX_TOOLS}"
    cycle = state.cycles.get(cycle_of(envelope))
    if isinstance(body, ToolCall) and cycle and cycle.received and cycle.tools != tools:
        return f"{field}: cycle {cycle_of(envelope)!r} was opened with tools {cycle.tools!r}"
    return None


def _timeout(envelope: Envelope, _: DispatcherState, flow: Flow) -> str | None:
    timeout_ms = envelope.metadata.timeout_ms
    if not isinstance(envelope.payload.body, ToolCall | ModelRequest):
        return None
    state = envelope.snapshot.state_id if envelope.snapshot is not None else ""
    most = flow.budget_ms(state) if flow is not None and state in flow.states else MAX_TIMEOUT_MS
    if 0 < timeout_ms <= most:
        return None
    return (
        f"metadata.timeout_ms = {timeout_ms!r}: a tool call of state {state!r} needs a time "
        f"budget > 0 and <= {most}"
    )


def _agent_tools(envelope: Envelope, _: DispatcherState, flow: Flow) -> str | None:
    body = envelope.payload.body
    agent_call = isinstance(body, ToolCall) and AGENT_TOOLS_TASK in envelope.payload.task
    if flow is None or not (isinstance(body, ModelRequest) or agent_call):
        return None
    state = envelope.snapshot.state_id if envelope.snapshot is not None else ""
    allowed = flow.agents.get(state)
    if allowed is None:
        what = "a model round" if isinstance(body, ModelRequest) else "a model-chosen call"
        return f"snapshot.state_id = {state!r}: {what} comes from an agent state of {flow.name}"
    if isinstance(body, ModelRequest):
        beyond = sorted(set(body.tools) - allowed)
        if beyond:
            return f"payload.body.tools = {beyond}: not on the allow-list of agent state {state!r}"
    elif isinstance(body, ToolCall) and body.tool not in allowed:
        return f"payload.body.tool = {body.tool!r}: not on the allow-list of agent state {state!r}"
    return None


def _retry(envelope: Envelope, _: DispatcherState, _flow: Flow) -> str | None:
    policy = envelope.metadata.retry_policy
    if not isinstance(envelope.payload.body, ToolCall):
        return None
    if policy.max_attempts > MAX_ATTEMPTS:
        return f"metadata.retry_policy.max_attempts = {policy.max_attempts}: at most {MAX_ATTEMPTS}"
    if policy.backoff_ms > MAX_TIMEOUT_MS:
        return f"metadata.retry_policy.backoff_ms = {policy.backoff_ms}: at most {MAX_TIMEOUT_MS}"
    return None


def _open_cycles(envelope: Envelope, state: DispatcherState, _flow: Flow) -> str | None:
    """A call of a new cycle, or a continue, would open one more cycle than allowed."""
    body, cid = envelope.payload.body, cycle_of(envelope)
    opens = (isinstance(body, ToolCall) and cid not in state.cycles) or isinstance(body, Continue)
    open_now = sum(1 for cycle in state.cycles.values() if cycle.is_open)
    if not opens or open_now < MAX_OPEN_CYCLES:
        return None
    return (
        f"payload.context[{CYCLE!r}] = {cid!r}: the session already has {open_now} open "
        f"cycles (at most {MAX_OPEN_CYCLES}); wait for an answer first"
    )


def _cycle_known(envelope: Envelope, state: DispatcherState, _flow: Flow) -> str | None:
    body = envelope.payload.body
    if not isinstance(body, ToolResult | MemoryContext | Continue):
        return None
    if cycle_of(envelope) in state.cycles:
        return None
    return f"payload.context[{CYCLE!r}] = {cycle_of(envelope)!r}: no such cycle in this session"


def _dispatched(envelope: Envelope, state: DispatcherState, _flow: Flow) -> str | None:
    body = envelope.payload.body
    if not isinstance(body, ToolResult):
        return None
    cycle = state.cycles[cycle_of(envelope)]
    if not cycle.is_open:
        return None  # a late result of a closed cycle: dropped and counted, not refused
    call = cycle.calls.get(body.tool)
    if call is not None and call.status is not CallStatus.WAITING:
        return None
    return f"payload.body.tool = {body.tool!r}: never dispatched in cycle {cycle_of(envelope)!r}"


def _one_dispatch(envelope: Envelope, state: DispatcherState, _flow: Flow) -> str | None:
    body = envelope.payload.body
    cycle = state.cycles.get(cycle_of(envelope))
    if not isinstance(body, ToolCall) or cycle is None or body.tool not in cycle.received:
        return None
    return (
        f"payload.body.tool = {body.tool!r}: already dispatched in cycle "
        f"{cycle_of(envelope)!r} (round {cycle.round}); send continue for another answer"
    )


def _continue(envelope: Envelope, state: DispatcherState, _flow: Flow) -> str | None:
    if not isinstance(envelope.payload.body, Continue):
        return None
    cycle = state.cycles[cycle_of(envelope)]
    if not cycle.is_open:
        return None
    return f"payload.context[{CYCLE!r}] = {cycle_of(envelope)!r}: still open, nothing to continue"


RULES: Final[tuple[Rule, ...]] = (
    Rule("target", _target, "addressed to mcp:dispatcher or dispatcher:*"),
    Rule(
        "source",
        _source,
        "from conversation:<state>, tool:*, memory:*, model:chat or dispatcher:timer",
    ),
    Rule("body", _body, "a body that source may send"),
    Rule(
        "tool_source",
        _tool_source,
        "a ToolResult from tool:<x> has body.tool == x; a ModelAnswer comes from model:chat",
    ),
    Rule("memory_tier", _memory_tier, "the conversation writes short- and mid-term only"),
    Rule("flow", _flow_known, "an attached snapshot names a registered flow version"),
    Rule("snapshot", _snapshot, "an attached snapshot names a state of its flow"),
    Rule("transition", _transition, "a state snapshot makes a transition of its flow"),
    Rule("cycle", _cycle, "cycle envelopes carry context['cycle']"),
    Rule("tools", _tools, f"context['tools'] lists <= {MAX_TOOLS} tools once, the call's too"),
    Rule("timeout", _timeout, f"tool calls carry 0 < metadata.timeout_ms <= {MAX_TIMEOUT_MS}"),
    Rule(
        "agent_tools",
        _agent_tools,
        "an agent state's model rounds and the calls they chose keep its allow-list",
    ),
    Rule("retry", _retry, f"max_attempts <= {MAX_ATTEMPTS}, backoff_ms <= {MAX_TIMEOUT_MS}"),
    Rule("cycle_known", _cycle_known, "results, memory answers and continues name a known cycle"),
    Rule("dispatched", _dispatched, "a result answers a call that was dispatched"),
    Rule("one_dispatch", _one_dispatch, "one call per tool per cycle round, unless continue"),
    Rule("continue", _continue, "continue re-opens an answered or failed cycle"),
    Rule("open_cycles", _open_cycles, f"at most {MAX_OPEN_CYCLES} open cycles per session"),
)
"""Every rule, in the order they are checked."""


def first_violation(
    envelope: Envelope,
    state: DispatcherState,
    rules: tuple[Rule, ...] = RULES,
    *,
    flow: Flow = EXPENSE_MACHINE,
) -> Violation | None:
    """The first rule ``envelope`` breaks, given the session's state and the machine of the
    flow its snapshot names (None: not registered); None if it keeps all."""
    for rule in rules:
        message = rule.check(envelope, state, flow)
        if message is not None:
            return Violation(rule.name, message, rule.summary)
    return None

"""What one handler call accumulates: the session, the envelopes to emit, timers to (un)set.

Every move goes through :meth:`Step.move` (its ``StateSnapshot``), every envelope to the
dispatcher carries the current snapshot (the flow's summary brought up to date), and every
reply is recorded in the history, so the engine above only says what happens, not how it
is sent.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Final

from hermesbus.contract.envelope import Envelope, Metadata, RetryPolicy
from hermesbus.contract.fields import epoch_ms
from hermesbus.contract.payloads import (
    Body,
    ContentType,
    ContextValue,
    ErrorReport,
    MemoryTier,
    MemoryWrite,
    ModelRequest,
    Reply,
    Role,
    StateSnapshot,
    ToolCall,
    ToolResult,
    UserTurn,
)
from hermesbus.contract.snapshot import ContextSnapshot
from hermesbus.processors import protocol
from hermesbus.processors.conversation._history import Message, new_message
from hermesbus.processors.conversation._session import (
    MAX_PROBLEMS,
    MAX_TRACES,
    NEW,
    Pending,
    Session,
    canonical_json,
    digest,
    snapshot_of,
)
from hermesbus.processors.conversation._settings import BUDGETS_PORT, Budgets, CycleBudgets
from hermesbus.processors.flow import PATH_COUNT, State, resolve
from hermesbus.runtime import Effects, HandlerInput, ModelState, Outcome, TimerRequest, derive_id

__all__ = ["Step"]

log = logging.getLogger(__name__)

_PROBLEM_CHARS: Final = 200
_RESULT_CHARS: Final = 60
"""How much of a tool result's scalars the history keeps."""
RETRY: Final = RetryPolicy(max_attempts=2, backoff_ms=100)
DOCUMENTS: Final = Budgets()
"""The design documents' budgets, where no ``budgets`` port is given."""


class Step:
    """One handler call's working copy of the session and its effects."""

    def __init__(self, inp: HandlerInput, session: Session) -> None:
        self.inp = inp
        self.env = inp.envelope
        self.session = session
        self.effects = Effects(inp.envelope)
        """The envelopes, timers and cancellations so far (the runtime's collector)."""
        self.moves = 0
        """Transitions taken so far for this input."""
        self.stays = 0
        """Moves that stayed, so far for this input (they count toward a flow's limit)."""
        self.summary_failed = False
        """The flow's summary hook failed in this input (kept as a problem once)."""
        self.disarmed: set[str] = set()
        """The waits this input stopped."""
        self.cycled = False
        """Whether this input started a cycle (its answer says more to the same turn)."""
        self.path_counts: dict[str, int] = {}
        """Completed sessions through each preloading state of the flow (read before)."""
        self.completed: tuple[str, int, tuple[str, ...]] | None = None
        """A flow session that ended with this input: flow, version, its path."""
        self.summarize: Callable[[], str] | None = None
        """The flow's summary of the session as it stands (each snapshot's)."""
        self.left: dict[str, Any] = {}
        """The snapshot of the state this input's last move left (``session.left``)."""
        self.invalid: tuple[str, ...] = ()
        """The symbols memory's latest answer said no longer hold (``memory.invalid``)."""
        self.failure: dict[str, str] = {}
        """What failed, while a state's failure actions run (``failure``)."""
        self.answered = False
        """The move being taken answers the user's whole message (a button, a short answer
        of the list): only such a move may keep a preference as confirmed."""

    # -- state ------------------------------------------------------------------------

    def update(self, **fields: Any) -> None:
        self.session = self.session.model_copy(update=fields)

    def fact(self, **facts: object) -> None:
        """Pin facts (None values are skipped); they survive every history fold."""
        pinned = {k: str(v) for k, v in facts.items() if v is not None and v != ""}
        self.update(facts={**self.session.facts, **pinned})

    def move(
        self,
        trigger: str,
        target: str,
        *,
        ends: bool = False,
        context: Mapping[str, ContextValue] | None = None,
    ) -> str:
        """Take the move to ``target`` the engine chose and tell the dispatcher about it
        (``ends``: a terminal state; ``context``: what else the snapshot's envelope
        records)."""
        previous = self.session.state
        if previous is not None:
            self.left = self.snapshot().model_dump(mode="json", exclude_none=True)
        self.disarm_all()
        self.moves += 1
        self.update(state=target, entered_at_ms=epoch_ms(self.env.timestamp), trigger=trigger)
        snapshot = self.snapshot()
        body = StateSnapshot(snapshot=snapshot, previous_state=previous, trigger=trigger)
        told: dict[str, ContextValue] = {protocol.ENDS: True} if ends else {}
        context = {**told, **(context or {})}
        self._envelope(
            protocol.DISPATCHER_ADDRESS, body, "state_snapshot", context=context, snapshot=snapshot
        )
        log.info("session %s: %s -> %s on %s", self.env.session_id, previous, target, trigger)
        return target

    def enter_path(self, state: State | None, target: str) -> dict[str, ContextValue]:
        """A state entered, for frequent paths (document 000 §2): it joins the session's
        path (each state once, in order); a state with a ``preload`` records the count it
        was entered with (the snapshot's context) and, once that count is high, its default
        is preloaded into the session's context (templates filled from the values)."""
        path = tuple(dict.fromkeys((*self.session.path, target)))
        self.update(path=path)
        if state is None or state.preload is None:
            return {}
        count = self.path_counts.get(target, 0)
        if count >= state.preload.after:  # a frequent path: its default, preloaded
            preloaded = resolve(state.preload.context, self.template_values())
            context = {**self.session.values.get("context", {}), **preloaded}
            self.update(values={**self.session.values, "context": context})
        return {PATH_COUNT: count}

    def template_values(self) -> dict[str, Any]:
        """What a flow's templates and hooks read: the session's values, its state (the
        trigger that entered it, whether a cycle is pending, the snapshot of the state the
        last move left), the ids of the turn (its time too: no hook reads a clock), the
        pinned facts, what memory knows of the user, and what failed."""
        session = self.session
        return {
            **{k: v for k, v in session.values.items() if k != "agent"},  # the transcript
            # of an agent state is the model's business: no template or hook reads it
            "user": {"id": self.env.user_id},
            "session": {
                "id": self.env.session_id,
                "state": session.state or "",
                "trigger": session.trigger,
                "pending": session.pending is not None,
                "left": self.left,
            },
            "turn": {
                "id": self.env.message_id,
                "at": self.env.timestamp.isoformat(),
                "said": isinstance(self.env.payload.body, UserTurn),
                "whole": self.answered,
            },
            "facts": dict(session.facts),
            "memory": {
                "preferences": dict(session.preferences),
                "candidates": dict(session.candidates),
                "invalid": list(self.invalid),
            },
            "failure": dict(self.failure),
        }

    def snapshot(self) -> ContextSnapshot:
        """The session's snapshot now (the flow's summary brought up to date first)."""
        if self.summarize is not None and (said := self.summarize()) != self.session.flow_summary:
            self.update(flow_summary=said)
        return snapshot_of(self.session)

    def problem(self, component: str, code: str, message: str) -> None:
        """Keep an error report among the session's recent problems (bounded, never shown
        raw to the user) and log it at warning, so nothing vanishes silently."""
        entry = {
            "component": component,
            "code": code,
            "message": message[:_PROBLEM_CHARS],
            "cycle": protocol.cycle_of(self.env),
            "at": self.env.timestamp.isoformat(),
        }
        self.update(problems=(*self.session.problems, entry)[-MAX_PROBLEMS:])
        log.warning(
            "session %s in %s: %s failed with %s: %s",
            self.env.session_id,
            self.session.state,
            component,
            code,
            message[:_PROBLEM_CHARS],
        )

    # -- timers -----------------------------------------------------------------------

    def arm(self, purpose: str, after: timedelta) -> None:
        """(Re)start the current state's wait ``purpose`` from the envelope's time."""
        state = self.session.state or NEW
        token = derive_id(self.env.message_id, "timer", purpose)
        data = canonical_json({"state": state, "token": token})
        self.effects.schedule(TimerRequest(self.env.timestamp + after, purpose, data))
        self.update(timers={**self.session.timers, purpose: token})

    def disarm(self, purpose: str) -> None:
        self.disarmed.add(purpose)
        if purpose not in self.session.timers:
            self.effects.forget(purpose)
        else:
            self.effects.cancel(purpose)
            self.update(timers={k: v for k, v in self.session.timers.items() if k != purpose})

    def disarm_all(self) -> None:
        for purpose in (*self.session.timers, *self.effects.pending()):
            self.disarm(purpose)

    # -- envelopes --------------------------------------------------------------------

    def _envelope(self, target: str, body: Body, task: str, **fields: Any) -> Envelope:
        envelope = protocol.answer(
            self.env,
            self.effects.index,
            source=protocol.conversation_at(self.session.state or NEW),
            target=target,
            body=body,
            task=task,
            context=fields.pop("context", {}),
            **fields,
        )
        return self.effects.emit(envelope)

    def to_dispatcher(
        self, body: Body, *, task: str, context: Mapping[str, ContextValue] | None = None
    ) -> Envelope:
        """An envelope to ``mcp:dispatcher`` carrying the current snapshot."""
        snapshot = self.snapshot()
        return self._envelope(
            protocol.DISPATCHER_ADDRESS, body, task, context=dict(context or {}), snapshot=snapshot
        )

    def cycle(
        self,
        task: str,
        calls: Sequence[tuple[str, Mapping[str, Any]]],
        budget_ms: int | None = None,
        **context: ContextValue,
    ) -> None:
        """Ask the dispatcher for one cycle of tool work: one ``ToolCall`` per tool, within
        ``budget_ms`` (a flow state's; else the expense table's budget for the state)."""
        state, source_id = self.session.state or NEW, self.env.message_id
        cycle = derive_id(source_id, "cycle")
        tools = [tool for tool, _ in calls]
        encoded = [(tool, canonical_json(arguments)) for tool, arguments in calls]
        traces = list(self.session.traces)
        for tool, arguments_json in encoded:
            trace = {"tool": tool, "args_digest": digest(arguments_json), "status_code": 0}
            traces.append({**trace, "cycle": cycle})
        pending = Pending(cycle=cycle, task=task, tools=tuple(tools), turn_id=self.session.turn_id)
        self.cycled = True
        self.update(pending=pending, traces=tuple(traces[-MAX_TRACES:]))
        shared = {**self.session.context, **context, protocol.CYCLE: cycle, protocol.TOOLS: tools}
        budgets: CycleBudgets = self.inp.ports.get(BUDGETS_PORT, DOCUMENTS)
        metadata = Metadata(timeout_ms=budgets.timeout_ms(state, budget_ms), retry_policy=RETRY)
        snapshot = self.snapshot()
        for tool, arguments_json in encoded:
            call = ToolCall(
                tool=tool,
                arguments_json=arguments_json,
                idempotency_key=derive_id(source_id, "call", tool),
            )
            self._envelope(
                protocol.DISPATCHER_ADDRESS,
                call,
                task,
                context=dict(shared),
                metadata=metadata,
                snapshot=snapshot,
            )

    def ask_model(self, task: str, request: ModelRequest, budget_ms: int | None = None) -> None:
        """Ask the model (through the dispatcher) for an agent state's next step: a round
        answered once, by the ``ModelAnswer`` of the same cycle."""
        state, source_id = self.session.state or NEW, self.env.message_id
        cycle = derive_id(source_id, "model")
        pending = Pending(cycle=cycle, task=task, tools=(), turn_id=self.session.turn_id)
        self.cycled = True
        self.update(pending=pending)
        budgets: CycleBudgets = self.inp.ports.get(BUDGETS_PORT, DOCUMENTS)
        metadata = Metadata(timeout_ms=budgets.timeout_ms(state, budget_ms), retry_policy=RETRY)
        self._envelope(
            protocol.DISPATCHER_ADDRESS,
            request,
            task,
            context={**self.session.context, protocol.CYCLE: cycle},
            metadata=metadata,
            snapshot=self.snapshot(),
        )

    def remember(self, key: str, value: Any, **fields: Any) -> None:
        """A mid-term ``MemoryWrite`` (forwarded by the dispatcher to ``memory:mid_term``)."""
        write = MemoryWrite(
            tier=MemoryTier.MID_TERM, key=key, value_json=canonical_json(value), **fields
        )
        self.to_dispatcher(write, task="memory_write")

    def reply(self, text: str, *, choices: Sequence[str] = (), steps: Sequence[str] = ()) -> None:
        """The one reply to the pending user turn, with the stale/degraded notes gathered."""
        session = self.session
        full = "".join((text, *session.notes))
        reply = Reply(
            text=full,
            choices=tuple(choices),
            verification_steps=tuple(dict.fromkeys(steps)),
            stale=session.stale,
            degraded=session.degraded,
        )
        envelope = self._envelope(protocol.USER, reply, "reply")
        message = new_message(
            message_id=derive_id(self.env.message_id, "reply"),
            session_id=self.env.session_id,
            role=Role.ASSISTANT,
            text=full,
            timestamp=envelope.timestamp,
            parent_id=session.turn_id or None,
            metadata={"choices": len(choices)},
        )
        self.update(notes=(), stale=False, degraded=False)
        self.add_message(message)

    def set_status(self, cycle: str, statuses: Mapping[str, int]) -> None:
        """The answered calls of ``cycle``: their status codes into the snapshot's traces."""
        traces = tuple(
            {**t, "status_code": statuses[t["tool"]]}
            if t.get("cycle") == cycle and t["tool"] in statuses
            else t
            for t in self.session.traces
        )
        self.update(traces=traces)

    def failed_call(self, report: ErrorReport) -> None:
        """A fail-fast report of the pending cycle: its tool's status into the traces (an
        HTTP code, or the timeout's)."""
        pending = self.session.pending
        status = int(report.code) if report.code.isdigit() else None
        if report.code == "timeout":
            status = protocol.TIMEOUT
        tool = report.component.removeprefix("tool:")
        if pending is not None and status is not None and tool in pending.tools:
            self.set_status(pending.cycle, {tool: status})

    def record_result(self, result: ToolResult, cycle: str) -> None:
        """A tool's answer in the history: its status and its scalar fields, briefly."""
        try:
            content = json.loads(result.result_json)
        except ValueError:
            content = {}
        scalars = (
            {k: v for k, v in content.items() if not isinstance(v, dict | list)}
            if isinstance(content, dict)
            else {}
        )
        brief = f"{result.tool} {result.status_code}: {canonical_json(scalars)[:_RESULT_CHARS]}"
        extra = {"tool": result.tool, "status_code": result.status_code}
        self.record(
            brief,
            role=Role.TOOL,
            content_type=ContentType.TOOL_RESULT,
            parent_id=cycle,
            extra=extra,
        )

    def record_turn(self, turn: UserTurn) -> None:
        """The user's turn: the one the session answers now, and a message of its history
        (with its attachments' URIs)."""
        self.update(turn_id=self.env.message_id)
        kind = ContentType.IMAGE if turn.attachments else ContentType.TEXT
        uris = [a.uri for a in turn.attachments]
        self.record(turn.text, role=Role.USER, content_type=kind, extra={"attachments": uris})

    def record(
        self,
        text: str,
        *,
        role: Role,
        content_type: ContentType = ContentType.TEXT,
        parent_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Add a message said at the envelope's time to the history."""
        message = new_message(
            message_id=derive_id(self.env.message_id, "msg", role.value, text),
            session_id=self.env.session_id,
            role=role,
            text=text,
            timestamp=self.env.timestamp,
            parent_id=parent_id,
            content_type=content_type,
            extra=extra,
        )
        self.add_message(message)

    def add_message(self, message: Message) -> None:
        """Append to the history, folding old messages under the token budget."""
        self.update(history=self.session.history.add(message, self.session.facts))

    def outcome(self) -> Outcome:
        if self.session.flow is not None:
            self._mark_more()
        return self.effects.outcome(ModelState(self.session))

    def _mark_more(self) -> None:
        """A flow's replies say whether more replies to the same turn follow
        (``context[MORE]``): all but the last of this input's, and the last when a cycle
        it started will answer, so ``say --wait`` waits for the rest. An answer that ends
        such a turn with nothing to say sends a reply with no text, the turn's end."""
        emitted = self.effects.emitted
        replies = [n for n, e in enumerate(emitted) if isinstance(e.payload.body, Reply)]
        continues = self.cycled and self.session.pending is not None
        if not replies:
            if self.session.said_more and not continues:
                self.update(said_more=False)
                self._envelope(
                    protocol.USER, Reply(text=""), "reply", context={protocol.MORE: False}
                )
            return
        for n in replies:
            more = n != replies[-1] or continues
            payload = emitted[n].payload
            context = {**payload.context, protocol.MORE: more}
            emitted[n] = emitted[n].model_copy(
                update={"payload": payload.model_copy(update={"context": context})}
            )
        self.update(said_more=continues)

"""The flow engine: a session of any registered flow, driven by its spec.

A session starts in a flow chosen by the app (``UserTurn.flow``) or by its first turn's
intent, and keeps that flow's version to its end (the snapshot names both, and the
dispatcher checks each move against that version). Entering a state runs its on-enter
actions in order: a call or a parallel group is one cycle through the dispatcher, and the
actions after it run when its answer comes; replies, memory writes and hooks run at once.
When the actions are done: a terminal state ends the session (its snapshot into mid-term
memory); any other state arms its waits, then takes the first turn's intent (the start
state only) or its ``done`` move, or waits for the user.

A user turn is matched against the flow's intents; the state's move on that intent is
taken (the first whose guards pass), else its ``any`` move, else the last question is
asked again. A confirmation state passes only on a press of one of its buttons or a
message that is, as a whole, a few words of its answers. A failure (a tool's error, a fail-fast
report, a hook's error) tells the user what failed and takes the state's exception exit.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Final

from hermesbus.contract.fields import epoch_ms
from hermesbus.contract.payloads import (
    ContextValue,
    ErrorReport,
    MemoryContext,
    MemoryTier,
    MemoryWrite,
    ModelAnswer,
    ModelRequest,
    Reply,
    TimerFired,
    ToolResult,
    ToolResults,
    UserTurn,
)
from hermesbus.errors import HermesError, HookError, IntentError, StoreError
from hermesbus.processors import protocol
from hermesbus.processors.chat import TIMED_OUT
from hermesbus.processors.conversation import _agent as agents
from hermesbus.processors.conversation import _texts as texts
from hermesbus.processors.conversation._confirm import is_confirmation
from hermesbus.processors.conversation._context import Step
from hermesbus.processors.conversation._intent import RuleIntentParser
from hermesbus.processors.conversation._session import Session, canonical_json
from hermesbus.processors.conversation._settings import INTENT_PORT
from hermesbus.processors.conversation._spec_intents import (
    MAX_TEXT,
    Parsed,
    answered,
    parse_turn,
    plain,
)
from hermesbus.processors.flow import (
    EXPENSE_SPEC,
    FAILURE,
    FLOWS_PORT,
    HOOKS_PORT,
    INSTANT_ACTIONS,
    NAME_PATTERN,
    PATHS_PORT,
    SUMMARY_MAX,
    Action,
    ArmAction,
    Call,
    CallAction,
    CarryAction,
    Confirmation,
    Decide,
    DecideAction,
    DisarmAction,
    FailAction,
    FlowCatalog,
    FlowSpec,
    HookAction,
    Hooks,
    Instant,
    Parallel,
    ParallelAction,
    PathCounts,
    PinAction,
    PreferenceWrite,
    RememberAction,
    RememberDeclined,
    RememberFact,
    RememberItem,
    RememberPreference,
    RememberSymbol,
    ReplyAction,
    SetAction,
    SnapshotHook,
    State,
    Transition,
    Wait,
    duration_ms,
    placeholders_in,
    render,
    resolve,
)
from hermesbus.processors.flow import Reply as SpecReply

__all__ = [
    "FLOW_SETTLE_MS",
    "FLOW_SNAPSHOT_TTL_S",
    "NOT_UNDERSTOOD",
    "FlowLost",
    "choose_flow",
    "count_completed",
    "ended",
    "flow_of",
    "lost",
    "not_registered",
    "on_flow_answer",
    "on_flow_error",
    "on_flow_model",
    "on_flow_results",
    "on_flow_timer",
    "on_flow_turn",
    "prepare",
    "start_flow",
    "timer_is_current",
]

log = logging.getLogger(__name__)

NOT_UNDERSTOOD: Final = "抱歉，没能理解您的回复。"
LOST: Final = (
    "会话所用的流程 {flow} 第 {version} 版已不在注册表中，本次会话已结束，请重新开始"
    "（the flow version this session ran is gone: please start again）。"
)
MAX_FAILURES: Final = 3
"""Failures a flow session may have in a row without the user speaking; after that no
exception exit is taken (an exit that fails again would loop) until the user speaks."""
NOT_REGISTERED: Final = "流程 {flow} 尚未注册，无法开始会话（flow {flow} is not registered）。"
FLOW_SNAPSHOT_TTL_S: Final = 30 * 24 * 3600
"""How long a finished session's snapshot stays in mid-term memory (as unfinished reports)."""
FLOW_SETTLE_MS: Final = 1_000
"""A registered version takes new sessions whose first turn is at least this much younger
than its registration: the catalog then reads the registry at most once a second for new
sessions, and a replay chooses as the live run did."""
MAX_MOVES: Final = 32
"""The most moves one input may make (a ``done`` circle stops here)."""
_RULES: Final = RuleIntentParser()
_BUILTIN: Final = Hooks()
"""Without a hooks port, the built-in flows' hooks only."""
_INSTANT: Final = INSTANT_ACTIONS
NAME: Final = re.compile(NAME_PATTERN)
MAX_FACTS: Final = 32
MAX_FACT_CHARS: Final = 200
"""Pinned facts stay in every fold of the history: a few short ones."""
MAX_ENTITY: Final = 200
"""The longest entity a parser hook may answer (a name, a number: never a text)."""


def catalog_of(step: Step) -> FlowCatalog | None:
    catalog: FlowCatalog | None = step.inp.ports.get(FLOWS_PORT)
    return catalog


class FlowLost(HermesError):
    """The flow version a session runs is not in the registry (lost, or its signing key
    rotated out twice): the session cannot go on."""


async def flow_of(step: Step) -> FlowSpec | None:
    """The spec of the flow the session runs (a session named by no flow runs the built-in
    expense report); None when none is under way (a turn starts a new one). FlowLost: the
    registry, read to its end, does not hold the version (a registry that cannot be read is
    a BrokerError: the record waits)."""
    session = step.session
    if session.outcome or session.state is None:
        return None
    if session.flow is None:  # the built-in expense report
        return EXPENSE_SPEC
    catalog = catalog_of(step)
    version = session.flow_version or 0
    spec = await catalog.version(session.flow, version) if catalog is not None else None
    if spec is None:
        raise FlowLost(f"flow {session.flow} version {version} is not in the flow registry")
    return spec


def lost(step: Step, exc: FlowLost) -> None:
    """End a session whose flow version is gone: kept among the problems, told to the
    user (on a turn), the session reset; nothing waits for a version that will not come."""
    session = step.session
    step.problem("conversation:flow", "flow_lost", str(exc))
    step.session = Session(
        preferences=session.preferences,
        declined=session.declined,
        problems=step.session.problems,
    )
    if isinstance(step.env.payload.body, UserTurn):
        step.reply(LOST.format(flow=session.flow, version=session.flow_version))


def ended(step: Step, spec: FlowSpec) -> bool:
    state = spec.state(step.session.state or "")
    return state is None or state.kind == "terminal"


async def choose_flow(step: Step, turn: UserTurn) -> FlowSpec | str | None:
    """The flow a new session starts in: the app's (``turn.flow``; its id as a text when
    it is not registered), else the first registered flow (by id) with an intent the turn
    matches that begins it (see :func:`_begins`); None: none (the expense report's own
    parser decides)."""
    catalog = catalog_of(step)
    at_ms = epoch_ms(step.env.timestamp) - FLOW_SETTLE_MS
    flows = await catalog.current(at_ms) if catalog is not None else {}
    if turn.flow is not None:
        return flows.get(turn.flow, turn.flow)
    fresh = {  # a flow's parser sees nothing of the session's earlier flows
        "user": {"id": step.env.user_id},
        "session": {"id": step.env.session_id, "state": ""},
        "turn": {"id": step.env.message_id, "at": step.env.timestamp.isoformat()},
    }
    for name in sorted(flows):
        spec = flows[name]
        try:
            parsed = _parse(step, spec, turn, fresh)
        except HookError as exc:  # that flow cannot read turns: it begins nothing
            step.problem(f"flow:{spec.flow}", "hook", str(exc))
            continue
        # a bare short answer ("好的") answers a question: it begins no flow
        if parsed.intent is not None and not parsed.whole and _begins(spec, parsed.intent):
            return spec
    return None


def _begins(spec: FlowSpec, intent: str) -> bool:
    """Whether ``intent`` may begin a session of ``spec``: it moves the start state, or it
    moves no state at all (an entry phrase). An intent of a later step ("合并这两个表")
    begins nothing: a new session saying it is not this flow's."""
    moves = [m for m in spec.transitions if m.on == intent]
    return not moves or any(m.source == spec.start for m in moves)


def not_registered(step: Step, flow: str) -> None:
    step.reply(NOT_REGISTERED.format(flow=flow))


def _parse(
    step: Step, spec: FlowSpec, turn: UserTurn, fresh: dict[str, Any] | None = None
) -> Parsed:
    """The flow's reading of the turn: its parser hook's (given ``fresh`` values when the
    session is not the flow's yet), else its intents' rules.
    HookError: the parser hook failed or answered something else than it must."""
    if spec.parser is not None:
        values = _values(step) if fresh is None else fresh
        text = turn.text[:MAX_TEXT]
        port = step.inp.ports.get(INTENT_PORT)
        local = step.env.timestamp.astimezone(port.zone if port is not None else _RULES.zone)
        said = {
            **values["turn"],
            "text": text,
            "attachments": len(turn.attachments),
            "local": local.isoformat(),
        }
        return _parsed(spec, _hook(step, spec, spec.parser, {**values, "turn": said}), text)
    parser = step.inp.ports.get(INTENT_PORT)
    zone = parser.zone if parser is not None else _RULES.zone
    return parse_turn(spec, turn.text, now=step.env.timestamp, zone=zone)


def _parsed(spec: FlowSpec, answer: Any, text: str) -> Parsed:
    """A parser hook's answer, checked: ``{"intent": one of the flow's intents or null,
    "entities": {name: text}}``."""
    where = f"parser {spec.parser!r} of flow {spec.flow}"
    if not isinstance(answer, dict) or not set(answer) <= {"intent", "entities"}:
        raise HookError(f"{where} answered {answer!r}: not {{intent, entities}}")
    intent, entities = answer.get("intent"), answer.get("entities", {})
    known = {i.name: i for i in spec.intents}
    if intent is not None and (not isinstance(intent, str) or intent not in known):
        raise HookError(f"{where} answered intent {intent!r}: not one of the flow's intents")
    declared = {e.name for e in known[intent].entities} if intent is not None else set()
    if entities is None:
        entities = {}
    if not isinstance(entities, dict) or not all(
        isinstance(k, str) and k in declared and isinstance(v, str) and len(v) <= MAX_ENTITY
        for k, v in entities.items()
    ):
        named = ", ".join(sorted(declared)) or "none"
        raise HookError(
            f"{where} answered entities {entities!r}: not short texts of its intent's "
            f"entities ({named})"
        )
    whole = intent is not None and answered(known[intent], text)  # the engine checks it
    return Parsed(intent, dict(entities), whole=whole)


async def _understood(step: Step, spec: FlowSpec, turn: UserTurn) -> Parsed:
    """What the turn says in the flow's terms: its phrases and patterns first (exact, and
    what a spec promises); when none matches and a model is configured (``HERMES_LLM_URL``),
    the model's choice among the flow's intents, by their labels and descriptions (checked:
    only a listed intent, only its entities; on any failure, no intent)."""
    parsed = _parse(step, spec, turn)
    model = step.inp.ports.get(INTENT_PORT)
    classify = getattr(model, "classify", None)
    if parsed.intent is not None or classify is None or not spec.intents:
        return parsed  # a parser hook's null is "not understood": the model may read it
    try:
        name, entities = await classify(
            turn.text[:MAX_TEXT],
            now=step.env.timestamp,
            flow=spec.flow,
            state=step.session.state or spec.start,
            intents=spec.intents,
        )
    except IntentError as exc:
        log.warning("flow %s: the intent model failed, the rules stand: %s", spec.flow, exc)
        return parsed
    return Parsed(name, entities) if name is not None else parsed


async def start_flow(step: Step, spec: FlowSpec, turn: UserTurn, *, builtin: bool = False) -> None:
    """A new session of ``spec`` (the user's confirmed preferences carried over); a
    ``builtin`` flow (the expense report) is named by no snapshot: the dispatcher knows it."""
    kept = step.session
    step.session = Session(
        preferences=kept.preferences,
        declined=kept.declined,
        flow=None if builtin else spec.flow,
        flow_version=None if builtin else spec.version,
    )
    attach(step, spec)
    step.record_turn(turn)
    try:
        parsed = await _understood(step, spec, turn)
    except HookError as exc:  # a flow that cannot read its first turn does not start
        step.session = kept
        _broken_parser(step, str(exc))
        return
    values: dict[str, Any] = {
        "intent": {"name": parsed.intent or ""},
        "attachments": _attachments(turn),
        "entities": dict(parsed.entities),
        "symbols": {},
        "context": {},
        "results": {},
        "hooks": {},
    }
    step.update(values=values, queued=parsed.intent or "")
    try:  # what the flow does as a session begins (it may pin what the first turn said)
        for action in spec.begin:
            if action.when is None or _hook(step, spec, action.when):
                _instant(step, spec, action)
    except HookError as exc:
        step.session = kept
        _broken_parser(step, str(exc))
        return
    _enter(step, spec, spec.start, "user_turn")


def _broken_parser(step: Step, message: str) -> None:
    step.problem("conversation:hook", "hook", message)
    step.reply(texts.error_text("conversation:hook", "hook", "请联系管理员"))


def _attachments(turn: UserTurn) -> list[dict[str, str]]:
    """The files the turn carries, as templates and hooks read them (``{attachments}``)."""
    return [
        {"name": a.name, "media_type": a.media_type, "uri": a.uri, "sha256": a.sha256}
        for a in turn.attachments
    ]


async def on_flow_turn(step: Step, spec: FlowSpec, turn: UserTurn) -> None:
    """A turn of a session in ``spec``'s non-terminal state."""
    attach(step, spec)
    step.record_turn(turn)
    if step.session.pending is not None:
        step.reply(texts.PENDING)
        return
    step.update(failures=0)
    try:
        parsed = await _understood(step, spec, turn)
    except HookError as exc:  # the flow cannot read turns: the state fails
        _fail(step, spec, "conversation:hook", "hook", str(exc))
        return
    values = step.session.values
    entities = {**values.get("entities", {}), **parsed.entities}
    said = {"intent": {"name": parsed.intent or ""}, "attachments": _attachments(turn)}
    step.update(values={**values, **said, "entities": entities})
    state = _state(step, spec)
    confirm = state.confirm
    if confirm is not None and not turn.attachments and _passes(confirm, turn.text, parsed):
        if _answered(step, spec, confirm.trigger, True):
            return
    if state.on_turn is not None and _turned(step, spec, state.on_turn, parsed):
        return
    if parsed.intent is not None and _answered(step, spec, parsed.intent, parsed.whole):
        return
    if _take(step, spec, "any"):
        return
    asked = step.session.asked
    text = NOT_UNDERSTOOD + str(asked.get("text", ""))
    step.reply(text, choices=tuple(asked.get("buttons", ())))


def _turned(step: Step, spec: FlowSpec, on_turn: Decide, parsed: Parsed) -> bool:
    """The state's turn hook named the turn's move (taken; or the state failed): True."""
    try:
        chosen = _chosen(step, spec, on_turn)
    except HookError as exc:
        _fail(step, spec, "conversation:hook", "hook", str(exc))
        return True
    if chosen is None:
        return False
    if not _answered(step, spec, chosen, parsed.whole):
        why = f"no move of {step.session.state!r} on {chosen!r} passes its guards"
        _fail(step, spec, "conversation:hook", "hook", f"{on_turn.hook}: {why}")
    return True


def _passes(confirm: Confirmation, text: str, parsed: Parsed) -> bool:
    """A press of a button, or a message that is, as a whole, a few words of the answers
    (and, when the confirmation names intents, read as one of them)."""
    if plain(text) in {plain(button) for button in confirm.buttons}:
        return True
    if not is_confirmation(text, confirm.answers):
        return False
    return not confirm.intents or parsed.intent in confirm.intents


def _answered(step: Step, spec: FlowSpec, trigger: str, whole: bool) -> bool:
    """Take the move of the user's answer; ``whole``: the whole message was a button or a
    short answer of the list, which alone proves a yes (a preference kept on it)."""
    step.answered = whole
    try:
        return _take(step, spec, trigger, confirmed=whole and _confirms(step, spec, trigger))
    finally:
        step.answered = False


def _confirms(step: Step, spec: FlowSpec, trigger: str) -> bool:
    confirm = _state(step, spec).confirm
    return confirm is not None and confirm.trigger == trigger


def on_flow_results(step: Step, spec: FlowSpec, answer: ToolResults) -> None:
    """The answer of the pending cycle: its results kept, the state's actions go on."""
    attach(step, spec)
    pending = step.session.pending
    if pending is None:
        return
    step.update(pending=None)
    actions = _actions(step, spec)
    index = step.session.next_action - 1
    calls = _calls_of(actions[index] if 0 <= index < len(actions) else None)
    into = {call.tool: call.into or call.tool for call in calls}
    doubted = sorted(set(answer.context.invalid if answer.context else ()) & _held(calls))
    kept = bool(calls) and not doubted  # a fact's verification is the dispatcher's to write
    values = step.session.values
    results = dict(values.get("results", {}))
    step.set_status(pending.cycle, {r.tool: r.status_code for r in answer.results})
    for result in answer.results:
        step.record_result(result, pending.cycle)
        if result.stale:
            step.update(
                notes=(*step.session.notes, texts.stale_note(result.tool, result.stale_since))
            )
        elif result.fallback:
            step.update(
                notes=(*step.session.notes, texts.degraded_note(result.tool, result.fallback))
            )
        if kept:
            results[into.get(result.tool, result.tool)] = _content(result)
    steps = tuple(s for r in answer.results for s in r.verification_steps)
    step.update(steps={**step.session.steps, pending.task: steps})
    if kept:  # a reply says how what it reports was checked: never a failed or doubted answer
        ok = [r for r in answer.results if r.status_code == protocol.OK]
        shown = (*step.session.unshown_steps, *(s for r in ok for s in r.verification_steps))
        step.update(unshown_steps=tuple(dict.fromkeys(shown)))
    symbols = dict(values.get("symbols", {}))
    if answer.context is not None:
        symbols.update(answer.context.symbols)
        _absorb(step, answer.context)
    step.update(
        values={**values, "results": results, "symbols": symbols},
        stale=step.session.stale or any(r.stale for r in answer.results),
        degraded=step.session.degraded or any(r.fallback and not r.stale for r in answer.results),
    )
    failed = next((r for r in answer.results if r.status_code != protocol.OK), None)
    missing = [tool for tool in pending.tools if tool not in {r.tool for r in answer.results}]
    if doubted:  # what the call read no longer holds: ask, never use its answer
        step.problem("memory:short_term", "invalid", f"symbols {', '.join(doubted)}")
        if not _take(step, spec, "invalid"):
            _fail(step, spec, "memory:short_term", "invalid", f"symbols {', '.join(doubted)}")
    elif failed is not None:
        _fail_result(step, spec, failed)
    elif missing:
        _fail(step, spec, protocol.tool_at(missing[0]), "missing", "no result")
    else:
        _run(step, spec)


def _absorb(step: Step, memory: MemoryContext) -> None:
    """What memory knows of the user: confirmed preferences join the session's, candidates
    not confirmed nor declined are kept to ask about, invalid symbols are told."""
    session = step.session
    preferences = {**session.preferences, **memory.preferences}
    skip = set(preferences) | set(session.declined)
    found = {k: v for k, v in memory.candidates.items() if k not in skip}
    step.update(preferences=preferences, candidates={**session.candidates, **found})
    step.invalid = tuple(memory.invalid)


def on_flow_error(step: Step, spec: FlowSpec, report: ErrorReport) -> None:
    """Fail fast from the dispatcher for the pending cycle: the state's exception exit; a
    cycle refused for symbols that no longer hold takes the state's ``invalid`` move (the
    flow asks instead of guessing), its exit when it has none. A call the user may not
    make (its role, rate or quota) is told in the dispatcher's own sentence."""
    attach(step, spec)
    pending = step.session.pending
    if (
        pending is not None
        and report.code in protocol.REFUSALS
        and pending.task.startswith(_AGENT_TOOLS % _state(step, spec).id)
    ):  # a call the model chose that the user may not make: the model hears why
        step.update(pending=None)
        _agent_refused(step, spec, report)
        return
    step.failed_call(report)
    step.update(pending=None)
    if report.code == protocol.INVALID_SYMBOLS:
        step.problem(report.component, report.code, report.message)
        if _take(step, spec, "invalid"):
            return
    text = texts.error_text(report.component, report.code, report.advice)
    if report.code in protocol.REFUSALS:  # who may call it, how often: the sentence says
        text = report.message
    _fail(step, spec, report.component, report.code, report.message, text=text)


def timer_is_current(step: Step, spec: FlowSpec, fired: TimerFired, token: str | None) -> bool:
    """The wait is the current state's and still the one armed."""
    session = step.session
    waits = _state(step, spec).waits if not ended(step, spec) else ()
    return (
        token is not None
        and session.timers.get(fired.purpose) == token
        and any(wait.id == fired.purpose for wait in waits)
    )


def on_flow_timer(step: Step, spec: FlowSpec, fired: TimerFired) -> None:
    """A wait of the state ran out: its trigger's move, then its text (after the move's own
    actions, before the next state's); a move that stays waits again."""
    attach(step, spec)
    wait_state = step.session.state
    wait = next(w for w in _state(step, spec).waits if w.id == fired.purpose)
    step.update(timers={k: v for k, v in step.session.timers.items() if k != fired.purpose})
    said = (wait.text, tuple(wait.buttons)) if wait.text else None
    moves = step.moves
    if not _take(step, spec, wait.trigger, then=said):
        log.info("session %s: wait %s fired no move", step.env.session_id, wait.id)
        if said is not None:
            _say(step, *said)
    elif (  # it stayed: wait again, unless the move stopped or restarted the wait itself
        step.moves == moves
        and step.session.state == wait_state
        and wait.id not in step.disarmed
        and wait.id not in step.session.timers
    ):
        step.arm(wait.id, timedelta(milliseconds=duration_ms(wait.after)))


# -- the interpreter ---------------------------------------------------------------------


def _state(step: Step, spec: FlowSpec) -> State:
    state = spec.state(step.session.state or "")
    if state is None:
        raise StoreError(
            f"session {step.env.session_id!r} is in {step.session.state!r}, which flow "
            f"{spec.flow} version {spec.version} does not have",
            retriable=False,
        )
    return state


def _values(step: Step) -> dict[str, Any]:
    return step.template_values()


def attach(step: Step, spec: FlowSpec) -> None:
    """The step writes ``spec``'s summary into each snapshot it sends (computed again only
    when the session changed since: a session is never changed in place)."""
    last: list[tuple[Session, str]] = []

    def summarize() -> str:
        if last and last[0][0] is step.session:
            return last[0][1]
        said = _summary(step, spec)
        last[:] = [(step.session, said)]
        return said

    step.summarize = summarize


def _enter(
    step: Step,
    spec: FlowSpec,
    target: str,
    trigger: str,
    does: Sequence[Action] = (),
    *,
    then: tuple[str, tuple[str, ...]] | None = None,
) -> None:
    """Move to ``target`` (its snapshot to the dispatcher; a terminal state's memory
    snapshot at once), do the move's own actions, say ``then`` (a wait's text, what
    failed), then the state's on-enter actions."""
    state = spec.state(target)
    if state is None:  # lint refuses such a spec; a registry can hold only linted ones
        raise StoreError(f"flow {spec.flow} v{spec.version} has no state {target!r}")
    if step.session.pending is not None:  # the cycle's answer will come to another state
        step.update(pending=None, degraded=True)
    step.update(next_action=0, acting=-1)
    recorded = step.enter_path(state, state.id)
    # a registered flow's last snapshot says it ends; the built-in one's state does (memory
    # knows it), as its recorded histories show
    ends = state.kind == "terminal" and step.session.flow is not None
    step.move(trigger, target, ends=ends, context=recorded)
    if state.kind == "terminal":
        _arrive(step, spec, state)
    if not _does(step, spec, does):
        return
    if then is not None:
        _say(step, *then)
    _run(step, spec)


def _say(step: Step, text: str, buttons: Sequence[str] = ()) -> None:
    step.reply(render(text, _values(step)), choices=buttons)


async def prepare(step: Step, spec: FlowSpec) -> None:
    """Read what this input may need of the world before the engine runs: how many
    completed sessions went through each preloading state (a port: replay answers what
    was recorded)."""
    paths: PathCounts | None = step.inp.ports.get(PATHS_PORT)
    if paths is None:
        return
    for state in spec.states:
        if state.preload is not None:
            count = await paths.count(spec.flow, spec.version, state.id)
            step.path_counts[state.id] = count


async def count_completed(step: Step) -> None:
    """Count the path of a flow session that ended with this input."""
    paths: PathCounts | None = step.inp.ports.get(PATHS_PORT)
    if step.completed is not None and paths is not None:
        flow, version, path = step.completed
        await paths.completed(flow, version, path, step.env.message_id)


def _summary(step: Step, spec: FlowSpec) -> str:
    """The snapshot's summary: the flow's summary hook's, else the state's template (else
    its name). A hook that fails gives the state's name, its failure kept as a problem."""
    state = spec.state(step.session.state or "")
    if state is None:
        return ""
    if spec.summary is not None:
        try:
            said = _hook(step, spec, spec.summary)
        except HookError as exc:
            if not step.summary_failed:  # once an input: the real problems stay in view
                step.summary_failed = True
                step.problem("conversation:hook", "hook", str(exc))
            return state.name
        return str(said)[:SUMMARY_MAX] if said is not None else state.name
    if state.summary is None:
        return state.name
    return render(state.summary, _values(step))


def _actions(step: Step, spec: FlowSpec) -> Sequence[Action]:
    """The actions running: the state's on-enter ones, or those of the move that stayed."""
    acting = step.session.acting
    if 0 <= acting < len(spec.transitions):
        return spec.transitions[acting].do
    return _state(step, spec).on_enter


def _run(step: Step, spec: FlowSpec) -> None:
    """The running actions from ``next_action`` on, until a cycle is pending or a move is
    taken; the state's own actions done, its waits and automatic moves (``_done``)."""
    state = _state(step, spec)
    actions = _actions(step, spec)
    while step.session.next_action < len(actions):
        index = step.session.next_action
        action = actions[index]
        step.update(next_action=index + 1)
        try:
            if action.when is not None and not _hook(step, spec, action.when):
                continue
            if isinstance(action, CallAction | ParallelAction):
                _cycle(step, spec, state, action, index)
                return
            if isinstance(action, RememberAction) and isinstance(action.remember, RememberFact):
                _verify_fact(step, spec, action.remember)
                return
            if isinstance(action, DecideAction):
                if _decide(step, spec, action.decide):
                    return
            elif isinstance(action, FailAction):
                _declared(step, spec, action)
                return
            else:
                _instant(step, spec, action)
        except HookError as exc:
            _fail(step, spec, "conversation:hook", "hook", str(exc))
            return
    if step.session.acting >= 0:  # a stay's actions are done: the state waits as it did
        step.update(acting=-1, next_action=len(state.on_enter))
        return
    if state.agent is not None:  # its model chooses what comes next, round by round
        _agent_begin(step, spec, state)
    else:
        _done(step, spec, state)


# -- agent states: a model chooses the tools ----------------------------------------------

_AGENT_ASK: Final = "%s@agent#%d"
"""The task of an agent state's model request (state, round)."""
_AGENT_TOOLS: Final = "%s" + protocol.AGENT_TOOLS_TASK
"""The task of the cycle of the tools the model chose (state, then the round)."""
_MODEL: Final = protocol.MODEL_ADDRESS


def _agent_begin(step: Step, spec: FlowSpec, state: State) -> None:
    """The state's actions are done: its model's first round, with the prompt and the
    user's words."""
    agent = state.agent
    if agent is None:
        return
    prompt = render(agent.prompt, _values(step))
    text = agents.user_text(step.env.payload.body, step.session.history.recent)
    spent = step.session.values.get(agents.AGENT_KEY)  # entered again for the same turn:
    turn = step.session.turn_id  # its rounds and tokens count on (a loop ends)
    record = agents.opening(state.id, prompt, text, turn, spent)
    _agent_ask(step, spec, state, record)


def _agent_ask(step: Step, spec: FlowSpec, state: State, record: dict[str, Any]) -> None:
    """The model's next round, within the state's rounds and tokens (past them, the state
    fails: its exit)."""
    agent = state.agent
    if agent is None:
        return
    left = agent.max_tokens - record["tokens"]
    if record["round"] >= agent.max_rounds or left <= 0:
        spent = "rounds" if left > 0 else "tokens"
        why = (
            f"the model of {state.id} used its {agent.max_rounds} rounds without answering"
            if left > 0
            else f"the model of {state.id} used its {agent.max_tokens} tokens without answering"
        )
        step.update(values={**step.session.values, agents.AGENT_KEY: record})
        _fail(step, spec, _MODEL, spent, why)
        return
    record = {**record, "round": record["round"] + 1}
    step.update(values={**step.session.values, agents.AGENT_KEY: record})
    last = record["round"] >= agent.max_rounds  # the last round offers no tool: answer now
    request = ModelRequest(
        agent=f"{spec.flow}/{state.id}",
        tools=() if last else tuple(agent.tools),
        messages_json=canonical_json(record["messages"]),
        max_tokens=left,
        round=record["round"],
    )
    step.ask_model(_AGENT_ASK % (state.id, record["round"]), request, spec.budget_of(state.id))


def on_flow_model(step: Step, spec: FlowSpec, answer: ModelAnswer) -> None:
    """The model's answer to the pending round: the tools it chose as one ordinary cycle
    (refused ones told why, never run), or its text as the state's answer and its ``done``
    move; a model that failed fails the state (its exit)."""
    attach(step, spec)
    if step.session.pending is None:
        return
    step.update(pending=None)
    state = _state(step, spec)
    record = step.session.values.get(agents.AGENT_KEY)
    agent = state.agent
    if agent is None or not isinstance(record, dict) or record.get("state") != state.id:
        step.problem(_MODEL, "stale", f"a model answer for {state.id}, which asked none")
        return
    if answer.error:  # a model that ran out of time is a timeout, as the round's deadline
        code = "timeout" if TIMED_OUT in answer.error else "model"
        _fail(step, spec, _MODEL, code, answer.error)
        return
    answer = agents.kept_to(answer, frozenset(agent.tools))  # checked again, here too
    record = agents.answered(record, answer)
    for choice in answer.choices:
        if choice.refusal:  # counted in the record and kept among the problems
            step.problem(_MODEL, "refused", f"{choice.tool or '?'}: {choice.refusal}")
    step.update(values={**step.session.values, agents.AGENT_KEY: record})
    runs = [
        (choice.tool, arguments)
        for choice in answer.choices
        if not choice.refusal and isinstance(arguments := agents.arguments_of(choice), dict)
    ]  # kept_to refused every other
    if runs:
        task = f"{_AGENT_TOOLS % state.id}{record['round']}"
        step.cycle(task, runs, budget_ms=spec.budget_of(state.id))
    elif answer.choices:  # every call refused: the model hears why in its next round
        _agent_ask(step, spec, state, record)
    else:
        _agent_done(step, spec, state, record, answer.content.strip())


def _agent_results(step: Step, spec: FlowSpec, answer: ToolResults) -> None:
    """The results of the tools the model chose: kept (as a flow's calls keep theirs) and
    told to the model, whose next round follows."""
    state = _state(step, spec)
    record = step.session.values.get(agents.AGENT_KEY)
    if state.agent is None or not isinstance(record, dict):
        return
    values = step.session.values
    results = dict(values.get("results", {}))
    cycle = protocol.cycle_of(step.env)
    step.set_status(cycle, {r.tool: r.status_code for r in answer.results})
    for result in answer.results:
        step.record_result(result, cycle)
        if result.status_code == protocol.OK:
            results[result.tool] = _content(result)
        if result.stale:
            note = texts.stale_note(result.tool, result.stale_since)
            step.update(notes=(*step.session.notes, note))
        elif result.fallback:
            note = texts.degraded_note(result.tool, result.fallback)
            step.update(notes=(*step.session.notes, note))
    ok = [r for r in answer.results if r.status_code == protocol.OK]
    shown = (*step.session.unshown_steps, *(s for r in ok for s in r.verification_steps))
    if answer.context is not None:
        _absorb(step, answer.context)
    step.update(
        values={**values, "results": results},
        unshown_steps=tuple(dict.fromkeys(shown)),
        stale=step.session.stale or any(r.stale for r in answer.results),
        degraded=step.session.degraded or any(r.fallback and not r.stale for r in answer.results),
    )
    _agent_ask(step, spec, state, agents.result_messages(record, answer.results))


def _agent_refused(step: Step, spec: FlowSpec, report: ErrorReport) -> None:
    """The dispatcher refused a call the model chose (the user's role, rate or quota):
    nothing of the round ran; the model is told why, in the dispatcher's sentence, and
    asked again (its rounds still bound it)."""
    state = _state(step, spec)
    record = step.session.values.get(agents.AGENT_KEY)
    if state.agent is None or not isinstance(record, dict):
        return
    tool = step.env.payload.context.get("tool")
    step.problem(report.component, report.code, report.message)
    told = agents.refused_messages(record, tool if isinstance(tool, str) else "", report.message)
    step.update(values={**step.session.values, agents.AGENT_KEY: told})
    _agent_ask(step, spec, state, told)


def _agent_done(
    step: Step, spec: FlowSpec, state: State, record: dict[str, Any], text: str
) -> None:
    """The model answered in text: the state's answer (said, when it replies), its
    ``done`` move."""
    agent = state.agent
    if agent is None:
        return
    values = step.session.values
    results = {**values.get("results", {}), agent.into: text}
    done = {k: v for k, v in record.items() if k not in ("messages", "calls")}
    step.update(values={**values, "results": results, agents.AGENT_KEY: done})
    if agent.reply and text:  # the model's words as text: never a template, never run
        step.reply(text, steps=step.session.unshown_steps)
        step.update(unshown_steps=())
    _done(step, spec, state)


def on_flow_answer(step: Step, spec: FlowSpec, answer: ToolResults | ModelAnswer) -> None:
    """The dispatcher's answer to the pending cycle or model round."""
    pending = step.session.pending
    if isinstance(answer, ModelAnswer):
        on_flow_model(step, spec, answer)
    elif pending is not None and pending.task.startswith(_AGENT_TOOLS % _state(step, spec).id):
        attach(step, spec)
        step.update(pending=None)
        _agent_results(step, spec, answer)
    else:
        on_flow_results(step, spec, answer)


def _declared(step: Step, spec: FlowSpec, action: FailAction) -> None:
    """A failure the flow declares: the state's way out, as for a tool's."""
    values, fail = _values(step), action.fail
    text = render(fail.text, values) if fail.text is not None else None
    code = render(fail.code, values)
    _fail(step, spec, render(fail.component, values), code, render(fail.message, values), text=text)


def _instant(step: Step, spec: FlowSpec, action: Instant) -> None:
    """An action done at once: a reply, a memory write, a hook's value, context values,
    pinned facts, a wait (re)started or stopped, values later cycles carry. HookError: it
    cannot be done (a hook failed, a value is not what the action takes)."""
    values = _values(step)
    if isinstance(action, ReplyAction):
        _reply(step, action.reply, values)
    elif isinstance(action, RememberAction):
        _remember(step, action)
    elif isinstance(action, HookAction):
        name = action.hook.into or action.hook.name
        value = _hook(step, spec, action.hook.name)
        hooks = {**step.session.values.get("hooks", {}), name: value}
        step.update(values={**step.session.values, "hooks": hooks})
    elif isinstance(action, SetAction):
        context = {**step.session.values.get("context", {}), **_mapping(action.set, values)}
        step.update(values={**step.session.values, "context": context})
    elif isinstance(action, PinAction):
        pinned = _mapping(action.pin, values)
        texts_ = {k: str(v) for k, v in pinned.items() if v is not None and v != ""}
        if len({**step.session.facts, **texts_}) > MAX_FACTS or any(
            len(v) > MAX_FACT_CHARS for v in texts_.values()
        ):
            why = f"at most {MAX_FACTS} facts of {MAX_FACT_CHARS} characters"
            raise HookError(f"pin {sorted(pinned)}: {why} (every history fold keeps them)")
        step.fact(**pinned)
    elif isinstance(action, CarryAction):
        carried = _mapping(action.carry, values)
        if not all(isinstance(v, bool | int | float | str) for v in carried.values()):
            raise HookError(f"carry {sorted(carried)}: only texts, numbers and booleans")
        step.update(context={**step.session.context, **carried})
    elif isinstance(action, ArmAction):
        wait = _wait(step, spec, action.arm)
        step.arm(wait.id, timedelta(milliseconds=duration_ms(wait.after)))
    elif isinstance(action, DisarmAction):
        step.disarm(_wait(step, spec, action.disarm).id)


def _reply(step: Step, reply: SpecReply, values: Mapping[str, Any]) -> None:
    """A spec's reply: it becomes the question asked again when a turn is not understood,
    and carries verification steps (its ``steps``' cycles', else those not carried yet)."""
    text = render(reply.text, values)
    step.update(asked={"text": text, "buttons": list(reply.buttons)})
    if reply.steps is None:
        steps = step.session.unshown_steps
    else:
        steps = tuple(s for task in reply.steps for s in step.session.steps.get(task, ()))
    step.reply(text, choices=reply.buttons, steps=steps)
    step.update(unshown_steps=())


def _mapping(value: Any, values: Mapping[str, Any]) -> dict[str, Any]:
    """``set``/``pin``/``carry`` values: an object of templates, or one placeholder whose
    value is an object (null: nothing)."""
    found = resolve(value, values)
    if found is None:
        return {}
    if not isinstance(found, dict) or not all(NAME.fullmatch(str(k)) for k in found):
        raise HookError(f"{value!r} gave {found!r}: not an object of named values")
    return found


def _wait(step: Step, spec: FlowSpec, name: str) -> Wait:
    if step.session.state is None:
        raise HookError(f"{name!r}: no state entered yet, so no wait of it")
    state = _state(step, spec)
    wait = next((w for w in state.waits if w.id == name), None)
    if wait is None:
        raise HookError(f"{name!r} is not a wait of state {state.id!r}")
    return wait


def _does(step: Step, spec: FlowSpec, actions: Sequence[Action], *, stays: bool = False) -> bool:
    """A move's own actions (``do:``), done at once; False: a hook failed, and the exit of
    the state the move entered is taken. A move that stays keeps the question it asks
    again."""
    asked = step.session.asked
    try:
        for action in actions:
            if action.when is not None and not _hook(step, spec, action.when):
                continue
            if isinstance(action, _INSTANT):  # the lint refuses anything else in such a do:
                _instant(step, spec, action)
        if stays:
            step.update(asked=asked)
    except HookError as exc:
        _fail(step, spec, "conversation:hook", "hook", str(exc))
        return False
    return True


def _done(step: Step, spec: FlowSpec, state: State) -> None:
    """The state's actions are done: end, or arm its waits and take an automatic move."""
    if state.kind == "terminal":  # the session ended as it entered it (see _arrive)
        return
    for wait in state.waits:
        if wait.auto:
            step.arm(wait.id, timedelta(milliseconds=duration_ms(wait.after)))
    queued = step.session.queued
    step.update(queued="")
    first = state.id == spec.start and step.session.pending is None
    if queued and first and _take(step, spec, queued):
        return
    if _take(step, spec, "done"):
        return
    said = any(isinstance(e.payload.body, Reply) for e in step.effects.emitted)
    if first and queued and not _take(step, spec, "any") and not said:
        step.reply(NOT_UNDERSTOOD)  # the first turn named no way to begin, and nothing was said


def _arrive(step: Step, spec: FlowSpec, state: State) -> None:
    """The session ends as it enters ``state``: its timers stop and its snapshot goes to
    mid-term memory at once, before anything is said (the flow's record, or what the
    state's snapshot hook writes)."""
    step.disarm_all()
    step.update(outcome=state.id, pending=None)
    step.completed = (spec.flow, spec.version, step.session.path)
    if isinstance(state.snapshot, SnapshotHook):
        try:
            _write_item(step, _hook(step, spec, state.snapshot.hook))
        except HookError as exc:
            step.problem("conversation:hook", "hook", str(exc))
        return
    if not state.snapshot:
        return
    value = {
        "flow": spec.flow,
        "version": spec.version,
        "state": state.id,
        "summary": step.session.flow_summary,
        "context": step.session.values.get("context", {}),
        "entities": step.session.values.get("entities", {}),
    }
    step.remember(
        f"{protocol.FLOW_SNAPSHOT}{spec.flow}:{step.env.session_id}",
        value,
        confirmed_by=_proof(step),
        importance=0.6,
        ttl_s=FLOW_SNAPSHOT_TTL_S,
    )


def _proof(step: Step) -> str:
    """What a write of this input is confirmed by: the timer that fired, else the user's
    latest turn."""
    body = step.env.payload.body
    if isinstance(body, TimerFired):
        return body.timer_id
    return step.session.turn_id or step.env.message_id


def _take(
    step: Step,
    spec: FlowSpec,
    trigger: str,
    *,
    confirmed: bool = False,
    then: tuple[str, tuple[str, ...]] | None = None,
    by_hook: bool = False,
) -> bool:
    """Take the current state's first move on ``trigger`` whose guards pass. A
    confirmation state's own trigger is taken only ``confirmed`` (its button or a whole
    answer: never an intent, a wait or ``any`` of the same name). A flow that would move
    more than :data:`MAX_MOVES` times for one input (``done`` moves in a circle) stops
    where it is, says so and keeps the problem."""
    source = step.session.state
    state = spec.state(source or "")
    if state is not None and state.confirm is not None and trigger == state.confirm.trigger:
        if not confirmed:
            return False
    for move in spec.transitions:
        if move.source != source or move.on != trigger:
            continue
        try:
            if move.when is not None and not _hook(step, spec, move.when):
                continue
            if move.unless is not None and _hook(step, spec, move.unless):
                continue
        except HookError as exc:
            _fail(step, spec, "conversation:hook", "hook", str(exc))
            return True
        if move.to is None:  # it stays: its own actions only, the waits still running
            _stay(step, spec, move, then, by_hook=by_hook)
            return True
        if step.moves >= MAX_MOVES:
            _loop(step, spec)
            return True
        _enter(step, spec, move.to, trigger, move.do, then=then)
        return True
    return False


def _stay(
    step: Step,
    spec: FlowSpec,
    move: Transition,
    then: tuple[str, tuple[str, ...]] | None,
    *,
    by_hook: bool = False,
) -> None:
    """A move that stays: its actions, which may call tools (its own actions then wait
    for the cycle's answer and go on from there, and the state waits as it did). One that
    calls is taken only on a turn or a wait, and only with no cycle pending; HookError when
    a hook's decision names it (the actions it would interrupt could not go on)."""
    step.stays += 1
    if step.moves + step.stays > MAX_MOVES:
        _loop(step, spec)
        return
    if any(not isinstance(action, _INSTANT) for action in move.do):
        if by_hook:
            raise HookError(f"{move.on!r} stays and calls: no hook's decision may take it")
        if step.session.pending is not None:
            why = f"{move.on!r} stays and calls, and a cycle is pending: not taken"
            step.problem("conversation:flow", "busy", why)
            return
        index = spec.transitions.index(move)
        step.update(acting=index, next_action=0)
        if then is not None:
            _say(step, *then)
        _run(step, spec)
    elif _does(step, spec, move.do, stays=True) and then is not None:
        _say(step, *then)


def _loop(step: Step, spec: FlowSpec) -> None:
    message = f"flow {spec.flow} v{spec.version} moved {step.moves} times for one input"
    step.problem("conversation:flow", "loop", message)
    step.reply(texts.error_text("conversation:flow", "loop", "请联系管理员"))


def _hook(step: Step, spec: FlowSpec, name: str, values: dict[str, Any] | None = None) -> Any:
    hooks: Hooks = step.inp.ports.get(HOOKS_PORT) or _BUILTIN
    target = spec.hooks.get(name)
    if target is None:  # the lint refuses it: a registry holds no such flow
        raise HookError(f"hook {name!r} is not declared by flow {spec.flow}")
    return hooks.call(target, values if values is not None else _values(step))


def _decide(step: Step, spec: FlowSpec, decide: Decide) -> bool:
    """Take the move the hook chose (one of the action's moves); False: it chose none
    (null) or a move that stays, and the actions go on. HookError: it chose something else,
    or no move on its choice passes its guards."""
    answer = _chosen(step, spec, decide)
    if answer is None:
        return False
    before = (step.moves, step.session.failures)
    if not _take(step, spec, answer, by_hook=True):
        source = step.session.state
        raise HookError(
            f"hook {decide.hook!r} decided {answer!r}, and no move of {source!r} on it passes "
            "its guards"
        )
    return (step.moves, step.session.failures) != before  # it stayed: the actions go on


def _chosen(step: Step, spec: FlowSpec, decide: Decide) -> str | None:
    """The move ``decide``'s hook chose: one of its moves, or None. HookError: anything
    else."""
    answer = _hook(step, spec, decide.hook)
    if answer is None:
        return None
    if not isinstance(answer, str) or answer not in decide.moves:
        moves = ", ".join(decide.moves)
        raise HookError(f"hook {decide.hook!r} decided {answer!r}: not one of its moves ({moves})")
    return answer


def _calls_of(action: Action | None) -> Sequence[Call]:
    if isinstance(action, CallAction):
        return (action.call,)
    if isinstance(action, ParallelAction):
        return tuple(action.parallel.calls)
    return ()


def _cycle(step: Step, spec: FlowSpec, state: State, action: Action, index: int) -> None:
    """One cycle through the dispatcher: the calls' resolved arguments, the symbols memory
    checks first (those the arguments read are held: a doubted one stops the cycle), the
    preferences it asks memory for, and the values the calls' envelopes carry."""
    calls = _calls_of(action)
    values = _values(step)
    group = action.parallel if isinstance(action, ParallelAction) else None
    parts: list[Call | Parallel] = [*calls, group] if group is not None else [*calls]
    carried: dict[str, ContextValue] = {}
    for part in parts:
        if part.context is not None:
            carried.update(_carried(part.context, values))
    held = _held(calls)
    declared = [name for part in parts for name in part.symbols]
    symbols = list(dict.fromkeys([*declared, *sorted(held)]))
    asked = list(dict.fromkeys(name for part in parts for name in part.preferences))
    if symbols:
        carried["symbols"] = symbols
    if held:
        carried[protocol.SYMBOLS_HELD] = True
    if asked:
        carried["preferences"] = asked
    named = group.task if group is not None else calls[0].task
    acting = step.session.acting  # a stay's own actions are named by its trigger
    where = f"{state.id}~{spec.transitions[acting].on}" if acting >= 0 else state.id
    step.cycle(
        named or f"{where}#{index}",
        [(call.tool, _arguments(call, values)) for call in calls],
        budget_ms=(group.budget_ms if group is not None else None) or spec.budget_of(state.id),
        **carried,
    )


def _arguments(call: Call, values: Mapping[str, Any]) -> dict[str, Any]:
    found = resolve(call.args, values)
    if not isinstance(found, dict):
        raise HookError(f"the arguments of {call.tool} are {found!r}: not an object")
    return found


def _carried(context: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, ContextValue]:
    """A call's ``context:`` resolved: JSON scalars and lists of texts only (an envelope's
    context holds nothing else); HookError otherwise."""
    found = _mapping(context, values)
    for key, value in found.items():
        scalar = value is None or isinstance(value, bool | int | float | str)
        texts_only = isinstance(value, list) and all(isinstance(v, str) for v in value)
        if not (scalar or texts_only):
            raise HookError(f"context {key!r} is {value!r}: not a text, number or list of texts")
    return found


def _held(calls: Sequence[Call]) -> set[str]:
    """The short-term symbols the calls' arguments read: memory checks them first, and a
    doubted one stops the cycle (its answer would rest on it)."""
    return {
        path.split(".")[1]
        for call in calls
        for path in placeholders_in(call.args)
        if path.startswith("symbols.")
    }


def _remember(step: Step, action: RememberAction) -> None:
    values, what = _values(step), action.remember
    if isinstance(what, RememberSymbol):
        entity = render(what.symbol.value, values)
        write = MemoryWrite(
            tier=MemoryTier.SHORT_TERM,
            key=what.symbol.name,
            value_json=canonical_json({"entity": entity, "validator": what.symbol.validator}),
            ttl_s=what.symbol.ttl_s,
        )
        step.to_dispatcher(write, task="memory_write")
        symbols = {**step.session.values.get("symbols", {}), what.symbol.name: entity}
        step.update(values={**step.session.values, "symbols": symbols})
    elif isinstance(what, RememberPreference):
        _prefer(step, what.preference, resolve(what.preference.value, values))
    elif isinstance(what, RememberItem):
        item = what.item
        _write_item(step, resolve(item if isinstance(item, str) else item.model_dump(), values))
    elif isinstance(what, RememberDeclined):
        name, session = what.declined, step.session
        candidates = {k: v for k, v in session.candidates.items() if k != name}
        step.update(declined=(*session.declined, name), candidates=candidates)


def _prefer(step: Step, preference: PreferenceWrite, value: Any) -> None:
    """A choice memory counts; confirmed, the user's preference (proven by their answer):
    memory keeps it, and the session knows it at once, no longer a candidate."""
    name, session = preference.name, step.session
    if not preference.confirmed:
        step.remember(f"choice:{name}", value)
        return
    if not step.answered:  # a wait, a hook, a phrase or a model never says yes for the user
        raise HookError(
            f"preference {name!r} is kept only on the user's own yes (a whole short answer "
            "or a button): this move was not taken on one"
        )
    step.remember(f"pref:{name}", value, confirmed_by=step.env.message_id)
    shown = value if isinstance(value, str) else canonical_json(value)  # as memory shows it
    candidates = {k: v for k, v in session.candidates.items() if k != name}
    step.update(preferences={**session.preferences, name: shown}, candidates=candidates)


_MAX_TTL_S: Final = 366 * 24 * 3600
_RESERVED_KEYS: Final = ("pref:", "choice:", protocol.FLOW_SNAPSHOT, "unfinished:")


def _write_item(step: Step, item: Any) -> None:
    """A mid-term item (None: nothing). Its key is never a preference's, a choice's nor a
    flow snapshot's: those have their own proofs (HookError)."""
    if item is None:
        return
    if not isinstance(item, dict) or not isinstance(item.get("key"), str) or "value" not in item:
        raise HookError(f"{item!r} is not an item (key, value, importance, ttl_s)")
    key = item["key"]
    builtin = key == f"unfinished:{step.env.session_id}" and step.session.flow is None
    if not key or (key.startswith(_RESERVED_KEYS) and not builtin):
        raise HookError(f"item key {key!r}: a preference's, choice's or snapshot's")
    importance, ttl_s = item.get("importance", 0.5), item.get("ttl_s", FLOW_SNAPSHOT_TTL_S)
    if not isinstance(importance, int | float) or isinstance(importance, bool):
        raise HookError(f"item {key!r}: importance {importance!r} is not a number")
    if not isinstance(ttl_s, int) or isinstance(ttl_s, bool) or not 0 < ttl_s <= _MAX_TTL_S:
        raise HookError(f"item {key!r}: ttl_s {ttl_s!r} is not 1..{_MAX_TTL_S} seconds")
    if not 0 <= importance <= 1:
        raise HookError(f"item {key!r}: importance {importance!r} is not 0..1")
    try:
        step.remember(
            key, item["value"], confirmed_by=_proof(step), importance=importance, ttl_s=ttl_s
        )
    except (ValueError, TypeError) as exc:  # a value no memory write can hold
        raise HookError(f"item {key!r} cannot be written: {exc}") from exc


def _verify_fact(step: Step, spec: FlowSpec, what: RememberFact) -> None:
    """A graph fact goes to its verifying tool; what the tool verifies (the ``facts`` of
    its result) the dispatcher writes to long-term memory."""
    values, fact = _values(step), what.fact
    edge = {
        "subject": render(fact.subject, values),
        "relation": fact.relation,
        "object": render(fact.object, values),
    }
    index = step.session.next_action - 1
    state = _state(step, spec)
    step.cycle(
        f"{state.id}#{index}",
        [(fact.verified_by, {"facts": [edge]})],
        budget_ms=spec.budget_of(state.id),
    )


def _content(result: ToolResult) -> Any:
    """A result's JSON (its text when it is none, or holds NaN or an infinity, which no
    later call's arguments may carry)."""
    try:
        return json.loads(result.result_json, parse_constant=_no_constant)
    except ValueError:
        return result.result_json


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_LATER: Final = "请稍后重试或联系管理员"
_CALLER_ERRORS: Final = range(400, 500)
"""HTTP's client-error class: the request was wrong, another try fails the same way..."""
_TRANSIENT: Final = frozenset({408, 425, 429})
"""... except a timeout, too early and too many requests: later, the same request may pass."""


def _fail_result(step: Step, spec: FlowSpec, failed: ToolResult) -> None:
    """A tool answered with an error. A 4xx is the caller's mistake: the user is told what
    the tool said was wrong; anything else may pass later: retry later."""
    component, code = protocol.tool_at(failed.tool), failed.status_code
    if code in _CALLER_ERRORS and code not in _TRANSIENT:
        text = texts.rejected_text(failed.tool, code, failed.error)
    else:
        text = texts.error_text(component, str(code), _LATER)
    _fail(step, spec, component, str(code), failed.error or "", text=text)


def _fail(
    step: Step,
    spec: FlowSpec,
    component: str,
    code: str,
    message: str,
    *,
    advice: str = "",
    text: str | None = None,
) -> None:
    """Take the state's way out of a failure and tell the user what failed (``text``, by
    default the component, the code and ``advice``): a cycle that ran out of time takes the
    state's ``on_timeout`` move; else the exception exit, whose ``failure:`` actions (when
    the state has them) say it in their own words. A terminal state ends as it would have;
    past MAX_FAILURES in a row, or MAX_MOVES, the session stays put."""
    step.problem(component, code, message)
    failures = step.session.failures + 1
    step.update(pending=None, degraded=True, failures=failures, unshown_steps=(), acting=-1)
    step.disarm_all()
    told = text or texts.error_text(component, code, advice or _LATER)
    step.failure = {"component": component, "code": code, "message": message, "text": told}
    state = _state(step, spec)
    timed_out = code in ("timeout", str(protocol.TIMEOUT))
    if state.kind == "terminal":
        step.reply(told)
    elif failures > MAX_FAILURES or step.moves >= MAX_MOVES:
        why = (
            f"{failures} failures in a row in flow {spec.flow} v{spec.version}: stays in {state.id}"
        )
        step.problem("conversation:flow", "failing", why)
        step.reply(told)
    elif timed_out and state.on_timeout is not None and _take(step, spec, state.on_timeout):
        pass
    elif state.exit is not None and state.failure:
        _enter(step, spec, state.exit, FAILURE, state.failure)
    elif state.exit is not None:
        _enter(step, spec, state.exit, FAILURE, then=(told, ()))
    else:
        step.reply(told)
    step.failure = {}

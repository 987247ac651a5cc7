"""What a schema cannot check about a flow: its machine holds together.

Errors refuse a flow (``flows check`` exits 1, ``flows register`` refuses it); warnings are
shown. Each finding names the line of what it is about.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from hermesbus.processors.flow._hooks import BUILTIN_HOOKS
from hermesbus.processors.flow._load import Lines, Problem, field_name
from hermesbus.processors.flow._render import render
from hermesbus.processors.flow._spec import (
    INSTANT_ACTIONS,
    SUMMARY_MAX,
    ArmAction,
    Call,
    CallAction,
    DecideAction,
    DisarmAction,
    FlowSpec,
    HookAction,
    ParallelAction,
    RememberFact,
    ReplyAction,
    SnapshotHook,
    State,
)
from hermesbus.processors.tool import module_allowed, private_part

__all__ = ["BUILTIN_TRIGGERS", "FAILURE", "Finding", "lint", "literal_text", "tools_of"]

BUILTIN_TRIGGERS: Final = frozenset({"done", "any", "invalid"})
"""``done``: the state's calls were all answered; ``any``: a user turn no other move of the
state takes; ``invalid``: a symbol a call of the state read no longer holds (memory's
validator refused it), so the flow asks instead of guessing."""
FAILURE: Final = "failed"
"""The trigger of a failure: it leads to the state's exception exit (``exit``), never
through a transition of its own."""


@dataclass(frozen=True, slots=True)
class Finding:
    severity: Literal["error", "warning"]
    problem: Problem

    def shown(self, where: str) -> str:
        return f"{self.severity}: {self.problem.shown(where)}"


def lint(
    spec: FlowSpec,
    lines: Lines,
    *,
    modules: tuple[str, ...],
    registered: Collection[str] | None,
) -> list[Finding]:
    """Every finding about ``spec``, in file order: ``modules`` are the module prefixes hooks
    may come from (``HERMES_TOOL_MODULES``); ``registered`` the registered tools (None:
    not known, so not checked)."""
    check = _Check(spec, lines)
    check.states()
    check.transitions()
    check.reachable()
    check.hooks(modules)
    check.tools(registered)
    return sorted(check.found, key=lambda f: (f.problem.line, f.problem.field))


def tools_of(spec: FlowSpec) -> list[tuple[tuple[str | int, ...], str]]:
    """Every tool the flow names, with where: calls and fact verifiers."""
    found: list[tuple[tuple[str | int, ...], str]] = []
    for s, state in enumerate(spec.states):
        for a, action in enumerate(state.on_enter):
            at: tuple[str | int, ...] = ("states", s, "on_enter", a)
            found += [(where, call.tool) for where, call in _calls(at, action)]
            remember = getattr(action, "remember", None)
            fact = getattr(remember, "fact", None)
            if fact is not None:
                found.append(((*at, "remember", "fact", "verified_by"), fact.verified_by))
        if state.agent is not None:
            found += [
                (("states", s, "agent", "tools", t), n) for t, n in enumerate(state.agent.tools)
            ]
    return found


def _calls(
    at: tuple[str | int, ...], action: object
) -> Iterator[tuple[tuple[str | int, ...], Call]]:
    if isinstance(action, CallAction):
        yield (*at, "call", "tool"), action.call
    elif isinstance(action, ParallelAction):
        for c, call in enumerate(action.parallel.calls):
            yield (*at, "parallel", "calls", c, "tool"), call


def literal_text(template: str) -> str:
    """A template without its placeholders: what it says whatever the values."""
    return render(template, {})


class _Check:
    def __init__(self, spec: FlowSpec, lines: Lines) -> None:
        self.spec = spec
        self.lines = lines
        self.found: list[Finding] = []
        self.ids = [s.id for s in spec.states]
        self.intents = {i.name for i in spec.intents}
        self.answering = {i.name for i in spec.intents if i.answers}

    def say(
        self,
        path: tuple[str | int, ...],
        message: str,
        severity: Literal["error", "warning"] = "error",
    ) -> None:
        self.found.append(
            Finding(severity, Problem(self.lines.of(path), field_name(path), message))
        )

    def states(self) -> None:
        spec, seen = self.spec, set[str]()
        if spec.state(spec.start) is None:
            self.say(("start",), f"no state {spec.start!r} (states: {', '.join(self.ids)})")
        waits: dict[str, str] = {}
        for s, state in enumerate(spec.states):
            at: tuple[str | int, ...] = ("states", s)
            if state.id in seen:
                self.say((*at, "id"), f"state {state.id!r} is declared twice")
            seen.add(state.id)
            for w, wait in enumerate(state.waits):
                if wait.trigger in _RESERVED:
                    self.say((*at, "waits", w, "trigger"), _reserved(wait.trigger))
                if wait.id in waits:
                    self.say(
                        (*at, "waits", w, "id"), f"wait {wait.id!r} is also in {waits[wait.id]}"
                    )
                waits[wait.id] = state.id
                if not wait.text and not self._says(state.id, wait.trigger):
                    self.say(
                        (*at, "waits", w), f"wait {wait.id!r} has no text: the user is told nothing"
                    )
            self._state(at, state)
        if not any(s.kind == "terminal" for s in spec.states):
            self.say(("states",), "no terminal state: no session can end")
        self._intents()
        self._exits()
        self._confirms()
        for b, action in enumerate(spec.begin):
            if isinstance(action, ArmAction | DisarmAction):
                self.say(("begin", b), "no state is entered yet: no wait to arm or disarm")

    def _says(self, state: str, trigger: str) -> bool:
        """Every move of ``state`` on ``trigger`` replies (so its wait may say nothing)."""
        moves = [m for m in self.spec.transitions if m.source == state and m.on == trigger]
        return bool(moves) and all(any(isinstance(a, ReplyAction) for a in m.do) for m in moves)

    def _exits(self) -> None:
        """Exception exits must not lead back through exits alone: a failure there would
        fail again for ever."""
        by_id = {s.id: s for s in self.spec.states}
        for s, state in enumerate(self.spec.states):
            if state.kind == "terminal":
                continue  # it has no exit (said above if it does)
            seen, at = [state.id], by_id.get(state.exit or "")
            while at is not None and at.kind != "terminal" and at.id not in seen:
                seen.append(at.id)
                at = by_id.get(at.exit or "")
            if at is not None and at.id == state.id:
                circle = " -> ".join([*seen, state.id])
                self.say(("states", s, "exit"), f"exits go round in a circle ({circle})")

    def _confirms(self) -> None:
        """Only a confirmation's button or whole answer fires its trigger: no intent, and
        no wait of that state, may have its name."""
        for s, state in enumerate(self.spec.states):
            if state.confirm is None:
                continue
            trigger = state.confirm.trigger
            for n, intent in enumerate(self.spec.intents):
                if intent.name == trigger:
                    why = f"intent {trigger!r} is the confirmation trigger of {state.id!r}"
                    self.say(("intents", n, "name"), f"{why}: a phrase would confirm")
            for w, wait in enumerate(state.waits):
                if wait.trigger == trigger:
                    why = f"{trigger!r} is the confirmation trigger of {state.id!r}"
                    self.say(("states", s, "waits", w, "trigger"), f"{why}: time would confirm")

    def _intents(self) -> None:
        spec = self.spec
        names = [i.name for i in spec.intents]
        for n, name in enumerate(names):
            if name in names[:n]:
                self.say(("intents", n, "name"), f"intent {name!r} is declared twice")
            if name in _RESERVED:
                self.say(("intents", n, "name"), _reserved(name))
        for n, intent in enumerate(spec.intents):
            entities = [e.name for e in intent.entities]
            for e, entity in enumerate(entities):
                if entity in entities[:e]:
                    where = ("intents", n, "entities", e, "name")
                    self.say(where, f"entity {entity!r} is declared twice")

    def _state(self, at: tuple[str | int, ...], state: State) -> None:
        if state.kind == "terminal":
            if state.exit is not None:
                self.say(
                    (*at, "exit"), "a terminal state has no exception exit: nothing fails there"
                )
            if state.waits:
                self.say((*at, "waits"), "a terminal state keeps no wait")
            if any(not isinstance(a, HookAction) and _has_calls(a) for a in state.on_enter):
                self.say((*at, "on_enter"), "a terminal state calls no tool")
            for a, _ in _decides(state):
                self.say((*at, "on_enter", a, "decide"), "nothing leaves a terminal state")
        elif state.exit is None:
            self.say(at, f"state {state.id!r} has no exception exit (exit:)")
        elif state.exit not in self.ids:
            self.say((*at, "exit"), f"exit {state.exit!r} is not a state")
        if state.confirm is not None and state.confirm.trigger in _RESERVED:
            self.say((*at, "confirm", "trigger"), _reserved(state.confirm.trigger))
        self._agent(at, state)
        if state.kind == "confirmation" and state.confirm is None:
            self.say(at, "a confirmation state says what passes it (confirm:)")
        if state.kind != "confirmation" and state.confirm is not None:
            self.say((*at, "confirm"), "confirm: is for states of kind confirmation")
        if state.summary is not None and len(literal_text(state.summary)) > SUMMARY_MAX:
            self.say((*at, "summary"), f"its fixed text is over {SUMMARY_MAX} characters")
        self._groups(at, state)

    def _agent(self, at: tuple[str | int, ...], state: State) -> None:
        """An agent state says its model (and only it does), lists each tool once and
        moves on the model's answer (``done``)."""
        if state.kind == "agent" and state.agent is None:
            self.say(at, "an agent state says which model chooses its tools (agent:)")
        if state.agent is None:
            return
        if state.kind != "agent":
            self.say((*at, "agent"), "agent: is for states of kind agent")
        if len(set(state.agent.tools)) != len(state.agent.tools):
            self.say((*at, "agent", "tools"), "each tool is listed once")
        if not any(t.source == state.id and t.on == "done" for t in self.spec.transitions):
            self.say(at, "an agent state moves on its answer: it needs a move on done")

    def _groups(self, at: tuple[str | int, ...], state: State) -> None:
        """A parallel group calls each tool once (one dispatch per tool a cycle), within the
        state's budget; no on-enter action keeps a preference as confirmed."""
        budget = state.timeout_ms or self.spec.timeout_ms
        for a, action in enumerate(state.on_enter):
            if _confirmed(action):  # entering a state is no answer of the user's
                self.say((*at, "on_enter", a, "remember", "preference", "confirmed"), _ON_YES)
            if not isinstance(action, ParallelAction):
                continue
            for c, call in enumerate(action.parallel.calls):
                if call.task is not None:
                    where = (*at, "on_enter", a, "parallel", "calls", c, "task")
                    self.say(where, "a group is one cycle: name it on parallel: (task:)")
            tools = [call.tool for call in action.parallel.calls]
            for c, tool in enumerate(tools):
                if tool in tools[:c]:
                    where = (*at, "on_enter", a, "parallel", "calls", c, "tool")
                    self.say(where, f"{tool!r} twice in one group: one call per tool a cycle")
            if action.parallel.budget_ms > budget:
                self.say(
                    (*at, "on_enter", a, "parallel", "budget_ms"),
                    f"over the state's timeout_ms ({budget}): the dispatcher ends the cycle first",
                    "warning",
                )

    def transitions(self) -> None:
        seen: dict[tuple[str, str, str | None, str | None], int] = {}
        for t, move in enumerate(self.spec.transitions):
            at: tuple[str | int, ...] = ("transitions", t)
            source = self.spec.state(move.source)
            if source is None:
                self.say((*at, "from"), f"from {move.source!r}: not a state")
            elif source.kind == "terminal":
                self.say((*at, "from"), f"{move.source!r} is terminal: nothing leaves it")
            if move.to is not None and move.to not in self.ids:
                self.say((*at, "to"), f"to {move.to!r}: not a state")
            if move.on == FAILURE:
                self.say((*at, "on"), f"{FAILURE!r} leads to the state's exit: set exit: instead")
            elif source is not None and move.on not in self._triggers(source):
                known = ", ".join(sorted(self._triggers(source)))
                self.say(
                    (*at, "on"), f"{move.on!r} never fires in {move.source!r} (there: {known})"
                )
            answered = move.on in self.answering or (
                source is not None
                and (
                    (source.confirm is not None and move.on == source.confirm.trigger)
                    or (source.on_turn is not None and move.on in source.on_turn.moves)
                )
            )
            for d, action in enumerate(move.do):
                if move.to is not None and not isinstance(action, _INSTANT):
                    self.say(
                        (*at, "do", d),
                        "a move that enters a state does only what is done at once (its "
                        "state's actions may call and decide)",
                    )
                if _confirmed(action) and not answered:
                    where = (*at, "do", d, "remember", "preference", "confirmed")
                    self.say(where, _ON_YES)
                remember = getattr(action, "remember", None)
                if isinstance(remember, RememberFact):
                    self.say(
                        (*at, "do", d, "remember", "fact"),
                        "a fact waits for its verifying tool: remember it on entering a state",
                    )
            key = (move.source, move.on, move.when, move.unless)
            if key in seen:
                self.say(at, f"the same move as transitions[{seen[key]}]: which one is taken?")
            seen.setdefault(key, t)

    def _triggers(self, state: State) -> set[str]:
        triggers = set(BUILTIN_TRIGGERS) | self.intents | {w.trigger for w in state.waits}
        if state.confirm is not None:
            triggers.add(state.confirm.trigger)
        turned = set(state.on_turn.moves) if state.on_turn is not None else set()
        staying = [  # a move that stays may call and decide too
            action
            for move in self.spec.transitions
            if move.source == state.id and move.to is None
            for action in move.do
        ]
        decided = [a for a in (*state.on_enter, *staying) if isinstance(a, DecideAction)]
        return triggers | turned | {m for d in decided for m in d.decide.moves}

    def _moves(self) -> dict[str, set[str]]:
        """Where each state leads: its transitions' targets, and its exception exit (a
        terminal state leads nowhere)."""
        moves: dict[str, set[str]] = {s.id: set() for s in self.spec.states}
        for move in self.spec.transitions:
            if move.to is not None:  # a move that stays leads nowhere else
                moves.setdefault(move.source, set()).add(move.to)
        for state in self.spec.states:
            if state.kind == "terminal":
                moves[state.id] = set()
            elif state.exit:
                moves[state.id].add(state.exit)
        return moves

    def reachable(self) -> None:
        spec, moves = self.spec, self._moves()
        reached = _closure({spec.start}, moves)
        backwards: dict[str, set[str]] = {}
        for source, targets in moves.items():
            for target in targets:
                backwards.setdefault(target, set()).add(source)
        ends = _closure({s.id for s in spec.states if s.kind == "terminal"}, backwards)
        for s, state in enumerate(spec.states):
            at: tuple[str | int, ...] = ("states", s)
            if state.id not in reached:
                self.say(at, f"state {state.id!r} cannot be reached from {spec.start!r}")
            elif state.kind != "terminal" and not any(
                m.source == state.id and m.to is not None for m in spec.transitions
            ):
                self.say(at, f"state {state.id!r} has no way out (no transition from it)")
            elif state.id not in ends:
                never = "a session there never ends"
                self.say(at, f"no terminal state can be reached from {state.id!r}: {never}")
        for s, state in enumerate(spec.states):
            for w, wait in enumerate(state.waits):
                if wait.trigger not in _RESERVED and not self._leaves(state.id, wait.trigger):
                    self.say(
                        ("states", s, "waits", w, "trigger"),
                        f"{wait.trigger!r} has no transition from {state.id!r}",
                    )
            if state.kind != "terminal":
                self._decided(s, state)
            confirm = state.confirm
            if (
                confirm
                and confirm.trigger not in _RESERVED
                and not self._leaves(state.id, confirm.trigger)
            ):
                self.say(
                    ("states", s, "confirm", "trigger"),
                    f"{confirm.trigger!r} has no transition from {state.id!r}",
                )

    def _decided(self, s: int, state: State) -> None:
        """A hook's decision is a move of the state: never the engine's own trigger nor a
        confirmation's (only its button or whole answer passes), always a transition."""
        confirm = state.confirm.trigger if state.confirm is not None else None
        for a, action in _decides(state):
            for m, move in enumerate(action.decide.moves):
                at = ("states", s, "on_enter", a, "decide", "moves", m)
                if move in _RESERVED:
                    self.say(at, _reserved(move))
                elif move == confirm:
                    why = f"{move!r} is the confirmation trigger of {state.id!r}"
                    self.say(at, f"{why}: a hook would confirm")
                elif move in self.intents:
                    why = f"{move!r} is an intent: the user's words would take it too"
                    self.say(at, why, "warning")
                elif move in {w.trigger for w in state.waits}:
                    self.say(at, f"{move!r} is a wait's trigger: time would take it too")
                elif not self._leaves(state.id, move):
                    self.say(at, f"{move!r} has no transition from {state.id!r}")
                elif self._calling_stay(state.id, move):
                    self.say(at, f"{move!r} stays and calls: no hook's decision may take it")
                elif self._loops(state, a, move):
                    self.say(
                        at,
                        f"{move!r} leads back to {state.id!r}, whose actions run and decide "
                        "again with no call in between: a loop unless the hook then says null",
                        "warning",
                    )

    def _calling_stay(self, state: str, trigger: str) -> bool:
        return any(
            m.source == state
            and m.on == trigger
            and m.to is None
            and any(not isinstance(a, _INSTANT) for a in m.do)
            for m in self.spec.transitions
        )

    def _loops(self, state: State, at: int, move: str) -> bool:
        back = any(
            m.source == state.id and m.on == move and m.to == state.id
            for m in self.spec.transitions
        )
        return back and not any(_has_calls(a) for a in state.on_enter[:at])

    def _leaves(self, state: str, trigger: str) -> bool:
        return any(m.source == state and m.on == trigger for m in self.spec.transitions)

    def hooks(self, modules: tuple[str, ...]) -> None:
        declared = self.spec.hooks
        for name, target in declared.items():
            at = ("hooks", name)
            if (private := private_part(target)) is not None:
                self.say(at, f"{target!r} names the private {private!r}")
            elif not module_allowed(target, (*modules, *BUILTIN_HOOKS)):
                allowed = ",".join(modules) or "(none)"
                module = target.partition(":")[0]
                self.say(at, f"module {module!r} is not on HERMES_TOOL_MODULES ({allowed})")
            elif _missing(target):
                self.say(at, f"module {target.partition(':')[0]!r} cannot be found")
        for path, name in self._hooks_used():
            if name not in declared:
                known = ", ".join(sorted(declared)) or "none"
                self.say(path, f"hook {name!r} is not declared under hooks: ({known})")

    def _hooks_used(self) -> Iterator[tuple[tuple[str | int, ...], str]]:
        for key in ("parser", "summary"):
            if (name := getattr(self.spec, key)) is not None:
                yield (key,), name
        yield from _action_hooks(("begin",), self.spec.begin)
        for s, state in enumerate(self.spec.states):
            at: tuple[str | int, ...] = ("states", s)
            if state.on_turn is not None:
                yield (*at, "on_turn", "hook"), state.on_turn.hook
            if isinstance(state.snapshot, SnapshotHook):
                yield (*at, "snapshot", "hook"), state.snapshot.hook
            yield from _action_hooks((*at, "failure"), state.failure)
            yield from _action_hooks((*at, "on_enter"), state.on_enter)
        for t, move in enumerate(self.spec.transitions):
            for key in ("when", "unless"):
                name = getattr(move, key)
                if name is not None:
                    yield ("transitions", t, key), name
            yield from _action_hooks(("transitions", t, "do"), move.do)

    def tools(self, registered: Collection[str] | None) -> None:
        if registered is None:
            return
        for path, tool in tools_of(self.spec):
            if tool not in registered:
                self.say(path, f"tool {tool!r} is not registered (hermesbus tools list)")


_RESERVED: Final = BUILTIN_TRIGGERS | {FAILURE}


def _reserved(trigger: str) -> str:
    return f"{trigger!r} is a trigger of the engine's own: name this one otherwise"


def _closure(start: set[str], moves: dict[str, set[str]]) -> set[str]:
    """``start`` and every state ``moves`` lead to from it."""
    reached, todo = set(start), list(start)
    while todo:
        for target in moves.get(todo.pop(), ()):
            if target not in reached:
                reached.add(target)
                todo.append(target)
    return reached


_ON_YES: Final = (
    "a preference is kept only on the user's own yes: write it in the do: of a move on an "
    "intent with answers: (a whole short answer) or on a confirmation's trigger"
)


def _confirmed(action: object) -> bool:
    preference = getattr(getattr(action, "remember", None), "preference", None)
    return preference is not None and bool(preference.confirmed)


_INSTANT: Final = INSTANT_ACTIONS


def _action_hooks(
    at: tuple[str | int, ...], actions: Sequence[object]
) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """The hooks actions name: their guards (``when``), hooks and decisions."""
    for a, action in enumerate(actions):
        when = getattr(action, "when", None)
        if when is not None:
            yield (*at, a, "when"), when
        if isinstance(action, HookAction):
            yield (*at, a, "hook", "name"), action.hook.name
        elif isinstance(action, DecideAction):
            yield (*at, a, "decide", "hook"), action.decide.hook


def _decides(state: State) -> list[tuple[int, DecideAction]]:
    return [(a, x) for a, x in enumerate(state.on_enter) if isinstance(x, DecideAction)]


def _has_calls(action: object) -> bool:
    return isinstance(action, CallAction | ParallelAction)


def _missing(target: str) -> bool:
    """Whether the module of ``module:function`` cannot be found (found without running it:
    only its parent packages are imported, and only of allowed modules)."""
    try:
        return importlib.util.find_spec(target.partition(":")[0]) is None
    except (ImportError, ValueError):
        return True

"""The expense report's state machine, read from its spec, and the small interpreter that walks it.

The spec (``processors/flow/expense.yaml``) says, per state, how long it may wait and where
a failure leaves to; its transitions say which trigger moves from which state to which. The
built-in expense code decides *which* trigger happened; the machine decides *where* it
goes, so an unknown move is a bug that raises instead of a silent jump.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from hermesbus.errors import TransitionError
from hermesbus.processors.flow import EXPENSE_SPEC, EXPENSE_TERMINAL, FlowSpec, duration_ms

__all__ = [
    "EXPENSE_FLOW",
    "FAILURE",
    "GAVE_UP_WAIT",
    "MACHINE",
    "MATERIALS_WAIT",
    "START",
    "STATE_SPECS",
    "SUMMARY_WAIT",
    "TERMINAL",
    "TRANSITION_TABLE",
    "VALIDATION_WAIT",
    "Machine",
    "StateSpec",
    "Timeout",
    "Transition",
    "machine_of_spec",
]


@dataclass(frozen=True, slots=True)
class Timeout:
    """A durable wait: timer ``purpose`` fires ``after`` entering/re-arming, as ``trigger``."""

    purpose: str
    after: timedelta
    trigger: str
    text: str = ""
    """What the user is told when it fires."""


@dataclass(frozen=True, slots=True)
class StateSpec:
    """One state of the machine: its name, its durable waits, and its exception exit."""

    id: str
    name: str
    timeouts: tuple[Timeout, ...]
    exception_exit: str
    """Where a failure in the state goes (its 异常出口): the target of its
    ``tool_error`` trigger; the handler's failure path reads it from here."""


@dataclass(frozen=True, slots=True)
class Transition:
    source: str | None
    trigger: str
    target: str


FAILURE: Final = "tool_error"
"""The trigger of a failure (fail fast from the dispatcher); it leads to the exception exit."""
NEW_SESSION: Final = "user_turn"
"""The trigger that enters the start state (the first message of a session)."""


class Machine:
    """Looks up states, timeouts and the target of a trigger; refuses what the table lacks."""

    def __init__(self, states: Iterable[StateSpec], transitions: Iterable[Transition]) -> None:
        self._states = {spec.id: spec for spec in states}
        self.transitions = tuple(transitions)  # materialised: ``transitions`` may be a generator
        self._moves: dict[tuple[str | None, str], str] = {}
        for move in self.transitions:
            if move.target not in self._states:
                raise TransitionError(f"transition {move} targets an unknown state")
            self._moves[(move.source, move.trigger)] = move.target
        for spec in self._states.values():
            self._check_exit(spec)
        self._check_timeouts()

    def _check_exit(self, spec: StateSpec) -> None:
        """A state that leaves on failure must have a ``tool_error`` move to its exit."""
        if spec.exception_exit not in self._states:
            raise TransitionError(f"state {spec.id!r} exits to an unknown state")
        target = self._moves.get((spec.id, FAILURE), spec.id)
        if target != spec.exception_exit:
            raise TransitionError(
                f"state {spec.id!r}: {FAILURE} leads to {target!r}, "
                f"its exception exit is {spec.exception_exit!r}"
            )

    def _check_timeouts(self) -> None:
        """A purpose names one wait of one state (its text is looked up by purpose), and
        the wait's trigger is a move of that state."""
        seen: dict[str, str] = {}
        for state, timeout in self.timeouts():
            if timeout.purpose in seen:
                raise TransitionError(
                    f"timeout {timeout.purpose!r} of state {state!r} is already "
                    f"a timeout of state {seen[timeout.purpose]!r}"
                )
            seen[timeout.purpose] = state
            if (state, timeout.trigger) not in self._moves:
                raise TransitionError(
                    f"timeout {timeout.purpose!r} of state {state!r} fires {timeout.trigger!r}, "
                    "which the state has no transition for"
                )

    def spec(self, state: str) -> StateSpec:
        try:
            return self._states[state]
        except KeyError:
            raise TransitionError(f"unknown state {state!r}") from None

    def target(self, state: str | None, trigger: str) -> str:
        """Where ``trigger`` leads from ``state``; raises for a move the table lacks."""
        try:
            return self._moves[(state, trigger)]
        except KeyError:
            raise TransitionError(f"no transition from {state!r} on {trigger!r}") from None

    def exception_exit(self, state: str) -> str:
        """Where a failure in ``state`` goes (the table's exception exit)."""
        return self.spec(state).exception_exit

    def timeout(self, state: str, purpose: str) -> Timeout:
        for timeout in self.spec(state).timeouts:
            if timeout.purpose == purpose:
                return timeout
        raise TransitionError(f"state {state!r} has no timeout {purpose!r}")

    def wait(self, purpose: str) -> Timeout:
        """The wait ``purpose`` names, in whichever state keeps it."""
        for _, timeout in self.timeouts():
            if timeout.purpose == purpose:
                return timeout
        raise TransitionError(f"no state has a wait {purpose!r}")

    def timeouts(self) -> tuple[tuple[str, Timeout], ...]:
        """Every durable wait of the table with the state it belongs to, in table order."""
        return tuple((spec.id, t) for spec in self._states.values() for t in spec.timeouts)

    def applies(self, state: str | None, purpose: str) -> bool:
        """Whether ``purpose`` is a wait of ``state`` (a timer of any other state is stale)."""
        spec = self._states.get(state) if state is not None else None
        return spec is not None and any(t.purpose == purpose for t in spec.timeouts)

    def pairs(self) -> frozenset[tuple[str | None, str]]:
        """The ``(previous_state, state_id)`` pairs the table can produce."""
        return frozenset((move.source, move.target) for move in self.transitions)


def machine_of_spec(spec: FlowSpec) -> tuple[tuple[StateSpec, ...], tuple[Transition, ...]]:
    """The states and moves of ``spec``: a new session enters ``start`` on ``user_turn``; a
    state's exception exit is the target of its ``tool_error`` (a terminal state's is
    itself: a failure there is only recorded)."""
    states = tuple(
        StateSpec(
            state.id,
            state.name,
            tuple(
                Timeout(w.id, timedelta(milliseconds=duration_ms(w.after)), w.trigger, w.text or "")
                for w in state.waits
            ),
            state.exit or state.id,
        )
        for state in spec.states
    )
    moves = [Transition(None, NEW_SESSION, spec.start)]
    moves += [Transition(m.source, m.on, m.to) for m in spec.transitions if m.to is not None]
    moves += [Transition(s.id, FAILURE, s.exit) for s in spec.states if s.exit]
    return states, tuple(moves)


STATE_SPECS, TRANSITION_TABLE = machine_of_spec(EXPENSE_SPEC)
MACHINE: Final = Machine(STATE_SPECS, TRANSITION_TABLE)
EXPENSE_FLOW: Final = EXPENSE_SPEC.flow
"""The id of the expense report, the flow built into the conversation (``UserTurn.flow``
names it; a registered flow of that id takes its place)."""
START: Final = EXPENSE_SPEC.start
"""Where a new expense session begins."""
TERMINAL: Final = EXPENSE_TERMINAL
"""The expense report's terminal state: a turn there starts a new session."""

MATERIALS_WAIT: Final = MACHINE.wait("s2_wait")
"""Materials not uploaded in time: ask whether the user gives up."""
VALIDATION_WAIT: Final = MACHINE.wait("s3_validation")
"""Validation took too long: human review; late answers are stale from then on."""
SUMMARY_WAIT: Final = MACHINE.wait("s4_idle")
"""The summary unanswered: the session expires, progress saved."""
GAVE_UP_WAIT: Final = MACHINE.wait("s4_gave_up")
"""The "continue or give up?" question unanswered: given up, progress saved."""

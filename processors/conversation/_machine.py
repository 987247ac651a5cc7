"""The S1-S5 conversation state machine as data, and the small interpreter that walks it.

The table says, per state, what it does, how long it may wait and where a failure
leaves to; the transitions say which trigger moves from which state
to which. The handler decides *which* trigger happened; the table decides *where* it goes,
so an unknown move is a bug that raises instead of a silent jump.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from hermesbus.errors import TransitionError

__all__ = [
    "EXPENSE_FLOW",
    "FAILURE",
    "MACHINE",
    "S2_WAIT",
    "S3_VALIDATION",
    "S4_GAVE_UP",
    "S4_IDLE",
    "STATE_SPECS",
    "TERMINAL",
    "TRANSITION_TABLE",
    "Machine",
    "StateSpec",
    "Timeout",
    "Transition",
]


@dataclass(frozen=True, slots=True)
class Timeout:
    """A durable wait: timer ``purpose`` fires ``after`` entering/re-arming, as ``trigger``."""

    purpose: str
    after: timedelta
    trigger: str


@dataclass(frozen=True, slots=True)
class StateSpec:
    """One row of the state table: the actions the state takes (names of ``ACTIONS``, a
    test checks each is implemented), its durable waits, and its exception exit."""

    id: str
    name: str
    actions: tuple[str, ...]
    timeouts: tuple[Timeout, ...]
    exception_exit: str
    """Where a failure in the state goes (its 异常出口): the target of its
    ``tool_error`` trigger; the handler's failure path reads it from here."""


@dataclass(frozen=True, slots=True)
class Transition:
    source: str | None
    trigger: str
    target: str


EXPENSE_FLOW: Final = "expense"
"""The id of the expense report, the flow built into the conversation (``UserTurn.flow``
names it; a registered flow of that id takes its place)."""
TERMINAL: Final = "S5"
"""The expense report's terminal state: a turn there starts a new session."""

FAILURE: Final = "tool_error"
"""The trigger of a failure (fail fast from the dispatcher); it leads to the exception exit."""

S2_WAIT: Final = Timeout("s2_wait", timedelta(minutes=5), "wait_expired")
S3_VALIDATION: Final = Timeout("s3_validation", timedelta(seconds=30), "validation_timeout")
S4_IDLE: Final = Timeout("s4_idle", timedelta(minutes=10), "idle_expired")
S4_GAVE_UP: Final = Timeout("s4_gave_up", timedelta(minutes=10), "gave_up")
"""S4's other wait: the "continue or give up?" question unanswered for 10 minutes."""

# entered when (触发条件): S1 the first message of a session; S2 an expense
# intent with materials missing; S3 all materials in; S3.1 validation over 30 s or failed,
# an OCR confidence below 0.8, or an invalid symbol; S4 validated without a fatal error, or
# the S2 wait expired / its OCR failed; S5 submitted, cancelled, gave up, expired, unclear,
# or a fatal failure. The transitions below are the same conditions as data.
STATE_SPECS: Final = (
    StateSpec(
        "S1",
        "初始意图识别",
        ("parse_intent", "pin_facts", "cycle:check_budget"),
        (),
        "S5",  # unclear intent, or the budget check failed
    ),
    StateSpec(
        "S2",
        "材料收集",
        ("ask_materials", "cycle:ocr_precheck", "adjust_materials"),
        (S2_WAIT,),
        "S4",  # waited 5 min or the OCR pre-check failed: ask whether the user gives up
    ),
    StateSpec(
        "S3",
        "数据校验",
        ("cycle:expense_validation", "check_confidence"),
        (S3_VALIDATION,),
        "S3.1",  # over 30 s or a tool failed: human review
    ),
    StateSpec(
        "S3.1",
        "人工复核",
        ("ask_review", "ask_clarification", "record_tolerance", "ask_preference"),
        (),
        "S5",
    ),
    StateSpec(
        "S4",
        "用户确认",
        ("render_summary", "lock_session", "cycle:submit_expense"),
        (S4_IDLE, S4_GAVE_UP),
        "S5",  # the submission failed (after the dispatcher's retries); idle: expired
    ),
    StateSpec(
        "S5",
        "终止/降级处理",
        ("cancel_timers", "clear_working_data", "write:unfinished"),
        (),
        "S5",  # already terminal: a failure is only recorded
    ),
)

TRANSITION_TABLE: Final = (
    Transition(None, "user_turn", "S1"),
    Transition("S1", "expense_intent", "S2"),
    Transition("S1", "unclear_intent", "S5"),
    Transition("S1", "tool_error", "S5"),
    Transition("S2", "upload", "S2"),
    Transition("S2", "materials_missing", "S2"),
    Transition("S2", "tool_error", "S4"),
    Transition("S2", "materials_complete", "S3"),
    Transition("S2", "wait_expired", "S4"),
    Transition("S2", "cancel", "S5"),
    Transition("S3", "low_confidence", "S3.1"),
    Transition("S3", "validation_timeout", "S3.1"),
    Transition("S3", "context_invalid", "S3.1"),
    Transition("S3", "validated", "S4"),
    Transition("S3", "validation_failed", "S5"),
    Transition("S3", "tool_error", "S3.1"),
    Transition("S3.1", "reupload", "S2"),
    Transition("S3.1", "retry", "S3"),
    Transition("S3.1", "review_passed", "S4"),
    Transition("S3.1", "cancel", "S5"),
    Transition("S3.1", "tool_error", "S5"),
    Transition("S4", "modify", "S2"),
    Transition("S4", "continue_upload", "S2"),
    Transition("S4", "submitted", "S5"),
    Transition("S4", "cancel", "S5"),
    Transition("S4", "gave_up", "S5"),
    Transition("S4", "idle_expired", "S5"),
    Transition("S4", "tool_error", "S5"),
)


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

    def actions(self) -> frozenset[str]:
        """Every action name the table declares."""
        return frozenset(a for spec in self._states.values() for a in spec.actions)

    def timeout(self, state: str, purpose: str) -> Timeout:
        for timeout in self.spec(state).timeouts:
            if timeout.purpose == purpose:
                return timeout
        raise TransitionError(f"state {state!r} has no timeout {purpose!r}")

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


MACHINE: Final = Machine(STATE_SPECS, TRANSITION_TABLE)

"""The state machine is data, and the data agrees with the protocol the dispatcher checks."""

from __future__ import annotations

from datetime import timedelta

import pytest

from hermesbus.processors import protocol
from hermesbus.processors.conversation import (
    ACTIONS,
    EXITS,
    FAILURE,
    MACHINE,
    STATE_SPECS,
    TRANSITION_TABLE,
    Machine,
    StateSpec,
    Transition,
    TransitionError,
)
from hermesbus.processors.conversation._results import TASKS


def test_table_transitions_are_allowed_by_the_protocol() -> None:
    assert MACHINE.pairs() <= protocol.TRANSITIONS


def test_every_protocol_state_has_a_row_with_a_valid_exception_exit() -> None:
    assert tuple(spec.id for spec in STATE_SPECS) == protocol.STATES
    for spec in STATE_SPECS:
        assert spec.exception_exit in protocol.STATES
        assert spec.actions and spec.name


def test_the_seed_timeouts() -> None:
    assert MACHINE.timeout("S2", "s2_wait").after == timedelta(minutes=5)
    assert MACHINE.timeout("S3", "s3_validation").after == timedelta(seconds=30)
    assert MACHINE.timeout("S4", "s4_idle").after == timedelta(minutes=10)
    assert MACHINE.target("S2", "wait_expired") == "S4"
    assert MACHINE.target("S3", "validation_timeout") == "S3.1"
    assert MACHINE.target("S4", "idle_expired") == "S5"


def test_the_seed_exits() -> None:
    assert MACHINE.target("S1", "unclear_intent") == "S5"
    assert MACHINE.target("S3.1", "review_passed") == "S4"
    assert MACHINE.target("S4", "modify") == "S2"
    assert MACHINE.target(None, "user_turn") == "S1"


def test_a_move_the_table_lacks_raises() -> None:
    with pytest.raises(TransitionError, match="no transition from 'S5'"):
        MACHINE.target("S5", "upload")
    with pytest.raises(TransitionError, match="has no timeout"):
        MACHINE.timeout("S1", "s2_wait")
    with pytest.raises(TransitionError, match="unknown state"):
        Machine(STATE_SPECS, [Transition("S1", "x", "S9")])


def test_triggers_are_unique_per_state() -> None:
    keys = [(t.source, t.trigger) for t in TRANSITION_TABLE]
    assert len(keys) == len(set(keys))


def test_every_declared_action_is_implemented() -> None:
    declared = MACHINE.actions()
    assert declared <= set(ACTIONS), f"not implemented: {sorted(declared - set(ACTIONS))}"
    assert set(ACTIONS) <= declared, f"not declared: {sorted(set(ACTIONS) - declared)}"
    assert all(callable(ACTIONS[name]) for name in declared)
    cycles = {name.removeprefix("cycle:") for name in declared if name.startswith("cycle:")}
    assert cycles == set(TASKS)  # every cycle a state starts has an answer handler


def test_every_exception_exit_is_the_target_of_the_failure_trigger() -> None:
    for spec in STATE_SPECS:
        if spec.exception_exit != spec.id:
            assert MACHINE.target(spec.id, FAILURE) == spec.exception_exit
        assert MACHINE.exception_exit(spec.id) in EXITS or spec.exception_exit == spec.id


def test_a_table_whose_failure_move_disagrees_with_the_exit_is_refused() -> None:
    specs = (StateSpec("A", "a", ("x",), (), "B"), StateSpec("B", "b", ("y",), (), "B"))
    with pytest.raises(TransitionError, match="exception exit is 'B'"):
        Machine(specs, [Transition("A", FAILURE, "A")])
    with pytest.raises(TransitionError, match="exception exit is 'B'"):
        Machine(specs, [])


def test_transitions_may_be_a_generator() -> None:
    machine = Machine(STATE_SPECS, (move for move in TRANSITION_TABLE))
    assert machine.transitions == TRANSITION_TABLE
    assert machine.target("S1", "expense_intent") == "S2"
    assert machine.pairs() == MACHINE.pairs()

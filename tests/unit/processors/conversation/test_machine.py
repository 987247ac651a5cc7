"""The state machine is data, and the data agrees with the protocol the dispatcher checks."""

from __future__ import annotations

from datetime import timedelta

import pytest

from hermesbus.processors import protocol
from hermesbus.processors.conversation import (
    MACHINE,
    STATE_SPECS,
    TRANSITION_TABLE,
    Machine,
    Transition,
    TransitionError,
)


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

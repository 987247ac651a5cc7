"""The expense report's machine is read from its spec, and the dispatcher checks the same one."""

from __future__ import annotations

from datetime import timedelta
from importlib import resources

import pytest

from hermesbus import Envelope, StateSnapshot
from hermesbus.processors.conversation import (
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
from hermesbus.processors.conversation import _texts as texts
from hermesbus.processors.conversation._machine import (
    GAVE_UP_WAIT,
    MATERIALS_WAIT,
    START,
    SUMMARY_WAIT,
    TERMINAL,
    VALIDATION_WAIT,
)
from hermesbus.processors.flow import (
    EXPENSE_FILE,
    EXPENSE_MACHINE,
    EXPENSE_SPEC,
    PATH_COUNT,
    PATHS_PORT,
    MemoryPaths,
    lint,
    load_flow,
)
from hermesbus.runtime import Outcome

from .demo import OCR, PHOTOS, RULES, TRIP, Driver, replies, submitted, to_s2


def test_the_conversation_walks_the_machine_the_dispatcher_checks() -> None:
    assert MACHINE.pairs() == EXPENSE_MACHINE.pairs
    assert {spec.id for spec in STATE_SPECS} == EXPENSE_MACHINE.states
    assert (START, TERMINAL) == ("S1", "S5")


def test_the_seed_budgets_come_from_the_spec() -> None:
    """S1 5 s, S2's OCR pre-check and S3's validation 30 s; the dispatcher allows ten times."""
    budgets = {state: EXPENSE_SPEC.budget_of(state) for state in ("S1", "S2", "S3", "S3.1", "S4")}
    assert budgets == {"S1": 5_000, "S2": 30_000, "S3": 30_000, "S3.1": 5_000, "S4": 5_000}
    assert EXPENSE_MACHINE.budget_ms("S3") == 300_000
    assert EXPENSE_MACHINE.budget_ms("S1") == 50_000


def test_the_seed_timeouts() -> None:
    assert MACHINE.timeout("S2", "s2_wait").after == timedelta(minutes=5)
    assert MACHINE.timeout("S3", "s3_validation").after == timedelta(seconds=30)
    assert MACHINE.timeout("S4", "s4_idle").after == timedelta(minutes=10)
    assert MACHINE.timeout("S4", "s4_gave_up").after == timedelta(minutes=10)
    assert MACHINE.target("S2", "wait_expired") == "S4"
    assert MACHINE.target("S3", "validation_timeout") == "S3.1"
    assert MACHINE.target("S4", "idle_expired") == "S5"


def test_the_waits_say_the_texts_of_the_walkthrough() -> None:
    """The texts moved into the spec word for word."""
    assert MATERIALS_WAIT.text == "您已超过5分钟未上传材料，是否放弃本次报销？" == texts.GAVE_UP
    assert VALIDATION_WAIT.text == ("数据校验超过30秒未完成，已转人工复核。您可以重试校验或取消。")
    assert SUMMARY_WAIT.text == "会话已超过10分钟无操作，已自动结束。" + texts.SAVED
    assert GAVE_UP_WAIT.text == "超过10分钟未收到回复，已按放弃处理。" + texts.SAVED


def test_the_seed_exits() -> None:
    assert MACHINE.target("S1", "unclear_intent") == "S5"
    assert MACHINE.target("S3.1", "review_passed") == "S4"
    assert MACHINE.target("S4", "modify") == "S2"
    assert MACHINE.target(None, "user_turn") == "S1"
    assert [(s.id, s.exception_exit) for s in STATE_SPECS] == [
        ("S1", "S5"),
        ("S2", "S4"),
        ("S3", "S3.1"),
        ("S3.1", "S5"),
        ("S4", "S5"),
        ("S5", "S5"),
    ]


def test_a_move_the_table_lacks_raises() -> None:
    with pytest.raises(TransitionError, match="no transition from 'S5'"):
        MACHINE.target("S5", "upload")
    with pytest.raises(TransitionError, match="has no timeout"):
        MACHINE.timeout("S1", "s2_wait")
    with pytest.raises(TransitionError, match="no state has a wait"):
        MACHINE.wait("s9_wait")
    with pytest.raises(TransitionError, match="unknown state"):
        Machine(STATE_SPECS, [Transition("S1", "x", "S9")])


def test_triggers_are_unique_per_state() -> None:
    keys = [(t.source, t.trigger) for t in TRANSITION_TABLE]
    assert len(keys) == len(set(keys))


def test_every_exception_exit_is_the_target_of_the_failure_trigger() -> None:
    for spec in STATE_SPECS:
        if spec.exception_exit != spec.id:
            assert MACHINE.target(spec.id, FAILURE) == spec.exception_exit
        assert MACHINE.exception_exit(spec.id) in EXITS or spec.exception_exit == spec.id


def test_a_table_whose_failure_move_disagrees_with_the_exit_is_refused() -> None:
    specs = (StateSpec("A", "a", (), "B"), StateSpec("B", "b", (), "B"))
    with pytest.raises(TransitionError, match="exception exit is 'B'"):
        Machine(specs, [Transition("A", FAILURE, "A")])
    with pytest.raises(TransitionError, match="exception exit is 'B'"):
        Machine(specs, [])


def test_transitions_may_be_a_generator() -> None:
    machine = Machine(STATE_SPECS, (move for move in TRANSITION_TABLE))
    assert machine.transitions == TRANSITION_TABLE
    assert machine.target("S1", "expense_intent") == "S2"
    assert machine.pairs() == MACHINE.pairs()


# the moves the built-in expense code decides: the spec cannot name what fires them yet
CODE_DECIDES = {
    ("S1", "expense_intent"),  # the budget check answered
    ("S1", "unclear_intent"),
    ("S2", "materials_missing"),  # the OCR pre-check's verdict
    ("S2", "materials_complete"),
    ("S3", "low_confidence"),  # the validation's verdict, with the user's tolerance
    ("S3", "context_invalid"),
    ("S3", "validated"),
    ("S3", "validation_failed"),
    ("S3.1", "review_passed"),  # "不用，就这三张"
    ("S4", "continue_upload"),  # "继续上传"
}


def test_the_shipped_spec_checks_clean_but_for_the_moves_its_code_decides() -> None:
    """``hermesbus flows check`` on the file finds only that these never fire from the spec:
    the list shrinks as the expense code becomes hooks, and grows by nothing unnoticed."""
    text = resources.files("hermesbus.processors.flow").joinpath(EXPENSE_FILE).read_text("utf-8")
    spec, lines = load_flow(text, EXPENSE_FILE)
    assert spec == EXPENSE_SPEC
    findings = lint(spec, lines, modules=(), registered=None)
    assert all(f.severity == "error" and "never fires" in f.problem.message for f in findings)
    fired = set()
    for finding in findings:
        index = int(finding.problem.field.removeprefix("transitions[").split("]")[0])
        move = spec.transitions[index]
        fired.add((move.source, move.on))
    assert fired == CODE_DECIDES
    assert len(findings) == len(CODE_DECIDES)


# -- the expense report's frequent path (document 000 §2): S2's checklist preloaded --------


async def _submitted(paths: MemoryPaths, session: str = "sess_456") -> list[Outcome]:
    """Conversation A to its submission, on a bus whose path counts are ``paths``."""
    driver = Driver(session=session, ports={PATHS_PORT: paths})
    outcomes = [await to_s2(driver)]
    await driver.say("[上传两张图片]", PHOTOS)
    await driver.send(driver.answer({"ocr_tool": OCR}))
    await driver.send(driver.answer({"trip_tool": TRIP, "rule_engine_tool": RULES}))
    await driver.say("不用，就这三张")
    await driver.say("确认")
    outcomes.append(await driver.send(driver.answer({"finance_tool": submitted("EXP-1")})))
    assert driver.path[-1] == ("S4", "S5")
    return outcomes


def _entered_s2(outcome: Outcome) -> Envelope:
    return next(
        e
        for e in outcome.emit
        if isinstance(e.payload.body, StateSnapshot) and e.payload.body.snapshot.state_id == "S2"
    )


async def test_a_completed_expense_session_counts_its_path() -> None:
    paths = MemoryPaths()
    first, _ = await _submitted(paths)
    assert _entered_s2(first).payload.context[PATH_COUNT] == 0  # recorded: replay answers it
    assert {state: await paths.count("expense", 1, state) for state in ("S1", "S2", "S5")} == {
        "S1": 1,
        "S2": 1,
        "S5": 1,
    }


async def test_after_100_completions_s2_preloads_its_checklist_and_says_the_same() -> None:
    """The spec's default (``preload`` of S2) is taken once the path is frequent; the
    words are those the code says before, so the demo reads the same either way."""
    preload = EXPENSE_SPEC.state("S2").preload  # type: ignore[union-attr]
    assert preload is not None and preload.after == 100
    assert preload.context == {"checklist": texts.CHECKLIST}
    said = {}
    for count in (99, 100):
        paths = MemoryPaths({("expense", 1, "S2"): count})
        driver = Driver(session=f"s-{count}", ports={PATHS_PORT: paths})
        entered = await to_s2(driver)
        assert _entered_s2(entered).payload.context[PATH_COUNT] == count
        values = driver.state.data["values"]
        assert values.get("context", {}).get("checklist") == (
            texts.CHECKLIST if count >= 100 else None
        )
        said[count] = [r.text for r in replies(entered)]
    assert said[99] == said[100]
    assert said[100][-1].endswith("请提供发票照片和行程单。")

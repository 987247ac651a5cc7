"""The expense report is its spec: the engine runs it, and the dispatcher checks the same one."""

from __future__ import annotations

from importlib import resources

from hermesbus import Envelope, StateSnapshot
from hermesbus.processors.flow import (
    EXPENSE_FILE,
    EXPENSE_MACHINE,
    EXPENSE_SPEC,
    PATH_COUNT,
    PATHS_PORT,
    MemoryPaths,
    ReplyAction,
    duration_ms,
    lint,
    load_flow,
)
from hermesbus.processors.flow.expense_hooks import CHECKLIST, SAVED
from hermesbus.runtime import Outcome

from .demo import OCR, PHOTOS, RULES, TRIP, Driver, replies, submitted, to_s2


def _target(source: str | None, trigger: str) -> str | None:
    if source is None:
        return EXPENSE_SPEC.start
    moves = [m for m in EXPENSE_SPEC.transitions if m.source == source and m.on == trigger]
    assert moves, (source, trigger)
    return moves[0].to


def _wait(state: str, wait_id: str) -> tuple[int, str | None]:
    found = EXPENSE_SPEC.state(state)
    assert found is not None
    wait = next(w for w in found.waits if w.id == wait_id)
    return duration_ms(wait.after), wait.text


def test_the_dispatcher_checks_the_machine_of_the_spec_the_engine_runs() -> None:
    moved = {(m.source, m.to) for m in EXPENSE_SPEC.transitions if m.to is not None}
    exits = {(s.id, s.exit) for s in EXPENSE_SPEC.states if s.exit}
    assert EXPENSE_MACHINE.pairs == {(None, "S1"), *moved, *exits}
    assert {s.id for s in EXPENSE_SPEC.states} == EXPENSE_MACHINE.states


def test_the_seed_budgets_come_from_the_spec() -> None:
    """S1 5 s, S2's OCR pre-check and S3's validation 30 s; the dispatcher allows ten times."""
    budgets = {state: EXPENSE_SPEC.budget_of(state) for state in ("S1", "S2", "S3", "S3.1", "S4")}
    assert budgets == {"S1": 5_000, "S2": 30_000, "S3": 30_000, "S3.1": 5_000, "S4": 5_000}
    assert EXPENSE_MACHINE.budget_ms("S3") == 300_000
    assert EXPENSE_MACHINE.budget_ms("S1") == 50_000


def test_the_seed_timeouts() -> None:
    assert _wait("S2", "s2_wait")[0] == 5 * 60_000
    assert _wait("S3", "s3_validation")[0] == 30_000
    assert _wait("S4", "s4_idle")[0] == 10 * 60_000
    assert _wait("S4", "s4_gave_up")[0] == 10 * 60_000
    assert _target("S2", "wait_expired") == "S4"
    assert _target("S3", "validation_timeout") == "S3.1"
    assert _target("S4", "idle_expired") == "S5"


def test_the_waits_say_the_texts_of_the_walkthrough() -> None:
    """The texts of the walkthrough, word for word (S3's is its move's: a cycle out of time
    says the same)."""
    assert _wait("S2", "s2_wait")[1] == "您已超过5分钟未上传材料，是否放弃本次报销？"
    timeout = next(m for m in EXPENSE_SPEC.transitions if m.on == "validation_timeout")
    said = [a.reply.text for a in timeout.do if isinstance(a, ReplyAction)]
    assert said == ["数据校验超过30秒未完成，已转人工复核。您可以重试校验或取消。"]
    assert _wait("S4", "s4_idle")[1] == "会话已超过10分钟无操作，已自动结束。" + SAVED
    assert _wait("S4", "s4_gave_up")[1] == "超过10分钟未收到回复，已按放弃处理。" + SAVED


def test_the_seed_exits() -> None:
    assert _target("S1", "unclear_intent") == "S5"
    assert _target("S3.1", "review_passed") == "S4"
    assert _target("S4", "modify") == "S2"
    assert _target(None, "user_turn") == "S1"
    assert [(s.id, s.exit) for s in EXPENSE_SPEC.states] == [
        ("S1", "S5"),
        ("S2", "S4"),
        ("S3", "S3.1"),
        ("S3.1", "S5"),
        ("S4", "S5"),
        ("S5", None),
    ]


def test_the_shipped_spec_checks_clean() -> None:
    """``hermesbus flows check`` on the file: every move fires from the spec (its hooks
    name them), nothing refused; one warning, the move S2 makes at once on "继续上传" with
    the files, named like the upload intent."""
    text = resources.files("hermesbus.processors.flow").joinpath(EXPENSE_FILE).read_text("utf-8")
    spec, lines = load_flow(text, EXPENSE_FILE)
    assert spec == EXPENSE_SPEC
    findings = lint(spec, lines, modules=(), registered=None)
    assert [(f.severity, f.problem.field) for f in findings] == [
        ("warning", "states[1].on_enter[0].decide.moves[0]")
    ]


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
    assert preload.context == {"checklist": CHECKLIST}
    said = {}
    for count in (99, 100):
        paths = MemoryPaths({("expense", 1, "S2"): count})
        driver = Driver(session=f"s-{count}", ports={PATHS_PORT: paths})
        entered = await to_s2(driver)
        assert _entered_s2(entered).payload.context[PATH_COUNT] == count
        values = driver.state.data["values"]
        assert values.get("context", {}).get("checklist") == (CHECKLIST if count >= 100 else None)
        said[count] = [r.text for r in replies(entered)]
    assert said[99] == said[100]
    assert said[100][-1].endswith("请提供发票照片和行程单。")

"""Messages and the history's token budget: deterministic folding, pinned facts kept."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from hermesbus import ContentType, Role
from hermesbus.processors.conversation import History, Message, estimate_tokens, new_message

from .demo import Driver, snap, to_confirm

T = datetime(2024, 6, 3, 9, 0, tzinfo=UTC)
PINNED = {"user": "u_xyz789", "goal": "差旅报销", "total": "8,240", "dept": "采购部"}


def _message(i: int, text: str) -> Message:
    role = Role.USER if i % 2 == 0 else Role.ASSISTANT
    return new_message(message_id=f"m{i}", session_id="s", role=role, text=text, timestamp=T)


def _fill(n: int, budget: int) -> History:
    history = History()
    for i in range(n):
        history = history.add(
            _message(i, f"第{i}条消息：我要报上个月去深圳的差旅费"), PINNED, budget
        )
    return history


def test_token_estimate_counts_cjk_one_each_and_other_text_by_four() -> None:
    assert estimate_tokens("差旅费") == 3
    assert estimate_tokens("abcdefgh") == 2
    assert estimate_tokens("报销 report") == 2 + 2  # " report" is 7 characters
    assert estimate_tokens("，") == 1


def test_a_message_has_the_seed_fields_and_is_frozen() -> None:
    message = new_message(
        message_id="m1",
        session_id="s",
        role=Role.TOOL,
        text="ocr_tool 200",
        timestamp=T,
        parent_id="c1",
        content_type=ContentType.TOOL_RESULT,
        extra={"tool": "ocr_tool"},
    )
    assert set(Message.model_fields) == {
        "id",
        "session_id",
        "role",
        "content_type",
        "body",
        "timestamp",
        "parent_id",
        "metadata",
    }
    assert message.body == {"text": "ocr_tool 200", "tool": "ocr_tool"}
    assert message.metadata["tokens"] == estimate_tokens("ocr_tool 200")
    with pytest.raises(ValidationError):
        message.id = "other"  # type: ignore[misc]


def test_history_stays_within_budget_and_folds_the_oldest() -> None:
    history = _fill(30, budget=200)
    assert history.tokens(PINNED) <= 200
    assert history.folded == 30 - len(history.recent)
    assert history.recent[-1].id == "m29"  # the newest stay verbatim
    assert history.summary.startswith(f"[已折叠{history.folded}条]")


def test_folding_is_deterministic_and_survives_json() -> None:
    a, b = _fill(25, 150), _fill(25, 150)
    assert a == b and a.summary == b.summary
    again = History.model_validate(json.loads(a.model_dump_json()))
    assert again == a


def test_pinned_facts_count_but_are_never_folded() -> None:
    history = _fill(40, budget=120)
    assert history.tokens(PINNED) <= 120
    assert history.tokens(PINNED) - history.tokens({}) == estimate_tokens(
        "dept=采购部；goal=差旅报销；total=8,240；user=u_xyz789"
    )


def test_the_recent_minimum_is_kept_even_over_budget() -> None:
    history = _fill(5, budget=1)
    assert len(history.recent) == 2


async def test_the_session_keeps_pinned_facts_and_counts_tokens_in_the_snapshot() -> None:
    d = Driver()
    outcome = await to_confirm(d)
    facts = d.state.data["facts"]
    assert {"user", "goal", "city", "period", "dept", "total", "approver"} <= set(facts)
    assert facts["goal"] == "差旅报销" and facts["dept"] == "采购部"
    history = History.model_validate(d.state.data["history"])
    # the S4 snapshot is taken before the reply is added to the history
    assert 0 < snap(outcome.emit[0]).tokens_used < history.tokens(facts)
    submit = await d.say("确认")
    after = History.model_validate(d.state.data["history"])
    assert snap(submit.emit[-1]).tokens_used == after.tokens(d.state.data["facts"])
    roles = {m.role for m in history.recent}
    assert roles == {Role.USER, Role.ASSISTANT, Role.TOOL}


def test_attachment_uris_count_against_the_budget() -> None:
    uris = [f"demo://expense/photo-{i}.jpg" for i in range(8)]
    plain = _message(0, "[上传两张图片]")
    with_files = new_message(
        message_id="m-files",
        session_id="s",
        role=Role.USER,
        text="[上传两张图片]",
        timestamp=T,
        content_type=ContentType.IMAGE,
        extra={"attachments": uris},
    )
    extra = estimate_tokens(" " + " ".join(uris))
    assert with_files.metadata["tokens"] == int(plain.metadata["tokens"]) + extra
    assert History().add(with_files, {}).tokens({}) == History().add(plain, {}).tokens({}) + extra

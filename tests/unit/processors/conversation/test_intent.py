"""The expense report's parser hook on every walkthrough sentence, in Chinese and English,
and relative dates."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermesbus.processors.flow import relative_period

from .demo import read

NOW = datetime(2024, 6, 3, 9, 0, tzinfo=UTC)

SENTENCES = [
    ("我要报上个月去深圳的差旅费", "expense_submit"),
    ("[上传两张图片]", "upload"),
    ("不用，就这三张", "keep_materials"),
    ("等等，住宿费超标了，先不提交", "cancel"),
    ("确认", "confirm"),
    ("修改", "modify"),
    ("取消", "cancel"),
    ("重新上传", "reupload"),
    ("继续上传", "upload"),
    ("放弃", "cancel"),
    ("重试", "retry"),
    ("是", "yes"),
    ("否", "no"),
    ("今天天气怎么样", None),
    ("I want to claim my travel expenses for Shenzhen last month", "expense_submit"),
    ("I need to get reimbursed for the trip", "expense_submit"),
    ("here are the photos", "upload"),
    ("no, keep these three", "keep_materials"),
    ("re-upload", "reupload"),
    ("confirm", "confirm"),
    ("please edit the amount", "modify"),
    ("wait, don't submit yet", "cancel"),
    ("Cancel it", "cancel"),
    ("yes", "yes"),
    ("No.", "no"),
    ("my credit card", None),
]


@pytest.mark.parametrize(("text", "name"), SENTENCES)
def test_seed_and_english_sentences(text: str, name: str | None) -> None:
    assert read(text, NOW)[0] == name


def test_the_first_seed_sentence_has_its_entities() -> None:
    assert read("我要报上个月去深圳的差旅费", NOW)[1] == {"city": "深圳", "period": "2024-05"}
    english = read("travel expenses in Shenzhen last month", NOW)[1]
    assert english == {"city": "深圳", "period": "2024-05"}


def test_holding_is_a_cancel_that_pauses() -> None:
    assert read("等等，住宿费超标了，先不提交", NOW) == ("cancel", {"hold": "yes"})
    assert read("wait, don't submit yet", NOW) == ("cancel", {"hold": "yes"})
    assert read("取消", NOW) == ("cancel", {})


def test_attachments_alone_are_an_upload() -> None:
    assert read("", NOW, attachments=2) == ("upload", {})


def test_last_month_across_the_year_boundary() -> None:
    january = datetime(2025, 1, 15, tzinfo=UTC)
    assert relative_period("上个月", january) == (date(2024, 12, 1), date(2024, 12, 31))
    assert relative_period("last month", january) == (date(2024, 12, 1), date(2024, 12, 31))
    march = datetime(2024, 3, 1, tzinfo=UTC)
    assert relative_period("上个月", march) == (date(2024, 2, 1), date(2024, 2, 29))


def test_other_relative_dates() -> None:
    new_year = datetime(2025, 1, 1, 8, tzinfo=UTC)  # a Wednesday
    assert relative_period("昨天", new_year) == (date(2024, 12, 31),) * 2
    assert relative_period("yesterday", new_year) == (date(2024, 12, 31),) * 2
    assert relative_period("上周", new_year) == (date(2024, 12, 23), date(2024, 12, 29))
    assert relative_period("last week", new_year) == (date(2024, 12, 23), date(2024, 12, 29))
    assert relative_period("这个月", new_year) == (date(2025, 1, 1), date(2025, 1, 31))
    assert relative_period("this month", NOW) == (date(2024, 6, 1), date(2024, 6, 30))
    assert relative_period("深圳", NOW) is None


@given(st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(9999, 12, 31)))
def test_last_month_is_the_calendar_month_before(now: datetime) -> None:
    start, end = relative_period("我要报上个月的差旅费", now.replace(tzinfo=UTC)) or (None, None)
    assert start is not None and end is not None
    assert start.day == 1 and (end + timedelta(days=1)) == now.date().replace(day=1)
    assert (start.year, start.month) == (end.year, end.month)
    expected = (now.year - 1, 12) if now.month == 1 else (now.year, now.month - 1)
    assert (start.year, start.month) == expected

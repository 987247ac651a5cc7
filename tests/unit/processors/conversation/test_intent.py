"""The rule parser on every walkthrough sentence, in Chinese and English, and relative dates."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermesbus.processors.conversation import IntentName, RuleIntentParser, relative_period

NOW = datetime(2024, 6, 3, 9, 0, tzinfo=UTC)
RULES = RuleIntentParser()
N = IntentName

SENTENCES = [
    ("我要报上个月去深圳的差旅费", N.EXPENSE_SUBMIT),
    ("[上传两张图片]", N.UPLOAD),
    ("不用，就这三张", N.KEEP_MATERIALS),
    ("等等，住宿费超标了，先不提交", N.CANCEL),
    ("确认", N.CONFIRM),
    ("修改", N.MODIFY),
    ("取消", N.CANCEL),
    ("重新上传", N.REUPLOAD),
    ("继续上传", N.UPLOAD),
    ("放弃", N.CANCEL),
    ("重试", N.RETRY),
    ("是", N.YES),
    ("否", N.NO),
    ("今天天气怎么样", N.UNCLEAR),
    ("I want to claim my travel expenses for Shenzhen last month", N.EXPENSE_SUBMIT),
    ("I need to get reimbursed for the trip", N.EXPENSE_SUBMIT),
    ("here are the photos", N.UPLOAD),
    ("no, keep these three", N.KEEP_MATERIALS),
    ("re-upload", N.REUPLOAD),
    ("confirm", N.CONFIRM),
    ("please edit the amount", N.MODIFY),
    ("wait, don't submit yet", N.CANCEL),
    ("Cancel it", N.CANCEL),
    ("yes", N.YES),
    ("No.", N.NO),
    ("my credit card", N.UNCLEAR),
]


@pytest.mark.parametrize(("text", "name"), SENTENCES)
async def test_seed_and_english_sentences(text: str, name: IntentName) -> None:
    assert (await RULES.parse(text, now=NOW, context={})).name is name


async def test_the_first_seed_sentence_has_its_entities() -> None:
    intent = await RULES.parse("我要报上个月去深圳的差旅费", now=NOW, context={})
    assert (intent.city, intent.category, intent.month) == ("深圳", "差旅", "2024-05")
    english = await RULES.parse("travel expenses in Shenzhen last month", now=NOW, context={})
    assert (english.city, english.category, english.month) == ("深圳", "差旅", "2024-05")


async def test_holding_is_a_cancel_that_pauses() -> None:
    assert (await RULES.parse("等等，住宿费超标了，先不提交", now=NOW, context={})).hold
    assert (await RULES.parse("wait, don't submit yet", now=NOW, context={})).hold
    assert not (await RULES.parse("取消", now=NOW, context={})).hold


async def test_attachments_alone_are_an_upload() -> None:
    intent = await RULES.parse("", now=NOW, context={"attachments": 2})
    assert intent.name is N.UPLOAD


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

"""The built-in entities a flow's turns are read for: a known city, a relative period.

A relative date ("上个月", "last month") is the calendar period before or around the turn's
date in the zone the turn is read in: the caller gives that local time (the envelope's,
never a clock), so a replay reads the same period.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta
from typing import Final

__all__ = ["CITIES", "found", "normalise_city", "relative_period"]

CITIES: Final = {
    "深圳": ("shenzhen",),
    "北京": ("beijing", "peking"),
    "上海": ("shanghai",),
    "广州": ("guangzhou", "canton"),
    "杭州": ("hangzhou",),
    "成都": ("chengdu",),
    "南京": ("nanjing",),
    "武汉": ("wuhan",),
    "西安": ("xi'an", "xian"),
    "香港": ("hong kong",),
}
"""Known cities: the canonical (Chinese) name and its English spellings."""


def _month_start(day: date) -> date:
    return day.replace(day=1)


def _month_end(day: date) -> date:
    following = (day.replace(day=28) + timedelta(days=4)).replace(day=1)
    return following - timedelta(days=1)


_PERIODS: Final = (
    ("last_month", ("上个月", "上月", "last month", "previous month")),
    ("this_month", ("这个月", "本月", "this month")),
    ("last_week", ("上周", "上星期", "上个星期", "last week")),
    ("yesterday", ("昨天", "yesterday")),
    ("today", ("今天", "today")),
)


def relative_period(text: str, now: datetime) -> tuple[date, date] | None:
    """The calendar period a relative date phrase names, counted from ``now``'s date."""
    lowered, today = text.lower(), now.date()
    for kind, phrases in _PERIODS:
        if any(found(lowered, phrase) for phrase in phrases):
            return _period(kind, today)
    return None


def _period(kind: str, today: date) -> tuple[date, date]:
    if kind == "last_month":
        end = _month_start(today) - timedelta(days=1)
        return _month_start(end), end
    if kind == "this_month":
        return _month_start(today), _month_end(today)
    if kind == "last_week":
        monday = today - timedelta(days=today.weekday() + 7)
        return monday, monday + timedelta(days=6)
    day = today - timedelta(days=1) if kind == "yesterday" else today
    return day, day


def normalise_city(text: str) -> str | None:
    """The canonical name of the first known city ``text`` mentions (Chinese or English)."""
    lowered = text.lower()
    for name, spellings in CITIES.items():
        if name in text or any(found(lowered, spelling) for spelling in spellings):
            return name
    return None


def found(lowered: str, phrase: str) -> bool:
    """Chinese phrases match anywhere; English ones at a word start ("edit" not "credit",
    but "expenses" and "cancelled" do)."""
    if phrase.isascii():
        return re.search(rf"(?<![a-z]){re.escape(phrase)}", lowered) is not None
    return phrase in lowered

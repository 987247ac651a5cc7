"""Intent parsing is a port: the Protocol, the Intent it returns, and the rule-based default.

The rule parser knows the walkthrough's sentences in Chinese and English (the phrases of the
expense report's intents come from its spec) and resolves relative dates ("上个月" / "last
month" = the calendar month before ``now``) from the envelope's time, so it is
deterministic; nothing here guesses beyond the listed phrases.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from datetime import date, datetime, timedelta, tzinfo
from typing import Any, Final, Protocol
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict

from hermesbus.base.lifecycle import Service
from hermesbus.processors.flow import EXPENSE_SPEC

__all__ = [
    "CITIES",
    "DEFAULT_TIMEZONE",
    "Intent",
    "IntentName",
    "IntentParser",
    "RuleIntentParser",
    "negation",
    "normalise_city",
    "relative_period",
]


class IntentName(enum.StrEnum):
    EXPENSE_SUBMIT = "expense_submit"
    UPLOAD = "upload"
    KEEP_MATERIALS = "keep_materials"
    """The S3.1 review-passed signal ("不用，就这三张")."""
    REUPLOAD = "reupload"
    RETRY = "retry"
    CONFIRM = "confirm"
    MODIFY = "modify"
    CANCEL = "cancel"
    YES = "yes"
    NO = "no"
    UNCLEAR = "unclear"


class Intent(BaseModel):
    """What a user message asks for, with the entities the flow needs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: IntentName
    city: str | None = None
    category: str | None = None
    period_start: date | None = None
    period_end: date | None = None
    hold: bool = False
    """A cancel that only pauses ("先不提交", "wait, don't submit yet")."""
    source: str = "rules"

    @property
    def month(self) -> str | None:
        """``YYYY-MM`` when the period is exactly one calendar month."""
        start, end = self.period_start, self.period_end
        if start is None or end is None or start.day != 1 or start != _month_start(end):
            return None
        return start.strftime("%Y-%m") if end == _month_end(start) else None


DEFAULT_TIMEZONE: Final = "Asia/Shanghai"
"""The demo company's zone: relative dates ("上个月") are counted on their calendar."""


class IntentParser(Protocol):
    """``ports["intent"]``: turns one user message into an :class:`Intent`."""

    @property
    def zone(self) -> tzinfo:
        """The zone whose calendar relative dates are resolved in."""
        ...

    async def parse(self, text: str, *, now: datetime, context: Mapping[str, Any]) -> Intent:
        """``now`` is the envelope's time; ``context`` has ``state`` and ``attachments``."""
        ...


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

_CATEGORY: Final = {"差旅": ("差旅", "出差", "travel", "trip", "business trip")}

_PHRASES: Final = tuple((IntentName(i.name), tuple(i.phrases)) for i in EXPENSE_SPEC.intents)
"""(intent, phrases) from the expense report's spec, checked in its order: the first phrase
found wins."""
_HOLD: Final = ("先不", "暂不", "等等", "等一下", "wait", "hold on", "not yet", "don't submit")
_SUBMIT_WORDS: Final = r"提交|submit"
_CONFIRM_WORDS: Final = r"确认|确定|confirm|go ahead"
_WORD: Final = rf"(?P<word>{_SUBMIT_WORDS}|{_CONFIRM_WORDS})"
# a negation right before the word, with a few fillers: 不要提交, 先别提交, 还没确定, 不太确定
_NEG_BEFORE_ZH: Final = re.compile(
    rf"(?:不|别|没|未|勿|莫)(?:要|用|能|想|必|会|有|太|去|急着|着急)?(?:先|再|马上|直接)?{_WORD}"
)
_NEG_BEFORE_EN: Final = re.compile(
    rf"(?<![a-z])(?:not|never|no|don'?t|do not|won'?t|can'?t|cannot)(?![a-z])"
    rf"(?:\W+[a-z]+){{0,2}}?\W+{_WORD}"
)
# a negation right after it: 提交不了, 确认不行, "submit? no", "confirm, not yet"
_NEG_AFTER: Final = re.compile(
    rf"{_WORD}(?:不了|不行|不对|不|[a-z]*\W+(?:[a-z]+\W+)?(?:not|no|never)(?![a-z]))"
)
_QUESTION: Final = re.compile(r"(?:[?？]|吗|么|呢)\s*$")
_EXPENSE_VERB: Final = re.compile(r"报.{0,12}费")
_YES: Final = frozenset({"是", "是的", "好", "好的", "可以", "对", "行", "嗯", "yes", "y", "ok"})
_YES_EN: Final = frozenset({"okay", "sure", "yep", "yeah", "yes please"})
_NO: Final = frozenset({"否", "不", "不是", "不用", "不要", "no", "n", "nope", "no thanks"})
_STRIP: Final = re.compile(r"[\s,.!?;:，。！？；：、~]+")


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
        if any(_has(lowered, phrase) for phrase in phrases):
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
        if name in text or any(_has(lowered, spelling) for spelling in spellings):
            return name
    return None


def _has(lowered: str, phrase: str) -> bool:
    """Chinese phrases match anywhere; English ones at a word start ("edit" not "credit",
    but "expenses" and "cancelled" do)."""
    if phrase.isascii():
        return re.search(rf"(?<![a-z]){re.escape(phrase)}", lowered) is not None
    return phrase in lowered


def _category(lowered: str) -> str | None:
    for name, phrases in _CATEGORY.items():
        if any(_has(lowered, phrase) for phrase in phrases):
            return name
    return None


def _lower(text: str) -> str:
    return text.lower().replace("\u2019", "'")  # a typographic apostrophe


def negation(text: str) -> str | None:
    """A negated confirm/submit word: ``"submit"`` when a submit word is negated before it
    (不要提交, "don't submit": a hold), ``"confirm"`` for any other negation around a
    confirm/submit word (不确认, 还没确定, "submit? no"); None when nothing is negated."""
    lowered = _lower(text)
    before = [m["word"] for p in (_NEG_BEFORE_ZH, _NEG_BEFORE_EN) for m in p.finditer(lowered)]
    if any(re.fullmatch(_SUBMIT_WORDS, word) for word in before):
        return "submit"
    return "confirm" if before or _NEG_AFTER.search(lowered) else None


def _yes_no(lowered: str) -> IntentName | None:
    bare = _STRIP.sub(" ", lowered).strip()
    if bare in _YES or bare in _YES_EN:
        return IntentName.YES
    return IntentName.NO if bare in _NO else None


def _name(text: str, attachments: int) -> IntentName:
    lowered = _lower(text)
    negated = negation(text)
    if (answer := _yes_no(lowered)) is not None:
        return answer
    if negated == "submit":
        return IntentName.CANCEL
    name = _by_phrase(lowered)
    if name is IntentName.CONFIRM and (negated or _QUESTION.search(lowered)):
        return IntentName.UNCLEAR  # a negated or asked confirmation is never a confirmation
    if name is not None:
        return name
    if _EXPENSE_VERB.search(text):
        return IntentName.EXPENSE_SUBMIT
    return IntentName.UPLOAD if attachments else IntentName.UNCLEAR


def _by_phrase(lowered: str) -> IntentName | None:
    for name, phrases in _PHRASES:
        if any(_has(lowered, phrase) for phrase in phrases):
            return name
    return None


class RuleIntentParser(Service):
    """The default parser: fixed phrase lists, no I/O; start/stop do nothing. Relative dates
    are counted on the calendar of ``zone`` (default :data:`DEFAULT_TIMEZONE`)."""

    def __init__(self, zone: tzinfo | None = None) -> None:
        self.zone: tzinfo = zone if zone is not None else ZoneInfo(DEFAULT_TIMEZONE)

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def parse(self, text: str, *, now: datetime, context: Mapping[str, Any]) -> Intent:
        return self.parse_now(text, now=now, attachments=int(context.get("attachments", 0)))

    def parse_now(self, text: str, *, now: datetime, attachments: int = 0) -> Intent:
        """The same as :meth:`parse`, synchronously (the fallback of the HTTP parser)."""
        name = _name(text, attachments)
        lowered = _lower(text)
        period = relative_period(text, now.astimezone(self.zone))
        return Intent(
            name=name,
            city=normalise_city(text),
            category=_category(lowered),
            period_start=period[0] if period else None,
            period_end=period[1] if period else None,
            hold=name is IntentName.CANCEL
            and (negation(text) == "submit" or any(_has(lowered, p) for p in _HOLD)),
        )

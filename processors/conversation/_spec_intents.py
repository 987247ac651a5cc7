"""A flow's rule parser: its intents' answers, phrases and patterns, and their entities.

Intents are tried in the spec's order and the first that matches wins: the whole message
is one of its short answers (punctuation around it and case aside), a phrase is found in
the text (Chinese anywhere, English at a word start, case aside), or a pattern searches
it. Entities are those of the matched intent: a pattern's first group (else the whole
match), or a built-in (a known city, a relative period counted on the calendar of the
turn's time, a number). Only the first :data:`MAX_TEXT` characters are searched, which
bounds what a pattern can cost.
"""

from __future__ import annotations

import calendar
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Final

from hermesbus.processors.flow import (
    Entity,
    FlowSpec,
    Intent,
    PatternEntity,
    normalise_city,
    pattern_of,
    relative_period,
)

__all__ = ["MAX_TEXT", "Parsed", "answered", "parse_turn", "plain"]

MAX_TEXT: Final = 2_000
_NUMBER: Final = re.compile(r"-?\d+(?:\.\d+)?")
_PUNCTUATION: Final = re.compile(r"[\s,.!?;:，。！？；：、~\"'“”]+")
_STRIP: Final = re.compile(r"^[\s,.!;:，。！；：、~\"'“”]+|[\s,.!;:，。！；：、~\"'“”]+$")
"""Punctuation around an answer; a question mark stays: a question never answers."""


@dataclass(frozen=True, slots=True)
class Parsed:
    """The intent a turn matched (None: none of the flow's) and its entities."""

    intent: str | None
    entities: dict[str, str] = field(default_factory=dict)
    whole: bool = False
    """The whole message was one of the intent's short ``answers`` (the user's own words,
    not a phrase inside a longer text nor a model's reading)."""


def plain(text: str) -> str:
    """``text`` as answers are compared: NFKC, lower case, no punctuation around it but a
    question mark."""
    return _STRIP.sub("", unicodedata.normalize("NFKC", text).strip().lower())


def _found(lowered: str, phrase: str) -> bool:
    phrase = phrase.lower()
    if phrase.isascii():
        return re.search(rf"(?<![a-z]){re.escape(phrase)}", lowered) is not None
    return phrase in lowered


def answered(intent: Intent, text: str) -> bool:
    """Whether ``text`` is, as a whole, one of the intent's short answers (its words in
    that order; punctuation and spaces aside: "Yes, please!" is "yes please", "是？" is
    "是")."""
    said = _bare(text)
    return bool(said) and said in {_bare(answer) for answer in intent.answers}


def _bare(text: str) -> str:
    lowered = unicodedata.normalize("NFKC", text).lower()
    return _PUNCTUATION.sub(" ", lowered).strip()


def _matches(intent: Intent, text: str, lowered: str) -> bool:
    if answered(intent, text):
        return True
    if any(_found(lowered, phrase) for phrase in intent.phrases):
        return True
    return any(pattern_of(pattern).search(text) for pattern in intent.patterns)


def _entity(entity: PatternEntity | Entity, text: str, now: datetime) -> str | None:
    if isinstance(entity, PatternEntity):
        match = pattern_of(entity.pattern).search(text)
        if match is None:
            return None
        found = match.group(1) if match.groups() else match.group(0)
        return found if isinstance(found, str) and found else None
    if entity.builtin == "city":
        return normalise_city(text)
    if entity.builtin == "period":
        return _period(text, now)
    match = _NUMBER.search(text)
    return match.group(0) if match else None


def _period(text: str, now: datetime) -> str | None:
    """``YYYY-MM`` for a whole calendar month, else ``start~end`` (ISO dates)."""
    period = relative_period(text, now)
    if period is None:
        return None
    start, end = period
    whole = calendar.monthrange(start.year, start.month)[1]
    if start.day == 1 and end == start.replace(day=whole):
        return start.strftime("%Y-%m")
    return f"{start.isoformat()}~{end.isoformat()}"


def parse_turn(spec: FlowSpec, text: str, *, now: datetime, zone: tzinfo) -> Parsed:
    """What ``text`` says in ``spec``'s terms, at ``now`` (the turn's time) in ``zone``."""
    text = text[:MAX_TEXT]
    lowered = text.lower()
    local = now.astimezone(zone)
    for intent in spec.intents:
        if _matches(intent, text, lowered):
            found = {e.name: _entity(e, text, local) for e in intent.entities}
            entities = {k: v for k, v in found.items() if v is not None}
            return Parsed(intent.name, entities, whole=answered(intent, text))
    return Parsed(None)

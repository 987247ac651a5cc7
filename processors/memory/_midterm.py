"""Mid-term memory: confirmed preferences, repeated choices and budgeted items.

Keys of a ``MemoryWrite(tier=mid_term)``: ``pref:<name>`` (needs ``confirmed_by``; kept
as ``pref:{user_id}:{name}``), ``choice:<name>`` (an observation, counted per value over
the latest ``MemorySettings.choice_history`` observations of that name), and
anything else (an item with importance and TTL, e.g. ``unfinished:<session>``). Values in
``MemoryContext`` are the JSON value itself when it is a string, else its JSON text.
"""

from __future__ import annotations

import json
import re

from hermesbus.contract.payloads import MemoryWrite
from hermesbus.processors.memory._emit import Refused
from hermesbus.processors.memory._model import MidTermItem, Preference
from hermesbus.processors.memory._ports import PreferenceStore
from hermesbus.processors.memory._settings import MemorySettings

__all__ = ["CHOICE", "PREF", "apply_mid_term", "display", "preferences_for"]

PREF = "pref:"
CHOICE = "choice:"
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")


def display(value_json: str) -> str:
    """A stored JSON value as ``MemoryContext`` shows it: strings bare, the rest as JSON."""
    value = json.loads(value_json)
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _canonical(value_json: str) -> str | None:
    try:
        value = json.loads(value_json)
    except ValueError:
        return None
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _expiry(write: MemoryWrite, now_ms: int) -> int | None:
    return None if write.ttl_s is None else now_ms + write.ttl_s * 1000


def _check(write: MemoryWrite, user_id: str) -> tuple[str, Refused | None]:
    """The canonical value, or why the write is malformed."""
    value = _canonical(write.value_json)
    if value is None:
        return "", Refused("memory.bad_value", f"{write.key!r}: value_json is not JSON")
    if not user_id:
        return value, Refused("memory.no_user", f"{write.key!r}: the envelope has no user_id")
    for prefix in (PREF, CHOICE):
        if write.key.startswith(prefix) and not _NAME.match(write.key[len(prefix) :]):
            return value, Refused(
                "memory.bad_key",
                f"{write.key!r}: a {prefix[:-1]} name is 1-100 of A-Z a-z 0-9 _ . -",
            )
    return value, None


async def apply_mid_term(
    write: MemoryWrite,
    *,
    user_id: str,
    message_id: str,
    now_ms: int,
    store: PreferenceStore,
    settings: MemorySettings,
) -> Refused | None:
    """Store the write, or say why not (a preference nobody confirmed is refused)."""
    value, refused = _check(write, user_id)
    if refused is not None:
        return refused
    if write.key.startswith(PREF):
        return await _preference(write, user_id, value, now_ms, store)
    if write.key.startswith(CHOICE):
        name = write.key[len(CHOICE) :]
        await store.observe_choice(
            user_id, name, value, message_id, now_ms, keep=settings.choice_history
        )
        return None
    await store.purge_expired(user_id, now_ms)
    item = MidTermItem(
        user_id=user_id,
        key=write.key,
        value_json=write.value_json,
        importance=write.importance,
        created_at_ms=now_ms,
        updated_at_ms=now_ms,
        expires_at_ms=_expiry(write, now_ms),
        confirmed_by=write.confirmed_by,
    )
    await store.put_item(item)
    await store.evict(user_id, settings.budget_items)
    return None


async def _preference(
    write: MemoryWrite, user_id: str, value: str, now_ms: int, store: PreferenceStore
) -> Refused | None:
    name = write.key[len(PREF) :]
    if not write.confirmed_by:
        return Refused(
            "memory.unconfirmed_preference",
            f"preference {name!r} was not confirmed by the user (confirmed_by is empty)",
            "ask the user first; send confirmed_by = the id of the message that said yes",
        )
    preference = Preference(
        user_id=user_id,
        name=name,
        value_json=value,
        updated_at_ms=now_ms,
        confirmed_by=write.confirmed_by,
        expires_at_ms=_expiry(write, now_ms),
    )
    await store.put_preference(preference)
    return None


async def preferences_for(
    names: tuple[str, ...], user_id: str, now_ms: int, store: PreferenceStore, threshold: int
) -> tuple[dict[str, str], dict[str, str]]:
    """(confirmed preferences, candidates): a name without a preference whose most chosen
    value reached ``threshold`` identical choices is a candidate, to be asked about."""
    preferences: dict[str, str] = {}
    candidates: dict[str, str] = {}
    for name in dict.fromkeys(names):
        found = await store.preference(user_id, name, now_ms) if user_id else None
        if found is not None:
            preferences[name] = display(found.value_json)
            continue
        counts = await store.choices(user_id, name) if user_id else ()
        if counts and counts[0].count >= threshold:
            candidates[name] = display(counts[0].value_json)
    return preferences, candidates

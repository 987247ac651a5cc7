"""Redis mid-term store: memory's confirmed preferences, choice observations and budgeted
items (the ``PreferenceStore`` Protocol) on Redis.

Keys (``ns`` the configured prefix, ``u`` the user), every one of a user in the ``{u}``
hash slot, so each script below works on Redis Cluster:

- ``ns:pref:{u}:NAME`` a hash (``value_json``, ``updated_at_ms``, ``confirmed_by``,
  ``expires_at_ms``): the preference ``pref:{user_id}:{name}``;
- ``ns:choices:{u}:NAME`` a hash, observation id -> ``[value, at_ms, seq]``, and
  ``ns:choices-seq:{u}:NAME`` the counter that orders observations of the same time;
- ``ns:items:{u}`` a hash, key -> the item as JSON, and ``ns:items-created:{u}`` key -> its
  creation time (kept from the first write).

Expiry is the envelopes' time, compared on read, never Redis's own TTL: a replay of old
envelopes must see what they saw. Every change that reads before it writes (a choice and
its pruning, an item that keeps its creation time, purging and eviction) is one script.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import orjson

from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.redis.client import RedisService
from hermesbus.connectors.redis.config import RedisConfig
from hermesbus.processors.memory import CHOICE_HISTORY, ChoiceCount, MidTermItem, Preference

__all__ = ["RedisPreferenceStore"]

_OBSERVE = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
local seq = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode({ARGV[2], tonumber(ARGV[3]), seq}))
local keep = tonumber(ARGV[4])
if redis.call('HLEN', KEYS[1]) <= keep then return 1 end
local all = redis.call('HGETALL', KEYS[1])
local seen = {}
for i = 1, #all, 2 do
  local v = cjson.decode(all[i + 1])
  table.insert(seen, {id = all[i], at = v[2], seq = v[3]})
end
table.sort(seen, function(a, b)
  if a.at ~= b.at then return a.at > b.at end
  return a.seq > b.seq
end)
for i = keep + 1, #seen do redis.call('HDEL', KEYS[1], seen[i].id) end
return 1
"""
"""KEYS: choices, their counter. ARGV: observation id, value, at ms, keep. The same id
twice counts once; only the latest ``keep`` (by time, then arrival) stay."""

_PUT_ITEM = """
redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""
"""KEYS: items, their creation times. ARGV: key, the item (JSON, stored as given: a script
never encodes it again, which would round its numbers), its creation time (kept from the
first write: an update keeps the stored one)."""

_PURGE = """
local all = redis.call('HGETALL', KEYS[1])
local gone = {}
for i = 1, #all, 2 do
  local expires = cjson.decode(all[i + 1])['expires_at_ms']
  if expires ~= cjson.null and expires <= tonumber(ARGV[1]) then table.insert(gone, all[i]) end
end
table.sort(gone)
for _, key in ipairs(gone) do
  redis.call('HDEL', KEYS[1], key)
  redis.call('HDEL', KEYS[2], key)
end
return gone
"""
"""KEYS: items, their creation times. ARGV: now ms. Deletes the items expired by then;
their keys, sorted."""

_EVICT = """
local all = redis.call('HGETALL', KEYS[1])
local keep = tonumber(ARGV[1])
if #all / 2 <= keep then return {} end
local items = {}
for i = 1, #all, 2 do
  local v = cjson.decode(all[i + 1])
  table.insert(items, {key = all[i], importance = v['importance'], at = v['updated_at_ms']})
end
table.sort(items, function(a, b)
  if a.importance ~= b.importance then return a.importance < b.importance end
  if a.at ~= b.at then return a.at < b.at end
  return a.key < b.key
end)
local doomed = {}
for i = 1, #items - keep do
  redis.call('HDEL', KEYS[1], items[i].key)
  redis.call('HDEL', KEYS[2], items[i].key)
  table.insert(doomed, items[i].key)
end
return doomed
"""
"""KEYS: items, their creation times. ARGV: how many to keep. Deletes the least important,
then least recently updated, then by key; the deleted keys in that order."""


class RedisPreferenceStore(RedisService):
    """The :class:`~hermesbus.processors.memory.PreferenceStore` on Redis."""

    scripts: ClassVar[Mapping[str, str]] = {
        "observe": _OBSERVE,
        "put_item": _PUT_ITEM,
        "purge": _PURGE,
        "evict": _EVICT,
    }
    what = "mid-term store"
    mark_name = "memory"
    held = "memory's confirmed preferences, choice observations and items"

    def __init__(self, config: RedisConfig, *, book: MarkBook | None = None) -> None:
        super().__init__(config, book=book)
        self._ns = self.config.prefix

    def _pref(self, user_id: str, name: str) -> str:
        return f"{self._ns}:pref:{{{user_id}}}:{name}"

    def _items(self, user_id: str) -> list[str]:
        return [f"{self._ns}:items:{{{user_id}}}", f"{self._ns}:items-created:{{{user_id}}}"]

    def _choices(self, user_id: str, name: str) -> list[str]:
        return [
            f"{self._ns}:choices:{{{user_id}}}:{name}",
            f"{self._ns}:choices-seq:{{{user_id}}}:{name}",
        ]

    # -- preferences --------------------------------------------------------------------

    async def put_preference(self, preference: Preference) -> None:
        p = preference
        fields = {
            "value_json": p.value_json,
            "updated_at_ms": p.updated_at_ms,
            "confirmed_by": p.confirmed_by,
            "expires_at_ms": "" if p.expires_at_ms is None else p.expires_at_ms,
        }
        key = self._pref(p.user_id, p.name)
        async with self.doing("put_preference"):
            await self.redis.hset(key, mapping=fields)  # type: ignore[arg-type]

    async def preference(
        self, user_id: str, name: str, now_ms: int | None = None
    ) -> Preference | None:
        async with self.doing("preference"):
            found: dict[Any, Any] = await self.redis.hgetall(self._pref(user_id, name))
        if not found:
            return None
        expires = int(found[b"expires_at_ms"]) if found[b"expires_at_ms"] else None
        if expires is not None and now_ms is not None and expires <= now_ms:
            return None
        return Preference(
            user_id=user_id,
            name=name,
            value_json=found[b"value_json"].decode(),
            updated_at_ms=int(found[b"updated_at_ms"]),
            confirmed_by=found[b"confirmed_by"].decode(),
            expires_at_ms=expires,
        )

    # -- choices ------------------------------------------------------------------------

    async def observe_choice(
        self,
        user_id: str,
        name: str,
        value_json: str,
        observation_id: str,
        at_ms: int,
        *,
        keep: int = CHOICE_HISTORY,
    ) -> None:
        async with self.doing("observe_choice"):
            await self.script(
                "observe",
                keys=self._choices(user_id, name),
                args=[observation_id, value_json, at_ms, keep],
            )

    async def choices(self, user_id: str, name: str) -> tuple[ChoiceCount, ...]:
        async with self.doing("choices"):
            found: dict[Any, Any] = await self.redis.hgetall(self._choices(user_id, name)[0])
        counts: dict[str, list[int]] = {}
        for raw in found.values():
            value, at, _ = orjson.loads(raw)
            seen = counts.setdefault(value, [0, at])
            seen[0] += 1
            seen[1] = max(seen[1], at)
        ordered = sorted(counts.items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0]))
        return tuple(ChoiceCount(value_json=v, count=n, last_at_ms=at) for v, (n, at) in ordered)

    # -- items --------------------------------------------------------------------------

    async def put_item(self, item: MidTermItem) -> None:
        async with self.doing("put_item"):
            await self.script(
                "put_item",
                keys=self._items(item.user_id),
                args=[item.key, item.model_dump_json(), item.created_at_ms],
            )

    async def item(self, user_id: str, key: str, now_ms: int | None = None) -> MidTermItem | None:
        items, created = self._items(user_id)
        async with self.doing("item"):
            found: Any = await self.redis.hget(items, key)
            at: Any = await self.redis.hget(created, key)
        if found is None:
            return None
        stored = _item(found, at)
        return stored if _live(stored, now_ms) else None

    async def items(self, user_id: str, now_ms: int | None = None) -> tuple[MidTermItem, ...]:
        items, created = self._items(user_id)
        async with self.doing("items"):
            found: dict[Any, Any] = await self.redis.hgetall(items)
            times: dict[Any, Any] = await self.redis.hgetall(created)
        stored = [_item(raw, times.get(key)) for key, raw in found.items()]
        return tuple(sorted((i for i in stored if _live(i, now_ms)), key=lambda i: i.key))

    async def purge_expired(self, user_id: str, now_ms: int) -> tuple[str, ...]:
        async with self.doing("purge_expired"):
            gone: list[Any] = await self.script("purge", keys=self._items(user_id), args=[now_ms])
        return tuple(k.decode() for k in gone)

    async def evict(self, user_id: str, keep: int) -> tuple[str, ...]:
        async with self.doing("evict"):
            doomed: list[Any] = await self.script("evict", keys=self._items(user_id), args=[keep])
        return tuple(k.decode() for k in doomed)


def _item(raw: bytes, created: bytes | None) -> MidTermItem:
    stored = MidTermItem.model_validate_json(raw)
    if created is None:
        return stored
    return stored.model_copy(update={"created_at_ms": int(created)})


def _live(item: MidTermItem, now_ms: int | None) -> bool:
    return item.expires_at_ms is None or now_ms is None or item.expires_at_ms > now_ms

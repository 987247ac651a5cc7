"""Redis state store: session state with a Lua compare-and-set, outbox and durable timers.

Keys (``P`` the processor, ``S`` the session, ``ns`` the configured prefix):

- ``ns:{S}:state:P`` a hash: ``version``, ``data`` (JSON), ``applied`` (JSON list of ids);
- ``ns:{S}:outbox:P`` a hash: message id -> the records it emitted, not known produced yet;
- ``ns:{S}:timers:P`` a hash: timer id -> the timer; ``ns:{S}:purposes:P``: purpose -> id.

Every key of a session carries ``{S}``, so they share one hash slot and one script writes
them atomically on Redis Cluster too. The version compare-and-set inside that script is
what fences a zombie worker that lost its partition: its stale save writes nothing.

Timers are also indexed for :meth:`RedisStateStore.due` by partition, in sorted sets under
one ``{ns:timers}`` slot (``due:P:topic:partition``, scored by due time), with ``owner``
(timer id -> where it is) and ``alive`` (the partitions' heartbeats). A timer's index entry
is written before the commit that saves it, so a timer is never saved without its entry
and none is ever missed. The entries of the timers a commit cancels or replaces are taken
out right after it; one left behind (a commit that lost its compare-and-set, a worker
gone in between) points at no timer, and ``due`` drops it when it meets it.

Scripts are loaded once and called by SHA (redis-py loads one again after NOSCRIPT).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

import orjson

from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.redis.client import RedisService
from hermesbus.connectors.redis.config import RedisConfig
from hermesbus.runtime import OutRecord, SessionState, StateChange, StoredTimer

__all__ = ["RedisStateStore"]

_SET_TIMERS_FUNCTION = """
local function set_timers(timers, purposes, wanted, removed)
  for _, timer in ipairs(wanted) do
    local old = redis.call('HGET', purposes, timer[2])
    if old and old ~= timer[1] then
      redis.call('HDEL', timers, old)
      table.insert(removed, old)
    end
    redis.call('HSET', timers, timer[1], timer[3])
    redis.call('HSET', purposes, timer[2], timer[1])
  end
  return removed
end
"""
"""One timer per session and purpose: each of ``wanted`` ([id, purpose, timer JSON])
replaces the purpose's earlier timer, whose id goes into ``removed``. Both scripts that
set timers begin with it."""

_COMMIT = (
    _SET_TIMERS_FUNCTION
    + """
local version = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if version ~= tonumber(ARGV[1]) then return {0} end
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'data', ARGV[2]) end
redis.call('HSET', KEYS[1], 'version', version + 1, 'applied', ARGV[3])
if ARGV[4] == '1' then redis.call('DEL', KEYS[2]) end
if ARGV[6] ~= '' then redis.call('HSET', KEYS[2], ARGV[5], ARGV[6]) end
local removed = {1}
for _, purpose in ipairs(cjson.decode(ARGV[7])) do
  local old = redis.call('HGET', KEYS[4], purpose)
  if old then
    redis.call('HDEL', KEYS[3], old)
    redis.call('HDEL', KEYS[4], purpose)
    table.insert(removed, old)
  end
end
return set_timers(KEYS[3], KEYS[4], cjson.decode(ARGV[8]), removed)
"""
)
"""KEYS: state, outbox, timers, purposes. ARGV: expected version, data ('' = unchanged),
applied, clear previous outbox ('1'), message id, its records ('' = none), purposes to
cancel (JSON), timers to set (JSON [[id, purpose, timer JSON], ...]). Returns {0} when the
version moved on, else {1, the ids of the timers it cancelled or replaced}."""

_INDEX = """
for i = 1, #ARGV, 3 do
  redis.call('ZADD', KEYS[(i + 2) / 3 + 1], ARGV[i + 1], ARGV[i])
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2])
end
return 1
"""
"""KEYS: owner, then one due set per timer. ARGV per timer: id, due ms, where it is (JSON
[due set, session, processor])."""

_UNINDEX = """
local where = redis.call('HGET', KEYS[1], ARGV[1])
if not where then return false end
redis.call('ZREM', cjson.decode(where)[1], ARGV[1])
redis.call('HDEL', KEYS[1], ARGV[1])
return where
"""
"""KEYS: owner. ARGV: timer id. Returns where the timer was (nil: unknown)."""

_RESUME = """
local last = redis.call('HGET', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if not last then return 0 end
local gap = tonumber(ARGV[2]) - tonumber(last)
if gap <= 0 then return 0 end
local later = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. last, '+inf', 'WITHSCORES')
for i = 1, #later, 2 do
  redis.call('ZADD', KEYS[1], tonumber(later[i + 1]) + gap, later[i])
end
return gap
"""
"""KEYS: the partition's due set, alive. ARGV: partition field, now ms. Returns the gap."""


_SET_TIMERS = (
    _SET_TIMERS_FUNCTION + "return set_timers(KEYS[1], KEYS[2], cjson.decode(ARGV[1]), {})"
)
"""KEYS: timers, purposes. ARGV: the timers (as in the commit). Returns the replaced ids."""

_DROP_TIMER = """
local body = redis.call('HGET', KEYS[1], ARGV[1])
if not body then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
local purpose = cjson.decode(body)['purpose']
if redis.call('HGET', KEYS[2], purpose) == ARGV[1] then redis.call('HDEL', KEYS[2], purpose) end
return 1
"""
"""KEYS: timers, purposes. ARGV: timer id."""


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode()


def _unb64(value: str | None) -> bytes | None:
    return None if value is None else base64.b64decode(value)


def _record_json(record: OutRecord) -> list[Any]:
    headers = [[k, _b64(v)] for k, v in record.headers]
    return [record.topic, record.partition, _b64(record.key), _b64(record.value), headers]


def _record(row: Sequence[Any]) -> OutRecord:
    topic, partition, key, value, headers = row
    pairs = tuple((k, _unb64(v) or b"") for k, v in headers)
    return OutRecord(topic, _unb64(key), _unb64(value) or b"", pairs, partition)


class RedisStateStore(RedisService):
    """The :class:`~hermesbus.runtime.StateStore` on Redis (``HERMES_REDIS_URL``)."""

    scripts: ClassVar[Mapping[str, str]] = {
        "commit": _COMMIT,
        "index": _INDEX,
        "unindex": _UNINDEX,
        "resume": _RESUME,
        "set_timers": _SET_TIMERS,
        "drop_timer": _DROP_TIMER,
    }
    what = "state store"
    mark_name = "state"
    held = "every session's state, outboxes and timers (sessions in flight cannot go on)"

    def __init__(self, config: RedisConfig, *, book: MarkBook | None = None) -> None:
        super().__init__(config, book=book)
        self._ns = self.config.prefix

    async def close(self) -> None:
        await self.stop()

    # -- keys ---------------------------------------------------------------------------

    def _session(self, kind: str, processor: str, session_id: str) -> str:
        return f"{self._ns}:{{{session_id}}}:{kind}:{processor}"

    def _session_keys(self, processor: str, session_id: str) -> list[str]:
        kinds = ("state", "outbox", "timers", "purposes")
        return [self._session(kind, processor, session_id) for kind in kinds]

    @property
    def _owner(self) -> str:
        return f"{self._ns}:{{{self._ns}:timers}}:owner"

    @property
    def _alive(self) -> str:
        return f"{self._ns}:{{{self._ns}:timers}}:alive"

    def _due_set(self, processor: str, topic: str, partition: int) -> str:
        return f"{self._ns}:{{{self._ns}:timers}}:due:{processor}:{topic}:{partition}"

    # -- the StateStore protocol ----------------------------------------------------------

    async def load(self, processor: str, session_id: str) -> SessionState:
        key = self._session("state", processor, session_id)
        async with self.doing("load"):
            found: list[Any] = await self.redis.hmget(key, ["version", "data", "applied"])
        version, data, applied = found
        if version is None or data is None:
            return SessionState()
        return SessionState(
            int(version), MappingProxyType(orjson.loads(data)), tuple(orjson.loads(applied))
        )

    async def commit(self, processor: str, session_id: str, change: StateChange) -> bool:
        keep = not change.data_changed and change.expected_version > 0
        data = b"" if keep else orjson.dumps(dict(change.data), option=orjson.OPT_NON_STR_KEYS)
        outbox = b""
        if change.outbox:
            outbox = orjson.dumps([_record_json(r) for r in change.outbox])
        timers = [
            [t.timer_id, t.purpose, orjson.dumps(self._timer_json(t)).decode()]
            for t in change.timers
        ]
        async with self.doing("commit"):
            if change.timers:  # indexed first: a timer is never saved without its entry
                await self._index(change.timers)
            result = await self.script(
                "commit",
                keys=self._session_keys(processor, session_id),
                args=[
                    change.expected_version,
                    data,
                    orjson.dumps(change.applied),
                    "1" if change.clear_previous else "0",
                    change.message_id,
                    outbox,
                    orjson.dumps(list(change.cancel)),
                    orjson.dumps(timers),
                ],
            )
            moved, *removed = result
            await self._unindex(removed)  # their index entries too (else dropped when due)
        if not moved:  # a rival worker, or a store that came back empty: read the mark first
            self.marks.suspect()
        return bool(moved)

    async def outbox(self, processor: str, session_id: str, message_id: str) -> list[OutRecord]:
        key = self._session("outbox", processor, session_id)
        async with self.doing("outbox"):
            found = await self.redis.hget(key, message_id)
        return [] if found is None else [_record(row) for row in orjson.loads(found)]

    async def clear_outbox(self, processor: str, session_id: str, message_id: str) -> None:
        key = self._session("outbox", processor, session_id)
        async with self.doing("clear_outbox"):
            await self.redis.hdel(key, message_id)

    async def schedule(self, timer: StoredTimer) -> None:
        """Insert or replace ``timer`` (one per session and purpose), outside a commit."""
        keys = self._session_keys(timer.processor, timer.session_id)
        body = [[timer.timer_id, timer.purpose, orjson.dumps(self._timer_json(timer)).decode()]]
        async with self.doing("schedule"):
            await self._index([timer])
            replaced = await self.script(
                "set_timers", keys=[keys[2], keys[3]], args=[orjson.dumps(body)]
            )
            await self._unindex(replaced)

    async def due(
        self, processor: str, partitions: Sequence[tuple[str, int]], now_ms: int, limit: int
    ) -> list[StoredTimer]:
        if not partitions or limit <= 0:
            return []
        async with self.doing("due"):
            entries: list[tuple[float, bytes]] = []
            for topic, partition in partitions:
                found: list[Any] = await self.redis.zrangebyscore(
                    self._due_set(processor, topic, partition),
                    "-inf",
                    now_ms,
                    start=0,
                    num=limit,
                    withscores=True,
                )
                entries += [(score, member) for member, score in found]
            entries.sort()
            timers = []
            for score, member in entries[:limit]:
                timer = await self._timer(member.decode(), int(score))
                if timer is not None:
                    timers.append(timer)
        return timers

    async def delete_timer(self, timer_id: str) -> None:
        async with self.doing("delete_timer"):
            await self._drop(timer_id)

    async def heartbeat(
        self, processor: str, partitions: Sequence[tuple[str, int]], now_ms: int
    ) -> None:
        if not partitions:
            return
        fields = {_alive_field(processor, t, p): now_ms for t, p in partitions}
        async with self.doing("heartbeat"):
            await self.redis.hset(self._alive, mapping=fields)  # type: ignore[arg-type]

    async def resume(self, processor: str, topic: str, partition: int, now_ms: int) -> int:
        async with self.doing("resume"):
            gap = await self.script(
                "resume",
                keys=[self._due_set(processor, topic, partition), self._alive],
                args=[_alive_field(processor, topic, partition), now_ms],
            )
        return int(gap)

    # -- timers -------------------------------------------------------------------------

    def _timer_json(self, timer: StoredTimer) -> dict[str, Any]:
        return {
            "processor": timer.processor,
            "session": timer.session_id,
            "purpose": timer.purpose,
            "due": timer.due_at_ms,
            "record": _record_json(timer.record),
        }

    async def _index(self, timers: Sequence[StoredTimer]) -> None:
        keys: list[str] = [self._owner]
        args: list[Any] = []
        for timer in timers:
            topic, partition = timer.record.topic, timer.record.partition or 0
            due_set = self._due_set(timer.processor, topic, partition)
            keys.append(due_set)
            where = orjson.dumps([due_set, timer.session_id, timer.processor])
            args += [timer.timer_id, timer.due_at_ms, where]
        await self.script("index", keys=keys, args=args)

    async def _timer(self, timer_id: str, due_ms: int) -> StoredTimer | None:
        """The indexed timer, due at its entry's score (moved by ``resume``); an entry
        whose timer is gone (cancelled, replaced, its commit lost) is dropped."""
        where = await self.redis.hget(self._owner, timer_id)
        body = None
        if where is not None:
            _, session, processor = orjson.loads(where)
            body = await self.redis.hget(self._session("timers", processor, session), timer_id)
        if body is None:
            await self.script("unindex", keys=[self._owner], args=[timer_id])
            return None
        found = orjson.loads(body)
        return StoredTimer(
            timer_id,
            found["processor"],
            found["session"],
            found["purpose"],
            due_ms,
            _record(found["record"]),
        )

    async def _drop(self, timer_id: str) -> None:
        where = await self.script("unindex", keys=[self._owner], args=[timer_id])
        if where is None:
            return
        _, session, processor = orjson.loads(where)
        keys = self._session_keys(processor, session)
        await self.script("drop_timer", keys=[keys[2], keys[3]], args=[timer_id])

    async def _unindex(self, timer_ids: Sequence[bytes | str]) -> None:
        for timer_id in timer_ids:
            await self.script("unindex", keys=[self._owner], args=[timer_id])


def _alive_field(processor: str, topic: str, partition: int) -> str:
    return orjson.dumps([processor, topic, partition]).decode()

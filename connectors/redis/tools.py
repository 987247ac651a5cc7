"""Redis tool store: the tool processor's specs, its released results (the idempotency
keys, and the cache its ``cache`` fallback answers from, ``stale_after`` checked by the
processor), call samples and probes (the ``ToolStore`` Protocol), shared by every worker.

Every key is under the ``{ns:tools}`` hash slot (tools are few and shared by all
sessions), so the scripts work on Redis Cluster:

- ``specs`` a hash, name -> spec; ``probes`` a hash, tool -> the latest probe;
- ``results`` a hash, idempotency key -> ``{tool, digest, at, result}``, with
  ``results-by-time`` (key scored by envelope time, for pruning) and ``args:TOOL:DIGEST``
  (keys scored by time: the newest is the cache's answer);
- ``calls:TOOL`` a list of the latest call samples, newest first;
- ``admitted:TOOL:USER`` a sorted set of the calls admitted for a user (idempotency key
  scored by envelope time), for the tool's rate limit and quota, and
  ``admitted-kept:TOOL:USER`` the same keys scored by when they were kept (forgotten after
  ``KEEP_ADMITTED_MS``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import orjson

from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.redis.client import RedisService
from hermesbus.connectors.redis.config import RedisConfig
from hermesbus.contract.payloads import ToolResult
from hermesbus.processors.tool import (
    KEEP_ADMITTED_MS,
    CallStats,
    Probe,
    StoredResult,
    ToolSpec,
    Window,
    spec_from_json,
)

__all__ = ["RedisToolStore"]

KEEP_CALLS = 1000
"""Call samples kept per tool, as the SQLite store keeps them."""

_PUT_RESULT = """
local function forget(key)
  local old = redis.call('HGET', KEYS[1], key)
  if not old then return end
  local was = cjson.decode(old)
  redis.call('ZREM', ARGV[6] .. was['tool'] .. ':' .. was['digest'], key)
  redis.call('ZREM', KEYS[2], key)
  redis.call('HDEL', KEYS[1], key)
end
if ARGV[5] ~= '' then
  for _, key in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[5])) do
    forget(key)
  end
end
forget(ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('ZADD', ARGV[6] .. ARGV[4], ARGV[3], ARGV[1])
return 1
"""
"""KEYS: results, results-by-time. ARGV: key, the stored JSON, at ms, 'tool:digest',
prune before ms ('' = none), the args sets' prefix (those sets are named in the script,
all in the same ``{ns:tools}`` slot as its KEYS, so Redis Cluster runs it on one node).
A key stored again replaces its old entry (in the args set too); results timed before
the bound go first."""


_REPLACE_SPEC = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  return 1
end
return 0
"""
"""Compare-and-set of one spec: KEYS[1] the specs hash; ARGV name, expected, new."""


_ADMIT_CALL = """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return '' end
for _, old in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[4])) do
  redis.call('ZREM', KEYS[1], old)
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[4])
local count = tonumber(ARGV[5])
for i = 0, count - 1 do
  local base = 6 + i * 4
  local held = redis.call('ZCOUNT', KEYS[1], ARGV[base + 1], '(' .. ARGV[base + 2])
  if held >= tonumber(ARGV[base + 3]) then return ARGV[base] end
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
local life = ARGV[6 + count * 4]
redis.call('PEXPIRE', KEYS[1], life)
redis.call('PEXPIRE', KEYS[2], life)
return ''
"""
"""Count one call at once: KEYS[1] the user's admitted calls of the tool (key scored by
envelope time), KEYS[2] the same keys scored by when this store kept them (what is
forgotten goes by that clock, never by an envelope's). ARGV: key, at ms, now ms (the
processor's clock), forget what was kept before this (ms), the number of windows, then
per window its name, since ms, until ms (excluded) and limit; last, how long a call is
kept, in ms. Returns the first full window's name, '' when admitted (or admitted
before)."""


class RedisToolStore(RedisService):
    """The :class:`~hermesbus.processors.tool.ToolStore` on Redis (``HERMES_REDIS_URL``)."""

    scripts: ClassVar[Mapping[str, str]] = {
        "put_result": _PUT_RESULT,
        "replace_spec": _REPLACE_SPEC,
        "admit_call": _ADMIT_CALL,
    }
    what = "tool store"
    mark_name = "tools"
    held = (
        "the tool registry (every registered tool: calls answer 'not registered'), "
        "released results, call samples and probes"
    )

    def __init__(self, config: RedisConfig, *, book: MarkBook | None = None) -> None:
        super().__init__(config, book=book)
        self._slot = f"{self.config.prefix}:{{{self.config.prefix}:tools}}"

    @property
    def where(self) -> str:
        return f"Redis at {self.config.shown_url} (keys {self._slot}:*)"

    def _key(self, name: str) -> str:
        return f"{self._slot}:{name}"

    # -- specs --------------------------------------------------------------------------

    async def save_spec(self, spec: ToolSpec) -> None:
        async with self.doing("save_spec"):
            await self.redis.hset(self._key("specs"), spec.name, spec.model_dump_json())

    async def replace_spec(self, expected: ToolSpec, spec: ToolSpec) -> bool:
        async with self.doing("replace_spec"):
            done = await self.script(
                "replace_spec",
                keys=[self._key("specs")],
                args=[spec.name, expected.model_dump_json(), spec.model_dump_json()],
            )
        return bool(done)

    async def get_spec(self, name: str) -> ToolSpec | None:
        async with self.doing("get_spec"):
            found: Any = await self.redis.hget(self._key("specs"), name)
        return None if found is None else spec_from_json(found)

    async def list_specs(self) -> list[ToolSpec]:
        async with self.doing("list_specs"):
            found: dict[Any, Any] = await self.redis.hgetall(self._key("specs"))
        return [spec_from_json(found[name]) for name in sorted(found)]

    # -- calls admitted per user (rate limits and quotas) --------------------------------

    async def admit_call(
        self, tool: str, user: str, key: str, at_ms: int, windows: Sequence[Window]
    ) -> str | None:
        limits = [str(value) for window in windows for value in window]
        now_ms = int(time.time() * 1000)  # what is forgotten goes by this clock
        before = now_ms - KEEP_ADMITTED_MS
        args = [key, str(at_ms), str(now_ms), str(before), str(len(windows)), *limits]
        counted = self._key(f"admitted:{tool}:{user}")  # the user's id may hold ':': the two
        kept = self._key(f"admitted-kept:{tool}:{user}")  # sets differ before it, never after
        async with self.doing("admit_call"):
            full = await self.script(
                "admit_call", keys=[counted, kept], args=[*args, str(KEEP_ADMITTED_MS)]
            )
        name = full.decode() if isinstance(full, bytes) else str(full or "")
        return name or None

    # -- results ------------------------------------------------------------------------

    async def put_result(
        self, key: str, digest: str, stored: StoredResult, prune_before_ms: int | None = None
    ) -> None:
        tool = stored.result.tool
        value = orjson.dumps(
            {
                "tool": tool,
                "digest": digest,
                "at": stored.at_ms,
                "result": stored.result.model_dump_json(),
            }
        )
        prune = "" if prune_before_ms is None else prune_before_ms
        async with self.doing("put_result"):
            await self.script(
                "put_result",
                keys=[self._key("results"), self._key("results-by-time")],
                args=[key, value, stored.at_ms, f"{tool}:{digest}", prune, self._key("args:")],
            )

    async def get_result(self, key: str) -> StoredResult | None:
        async with self.doing("get_result"):
            found: Any = await self.redis.hget(self._key("results"), key)
        return None if found is None else _stored(found)

    async def last_result(self, tool: str, digest: str) -> StoredResult | None:
        async with self.doing("last_result"):
            newest: list[Any] = await self.redis.zrevrange(self._key(f"args:{tool}:{digest}"), 0, 0)
            if not newest:
                return None
            found: Any = await self.redis.hget(self._key("results"), newest[0])
        return None if found is None else _stored(found)

    # -- calls and probes ---------------------------------------------------------------

    async def record_call(self, tool: str, at_ms: int, latency_ms: float, ok: bool) -> None:
        key = self._key(f"calls:{tool}")
        async with self.doing("record_call"):
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.lpush(key, orjson.dumps([at_ms, latency_ms, ok]))
                pipe.ltrim(key, 0, KEEP_CALLS - 1)
                await pipe.execute()

    async def call_stats(self, tool: str, window: int) -> CallStats | None:
        async with self.doing("call_stats"):
            found: list[Any] = await self.redis.lrange(
                self._key(f"calls:{tool}"), 0, max(0, window - 1)
            )
        if not found or window <= 0:
            return None
        samples = [orjson.loads(raw) for raw in found]
        ok = sum(1 for _, _, good in samples if good)
        latency = sum(ms for _, ms, _ in samples) / len(samples)
        return CallStats(len(samples), ok / len(samples), latency)

    async def save_probe(self, tool: str, probe: Probe) -> None:
        value = orjson.dumps(
            [
                probe.latency_ms,
                probe.success_rate,
                probe.quota_remaining,
                probe.checked_at_ms,
                probe.error,
            ]
        )
        async with self.doing("save_probe"):
            await self.redis.hset(self._key("probes"), tool, value)

    async def get_probe(self, tool: str) -> Probe | None:
        async with self.doing("get_probe"):
            found: Any = await self.redis.hget(self._key("probes"), tool)
        return None if found is None else Probe(*orjson.loads(found))


def _stored(raw: bytes) -> StoredResult:
    found = orjson.loads(raw)
    return StoredResult(
        ToolResult.model_validate_json(found["result"]), found["at"], found["digest"]
    )

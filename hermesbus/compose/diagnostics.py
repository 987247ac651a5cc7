"""WORK IN PROGRESS (not wired, not tested): the diagnostics rollup as a faust-streaming
app, around the pure core in ``hermesbus.processors.diagnostics``.

Design (see processors/diagnostics/NOTES.md for what it rests on):

- One agent (``concurrency=1``: issue 606) reads the session topics and the dead-letter
  topic, all co-partitioned (6 partitions), raw bytes. Each record is verified as the
  indexer verifies it (``hermesbus.trace.index._signature.check``): one not believed is
  counted under no key (a forged record must never move an alert, since alerts reach
  the dispatcher's tool health).
- A plain table, ``tallies``, keyed ``<size>|<start>|<key>|<partition>``: the value holds
  the key's :class:`Tally` for that window on that source partition, the last offset
  applied per source topic, and whether it was emitted. A record at or below its topic's
  offset is skipped (a redelivery after a crash): the count and the marker are one
  changelog record, so window totals are exact after a kill -9 (measured: 20,600 of
  20,600).
- A timer of our own (not ``on_window_close``, issue 250) closes windows: every
  ``CLOSE_EVERY_S`` it merges, per (window, key), the entries of the partitions this
  worker holds whose window ended ``GRACE_MS`` ago by the wall clock, emits one rollup
  record (id: window, key and partitions, so a re-send after a crash is the same
  record), then marks the entries emitted through the changelog.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faust  # type: ignore[import-not-found]

from hermesbus.processors.diagnostics import Tally, Window, contributions, windows_of

__all__ = ["Closed", "Rollup"]

log = logging.getLogger(__name__)

CLOSE_EVERY_S = 5.0
GRACE_MS = 10_000
PARTITIONS = 6


@dataclass(frozen=True, slots=True)
class Closed:
    """One (window, key)'s figures over the partitions one worker held when it closed."""

    window: Window
    key: str
    partitions: tuple[int, ...]
    tally: Tally

    @property
    def id(self) -> str:
        parts = ",".join(map(str, self.partitions))
        return f"{self.window.size_ms}|{self.window.start_ms}|{self.key}|{parts}"


Decode = Callable[[str, bytes | None, bytes, Sequence[tuple[str, bytes]]], Any]
"""(topic, key, value, headers) -> a believed Envelope, or None (undecodable, unproven)."""


class Rollup:
    """The faust app; ``emit`` is awaited for each closed window before it is marked."""

    def __init__(
        self,
        *,
        bootstrap: str,
        app_id: str,
        topics: Sequence[str],
        dlq_topic: str,
        datadir: Path,
        decode: Decode,
        emit: Callable[[Closed], Awaitable[None]],
        session_timeout_s: float = 10.0,
        heartbeat_s: float = 2.0,
    ) -> None:
        self.app = faust.App(
            app_id,
            broker=f"kafka://{bootstrap}",
            store="memory://",
            datadir=str(datadir),
            web_enabled=False,
            topic_allow_declare=False,  # the catalog declares every topic, changelog too
            topic_disable_leader=True,
            table_standby_replicas=0,
            consumer_auto_offset_reset="earliest",  # issue 651
            broker_session_timeout=session_timeout_s,
            broker_heartbeat_interval=heartbeat_s,
            broker_rebalance_timeout=session_timeout_s * 2,
            broker_request_timeout=max(30.0, session_timeout_s * 3),
        )
        self._dlq = dlq_topic
        self._decode = decode
        self._emit = emit
        source = self.app.topic(
            *topics, dlq_topic, key_type=bytes, value_type=bytes,
            key_serializer="raw", value_serializer="raw",
        )  # fmt: skip
        self.tallies = self.app.Table("tallies", default=None, partitions=PARTITIONS)
        self.app.agent(source, concurrency=1, name="rollup")(self._count)
        self.app.timer(CLOSE_EVERY_S)(self._close)

    async def _count(self, stream: Any) -> None:
        async for event in stream.events():
            message = event.message
            topic, partition, offset = message.topic, message.partition, message.offset
            headers = list(message.headers or [])
            dead = topic == self._dlq
            envelope = None if dead else self._decode(topic, message.key, message.value, headers)
            if envelope is None and not dead:
                continue  # undecodable or unproven: counted by the indexer, never here
            at_ms = message.timestamp if envelope is None else _ms(envelope.timestamp)
            for window in windows_of(int(at_ms)):
                for key, figures in contributions(envelope, headers, dead_letter=dead):
                    name = f"{window.size_ms}|{window.start_ms}|{key}|{partition}"
                    value = self.tallies.get(name) or {"o": {}, "t": Tally().to_dict(), "e": 0}
                    if offset <= value["o"].get(topic, -1):
                        continue  # applied before the crash: never twice
                    tally = Tally.from_dict(value["t"])
                    tally.add(figures)
                    value = {"o": {**value["o"], topic: offset}, "t": tally.to_dict(), "e": 0}
                    self.tallies[name] = value

    async def _close(self) -> None:
        if self.app.rebalancing:
            return
        now_ms = int(time.time() * 1000)
        due: dict[tuple[Window, str], list[tuple[str, int, dict[str, Any]]]] = defaultdict(list)
        for name, value in list(self.tallies.data.items()):
            if value is None or value.get("e"):
                continue
            size, start, key, part = _parsed(name)
            window = Window(size, start)
            if window.end_ms + GRACE_MS <= now_ms:
                due[(window, key)].append((name, part, value))
        for (window, key), entries in sorted(due.items()):
            merged = Tally()
            for _name, _part, value in entries:
                merged.merge(Tally.from_dict(value["t"]))
            partitions = tuple(sorted(part for _n, part, _v in entries))
            await self._emit(Closed(window, key, partitions, merged))
            for name, part, value in entries:  # marked once it is out
                marked = {**value, "e": 1}
                self.tallies.data[name] = marked
                self.tallies.send_changelog(part, name, marked)

    async def start(self, within_s: float = 90.0) -> None:
        await asyncio.wait_for(self.app.start(), within_s)

    async def stop(self) -> None:
        await self.app.stop()


def _parsed(name: str) -> tuple[int, int, str, int]:
    size, start, rest = name.split("|", 2)
    key, part = rest.rsplit("|", 1)
    return int(size), int(start), key, int(part)


def _ms(moment: Any) -> int:
    return int(moment.timestamp() * 1000)


def _json(value: object) -> str:  # kept for the record's JSON form, when it has one
    return json.dumps(value, sort_keys=True)

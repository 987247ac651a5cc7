"""Frequent paths (document 000 §2): each flow version counts its completed sessions by the
states they went through, and a state may preload a default once that count is high.

The count reaches the conversation's handler through a port (``ports["paths"]``): live,
:class:`StorePaths` keeps it in the state store (SQLite, or Redis when configured), per
flow version, each completed session counted once; the count a state was entered with is
recorded in its state snapshot (``context["path_count"]``), and in a replay
:class:`RecordedPaths` answers that recorded count, so the replay preloads as the run did.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from hermesbus.contract.envelope import Envelope
from hermesbus.contract.payloads import StateSnapshot
from hermesbus.runtime import StateChange, StateStore

__all__ = [
    "PATHS_NAMESPACE",
    "PATHS_PORT",
    "PATH_COUNT",
    "MemoryPaths",
    "PathCounts",
    "RecordedPaths",
    "StorePaths",
]

log = logging.getLogger(__name__)

PATHS_PORT: Final = "paths"
PATH_COUNT: Final = "path_count"
"""The state snapshot's context key: how many completed sessions of its flow version had
gone through the state when it was entered (states that preload only)."""
PATHS_NAMESPACE: Final = "conversation.paths"
"""The state store's namespace of the counts (one entry per flow version)."""
_RECENT: Final = 256
"""Completions remembered per flow version, so one counted twice (a redelivery of the
input that ended it) is not: a redelivery after 256 other completions is counted again."""
_TRIES: Final = 64


class PathCounts(Protocol):
    """``ports["paths"]``: completed sessions per flow version and state."""

    async def count(self, flow: str, version: int, state: str) -> int:
        """How many completed sessions of that version went through ``state``."""
        ...

    async def completed(self, flow: str, version: int, path: Sequence[str], run: str) -> None:
        """A session of that version completed through the states ``path`` (once each);
        ``run`` names the completion (the id of the input that ended it)."""
        ...


def _key(flow: str, version: int) -> str:
    return f"{flow}:{version}"


class StorePaths:
    """The counts in a state store: one entry per flow version, written with the store's
    compare-and-set (other instances count too), the latest sessions kept with it."""

    def __init__(self, store: StateStore) -> None:
        self._store = store

    async def count(self, flow: str, version: int, state: str) -> int:
        saved = await self._store.load(PATHS_NAMESPACE, _key(flow, version))
        states = saved.data.get("states", {})
        return int(states.get(state, 0)) if isinstance(states, dict) else 0

    async def completed(self, flow: str, version: int, path: Sequence[str], run: str) -> None:
        """Counted with the store's compare-and-set; lost races are tried again (with a
        growing pause), and a count still contended after that is dropped with a warning:
        a frequent path is a statistic, never a reason to hold a session."""
        key = _key(flow, version)
        for attempt in range(_TRIES):
            saved = await self._store.load(PATHS_NAMESPACE, key)
            if run in saved.applied:
                return
            states = dict(saved.data.get("states", {}))
            for state in dict.fromkeys(path):
                states[state] = int(states.get(state, 0)) + 1
            change = StateChange(
                expected_version=saved.version,
                message_id=run,
                data={"states": states},
                applied=(*saved.applied, run)[-_RECENT:],
            )
            if await self._store.commit(PATHS_NAMESPACE, key, change):
                return
            await asyncio.sleep(random.uniform(0, 0.002 * (attempt + 1)))  # noqa: S311
        log.warning("the path counts of %s kept changing: completion %s not counted", key, run)


@dataclass
class MemoryPaths:
    """The counts in memory (the in-memory bus, tests)."""

    states: dict[tuple[str, int, str], int] = field(default_factory=dict)
    sessions: set[tuple[str, int, str]] = field(default_factory=set)

    @classmethod
    def as_recorded(cls, recorded: Iterable[Envelope]) -> MemoryPaths:
        """Counts that start where the recorded sessions found them (a redrive): each flow
        version's state at the count the first recorded snapshot of it was entered with,
        then counted in memory as the redrive's sessions complete."""
        states: dict[tuple[str, int, str], int] = {}
        for envelope in recorded:
            body = envelope.payload.body
            count: Any = envelope.payload.context.get(PATH_COUNT)
            if not isinstance(body, StateSnapshot) or not isinstance(count, int):
                continue
            snapshot = body.snapshot
            if snapshot.flow is not None and snapshot.flow_version is not None:
                states.setdefault((snapshot.flow, snapshot.flow_version, snapshot.state_id), count)
        return cls(states)

    async def count(self, flow: str, version: int, state: str) -> int:
        return self.states.get((flow, version, state), 0)

    async def completed(self, flow: str, version: int, path: Sequence[str], run: str) -> None:
        if (flow, version, run) in self.sessions:
            return
        self.sessions.add((flow, version, run))
        for state in dict.fromkeys(path):
            self.states[(flow, version, state)] = self.states.get((flow, version, state), 0) + 1


class RecordedPaths:
    """The counts in a replay: what the conversation's state snapshots recorded for the
    envelope being replayed (0 where it recorded none); nothing is counted."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def cue(self, recorded: Iterable[Envelope]) -> None:
        """What the conversation emitted then for the envelope about to be replayed."""
        self._counts = {}
        for envelope in recorded:
            body = envelope.payload.body
            count: Any = envelope.payload.context.get(PATH_COUNT)
            if isinstance(body, StateSnapshot) and isinstance(count, int):
                self._counts[body.snapshot.state_id] = count

    async def count(self, flow: str, version: int, state: str) -> int:
        return self._counts.get(state, 0)

    async def completed(self, flow: str, version: int, path: Sequence[str], run: str) -> None:
        return None

"""The tool processor's store port: specs, released results, call samples and probes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple, Protocol

from hermesbus.contract.payloads import ToolResult
from hermesbus.processors.tool._spec import ToolSpec

__all__ = ["KEEP_ADMITTED_MS", "CallStats", "Probe", "StoredResult", "ToolStore", "Window"]


@dataclass(frozen=True, slots=True)
class Probe:
    """A probe's answer (what ``/health`` says); ``checked_at_ms`` is wall-clock time."""

    latency_ms: float
    success_rate: float
    quota_remaining: int | None
    checked_at_ms: int
    error: str = ""


@dataclass(frozen=True, slots=True)
class CallStats:
    """The latest calls of a tool: how many, the share that did not fail, mean latency."""

    count: int
    success_rate: float
    avg_latency_ms: float


@dataclass(frozen=True, slots=True)
class StoredResult:
    """A released successful result, the envelope time of the call that produced it and
    the digest of its arguments (filled in by the store on reads)."""

    result: ToolResult
    at_ms: int
    digest: str = ""


class Window(NamedTuple):
    """A limit on one user's calls of a tool: at most ``limit`` admitted calls timed in
    ``[since_ms, until_ms)``; ``name`` is the refusal when it is full."""

    name: str
    since_ms: int
    until_ms: int
    limit: int


KEEP_ADMITTED_MS: Final = 32 * 24 * 3600 * 1000
"""How long an admitted call is kept (the longest window is a calendar month)."""


class ToolStore(Protocol):
    """Where specs, results (idempotency and cache), call samples and probes persist."""

    async def save_spec(self, spec: ToolSpec) -> None:
        """Insert or replace the spec of ``spec.name``."""
        ...

    async def replace_spec(self, expected: ToolSpec, spec: ToolSpec) -> bool:
        """Store ``spec`` only if the stored spec of its name is still ``expected`` (as read
        before): False, and nothing changed, when another writer changed it meanwhile (an
        approval and a processor recording what a server offers never undo each other)."""
        ...

    async def get_spec(self, name: str) -> ToolSpec | None: ...

    async def list_specs(self) -> list[ToolSpec]:
        """Every spec, by name."""
        ...

    async def put_result(
        self, key: str, digest: str, stored: StoredResult, prune_before_ms: int | None = None
    ) -> None:
        """Keep a successful result under its idempotency key and (tool, arguments digest);
        results stored at an envelope time before ``prune_before_ms`` are deleted."""
        ...

    async def get_result(self, key: str) -> StoredResult | None:
        """The result stored under the idempotency key (whatever its tool), if any; the
        caller compares its tool and digest before using it."""
        ...

    async def last_result(self, tool: str, digest: str) -> StoredResult | None:
        """The newest successful result of the tool for these arguments."""
        ...

    async def record_call(self, tool: str, at_ms: int, latency_ms: float, ok: bool) -> None: ...

    async def call_stats(self, tool: str, window: int) -> CallStats | None:
        """Stats of the latest ``window`` calls; None when the tool was never called."""
        ...

    async def admit_call(
        self, tool: str, user: str, key: str, at_ms: int, windows: Sequence[Window]
    ) -> str | None:
        """Count a call of ``tool`` by ``user`` at ``at_ms`` against ``windows``, at once
        (one writer at a time): the name of the first window already full (nothing is
        counted), else None, and the call is kept under ``key``. A key kept before (for
        that tool and user) is admitted again without counting. Calls kept longer than
        :data:`KEEP_ADMITTED_MS` by the store's own clock may be forgotten (never by an
        envelope's time, which an app sets)."""
        ...

    async def save_probe(self, tool: str, probe: Probe) -> None: ...

    async def get_probe(self, tool: str) -> Probe | None: ...

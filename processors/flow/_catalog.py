"""Which flow versions exist, as the processors ask: a port, and the machine the dispatcher
checks snapshots against.

The conversation asks the catalog which flows a new session may start in (the newest
version of each registered at or before the turn's time, so a replay decides the same),
and both the conversation and the dispatcher ask it for the version a session runs.
Versions are immutable: an answer for a version never changes once it is known.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, Protocol

from hermesbus.processors.flow._spec import FlowSpec, ParallelAction
from hermesbus.processors.protocol import MAX_BUDGET_FACTOR, FlowMachine

__all__ = ["FLOWS_PORT", "FlowCatalog", "PinnedCatalog", "StaticCatalog", "machine_of"]

FLOWS_PORT: Final = "flows"
"""The port name of the flow catalog (the conversation's and the dispatcher's)."""


class FlowCatalog(Protocol):
    """``ports["flows"]``: the registered flow versions."""

    async def version(self, flow: str, version: int) -> FlowSpec | None:
        """That version of that flow; None when it is not registered (after the catalog
        has caught up with the registry)."""
        ...

    async def current(self, at_ms: int) -> Mapping[str, FlowSpec]:
        """Flow id -> its newest version registered at or before ``at_ms`` (epoch ms)."""
        ...


@dataclass
class StaticCatalog:
    """A catalog over given specs (tests, the in-memory bus): each registered at
    ``registered_at_ms`` (default: always)."""

    specs: list[tuple[FlowSpec, int]] = field(default_factory=list)

    @classmethod
    def of(cls, specs: Iterable[FlowSpec], registered_at_ms: int = 0) -> StaticCatalog:
        return cls([(spec, registered_at_ms) for spec in specs])

    def add(self, spec: FlowSpec, registered_at_ms: int = 0) -> None:
        self.specs.append((spec, registered_at_ms))

    async def version(self, flow: str, version: int) -> FlowSpec | None:
        return next((s for s, _ in self.specs if s.flow == flow and s.version == version), None)

    async def current(self, at_ms: int) -> Mapping[str, FlowSpec]:
        newest: dict[str, FlowSpec] = {}
        for spec, registered in self.specs:
            kept = newest.get(spec.flow)
            if registered <= at_ms and (kept is None or spec.version > kept.version):
                newest[spec.flow] = spec
        return newest


@dataclass(frozen=True, slots=True)
class PinnedCatalog:
    """Another catalog with every flow pinned to version ``pinned`` (where the flow has
    it): a replay of recorded sessions against that version (``replay --flow-version``)."""

    inner: FlowCatalog
    pinned: int

    async def version(self, flow: str, version: int) -> FlowSpec | None:
        return await self.inner.version(flow, self.pinned) or await self.inner.version(
            flow, version
        )

    async def current(self, at_ms: int) -> Mapping[str, FlowSpec]:
        flows = dict(await self.inner.current(at_ms))
        for flow in flows:
            spec = await self.inner.version(flow, self.pinned)
            if spec is not None:
                flows[flow] = spec
        return flows


def machine_of(spec: FlowSpec) -> FlowMachine:
    """A spec's machine: a new session enters ``start``; transitions (but those that stay)
    and exception exits are the moves; a state's budget is its own ``timeout_ms`` (else
    the flow's), or a parallel group's when larger, times :data:`MAX_BUDGET_FACTOR`; an
    agent state's tools are the only ones its model rounds may offer and run."""
    pairs: set[tuple[str | None, str]] = {(None, spec.start)}
    pairs |= {(move.source, move.to) for move in spec.transitions if move.to is not None}
    pairs |= {(state.id, state.exit) for state in spec.states if state.exit}
    budgets = {}
    for state in spec.states:
        groups = [a.parallel.budget_ms for a in state.on_enter if isinstance(a, ParallelAction)]
        budgets[state.id] = MAX_BUDGET_FACTOR * max([spec.budget_of(state.id), *groups])
    agents = {s.id: frozenset(s.agent.tools) for s in spec.states if s.agent is not None}
    return FlowMachine(
        f"flow {spec.flow} v{spec.version}",
        frozenset(s.id for s in spec.states),
        frozenset(pairs),
        MappingProxyType(budgets),
        MappingProxyType(agents),
    )

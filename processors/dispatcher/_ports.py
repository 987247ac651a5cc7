"""The dispatcher's ports: live tool health and processors' backlogs (read) and the
violation counter (written).

``dispatcher_ports`` builds the mapping the runtime injects as ``HandlerInput.ports``.
The counter is in-process and only for totals the stack prints; the authoritative
counts are in the session state, so a replay that double-counts here changes nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from hermesbus.errors import ConfigError
from hermesbus.processors.flow import FLOWS_PORT, FlowCatalog
from hermesbus.processors.protocol import AccessView, BacklogView, HealthView, ToolHealth

__all__ = [
    "ACCESS_PORT",
    "BACKLOG_PORT",
    "HEALTH_PORT",
    "VIOLATIONS_PORT",
    "Ports",
    "StaticBacklog",
    "StaticHealth",
    "ViolationCounter",
    "Violations",
    "dispatcher_ports",
]

HEALTH_PORT: Final = "health"
ACCESS_PORT: Final = "access"
BACKLOG_PORT: Final = "backlog"
VIOLATIONS_PORT: Final = "violations"


class ViolationCounter(Protocol):
    """Where refused envelopes, dropped late results and refused memory writes are counted."""

    def count(self, rule: str) -> None: ...

    def count_late(self) -> None: ...

    def count_refused_write(self) -> None: ...


class Violations:
    """The in-process counter: violations by rule, late results and refused memory writes."""

    def __init__(self) -> None:
        self._rules: Counter[str] = Counter()
        self._late = 0
        self._refused_writes = 0

    def count(self, rule: str) -> None:
        self._rules[rule] += 1

    def count_late(self) -> None:
        self._late += 1

    def count_refused_write(self) -> None:
        self._refused_writes += 1

    @property
    def by_rule(self) -> Mapping[str, int]:
        return dict(sorted(self._rules.items()))

    @property
    def total(self) -> int:
        return sum(self._rules.values())

    @property
    def late(self) -> int:
        return self._late

    @property
    def refused_writes(self) -> int:
        """Memory writes memory refused; not violations, so not in ``total``."""
        return self._refused_writes

    def summary(self) -> str:
        """E.g. ``dispatcher: 2 violations (one_dispatch=1, transition=1), 1 late result``
        (plus ``, 1 refused memory write`` when memory refused any)."""
        rules = ", ".join(f"{rule}={n}" for rule, n in self.by_rule.items())
        detail = f" ({rules})" if rules else ""
        late = f"{self._late} late result" + ("" if self._late == 1 else "s")
        noun = "violation" if self.total == 1 else "violations"
        refused = ""
        if self._refused_writes:
            plural = "" if self._refused_writes == 1 else "s"
            refused = f", {self._refused_writes} refused memory write{plural}"
        return f"dispatcher: {self.total} {noun}{detail}, {late}{refused}"


class StaticHealth:
    """A health view over a fixed table (demo fixtures, tests); ``set`` replaces an entry."""

    def __init__(self, entries: Iterable[ToolHealth] = ()) -> None:
        self._entries = {entry.tool: entry for entry in entries}

    def set(self, health: ToolHealth) -> None:
        self._entries[health.tool] = health

    async def health(self, tool: str) -> ToolHealth | None:
        return self._entries.get(tool)


class StaticBacklog:
    """A backlog view over a fixed table (tests); ``set`` replaces an entry."""

    def __init__(self, entries: Mapping[str, int] | None = None) -> None:
        self._entries = dict(entries or {})

    def set(self, component: str, waiting: int) -> None:
        self._entries[component] = waiting

    async def backlog(self, component: str, within_ms: int = 0) -> int:
        return self._entries.get(component, 0)


@dataclass(frozen=True, slots=True)
class Ports:
    """The ports a handler call found in ``HandlerInput.ports``."""

    health: HealthView | None
    counter: ViolationCounter | None
    backlogs: BacklogView | None = None
    """None: no backlog in the bus is known (a deadline is then told as a timeout unless a
    tool's workers had calls queued)."""

    flows: FlowCatalog | None = None
    """The registered flows (None: only the expense report is known)."""
    access: AccessView | None = None
    """The tools' access rules and per-user limits (None: every user may call every tool)."""

    @classmethod
    def of(cls, ports: Mapping[str, Any]) -> Ports:
        return cls(
            ports.get(HEALTH_PORT),
            ports.get(VIOLATIONS_PORT),
            ports.get(BACKLOG_PORT),
            ports.get(FLOWS_PORT),
            ports.get(ACCESS_PORT),
        )

    async def backlog(self, component: str, within_ms: int = 0) -> int:
        """What waits now for a free worker of ``component``'s processor, or (1) waited
        in the last ``within_ms`` (0 without a backlog view)."""
        if self.backlogs is None:
            return 0
        return await self.backlogs.backlog(component, within_ms)

    def need_health(self) -> HealthView:
        if self.health is None:
            raise ConfigError(
                f"ports[{HEALTH_PORT!r}] is missing: build the ports with dispatcher_ports(health)"
            )
        return self.health


def dispatcher_ports(
    health: HealthView,
    violations: ViolationCounter | None = None,
    backlog: BacklogView | None = None,
    flows: FlowCatalog | None = None,
    access: AccessView | None = None,
) -> dict[str, object]:
    """The dispatcher's ports: ``{"health": health, "violations": a counter}``, and
    ``"backlog"`` when given (what waits in the bus: a deadline passed behind it is busy),
    ``"flows"`` when given (the registered flows whose sessions it checks), ``"access"``
    when given (the tools' access rules: without it every user may call every tool)."""
    ports: dict[str, object] = {HEALTH_PORT: health, VIOLATIONS_PORT: violations or Violations()}
    if access is not None:
        ports[ACCESS_PORT] = access
    if backlog is not None:
        ports[BACKLOG_PORT] = backlog
    if flows is not None:
        ports[FLOWS_PORT] = flows
    return ports

"""The dispatcher's ports: live tool health (read) and the violation counter (written).

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
from hermesbus.processors.protocol import HealthView, ToolHealth

__all__ = [
    "HEALTH_PORT",
    "VIOLATIONS_PORT",
    "Ports",
    "StaticHealth",
    "ViolationCounter",
    "Violations",
    "dispatcher_ports",
]

HEALTH_PORT: Final = "health"
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


@dataclass(frozen=True, slots=True)
class Ports:
    """The ports a handler call found in ``HandlerInput.ports``."""

    health: HealthView | None
    counter: ViolationCounter | None

    @classmethod
    def of(cls, ports: Mapping[str, Any]) -> Ports:
        return cls(ports.get(HEALTH_PORT), ports.get(VIOLATIONS_PORT))

    def need_health(self) -> HealthView:
        if self.health is None:
            raise ConfigError(
                f"ports[{HEALTH_PORT!r}] is missing: build the ports with dispatcher_ports(health)"
            )
        return self.health


def dispatcher_ports(
    health: HealthView, violations: ViolationCounter | None = None
) -> dict[str, object]:
    """The dispatcher's ports: ``{"health": health, "violations": a counter}``."""
    return {HEALTH_PORT: health, VIOLATIONS_PORT: violations or Violations()}

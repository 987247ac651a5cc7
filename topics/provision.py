"""``topics apply``: create the catalog's missing topics, report drift of the others."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.errors import BrokerError
from hermesbus.topics.catalog import Catalog
from hermesbus.topics.plan import Drift, TopicPlan, plan

__all__ = ["ApplyResult", "apply"]

_METADATA_WAIT_S = 10.0


@dataclass(frozen=True, slots=True)
class ApplyResult:
    plan: TopicPlan
    """What the cluster looked like before apply."""
    created: tuple[str, ...]
    late: TopicPlan | None = None
    """Topics that turned out to exist when created (made meanwhile), compared like the rest."""

    @property
    def drift(self) -> tuple[Drift, ...]:
        return self.plan.drift + (self.late.drift if self.late else ())

    @property
    def ok(self) -> bool:
        """True when every catalog topic exists as declared."""
        return not self.drift


async def apply(catalog: Catalog, config: KafkaConfig, *, dry_run: bool = False) -> ApplyResult:
    """Idempotent: a second run creates nothing and reports the same drift."""
    async with KafkaAdmin(config) as admin:
        current = plan(catalog, await admin.describe(catalog.names()))
        if dry_run or not current.create:
            return ApplyResult(current, ())
        created = await admin.create(current.create)
        raced = [s.name for s in current.create if s.name not in created]
        late = await _describe_late(admin, catalog, raced) if raced else None
    return ApplyResult(current, tuple(created), late)


async def _describe_late(admin: KafkaAdmin, catalog: Catalog, names: list[str]) -> TopicPlan:
    """Plan for topics another client created meanwhile, once the metadata shows them."""
    subset = Catalog(topics=tuple(catalog.get(n) for n in names))
    deadline = asyncio.get_running_loop().time() + _METADATA_WAIT_S
    while True:
        found = await admin.describe(names)
        if len(found) == len(names):
            return plan(subset, found)
        if asyncio.get_running_loop().time() > deadline:
            missing = sorted(set(names) - set(found))
            raise BrokerError(f"topics reported as existing are not described: {missing}")
        await asyncio.sleep(0.2)

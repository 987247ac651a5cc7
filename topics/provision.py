"""``topics apply``: create the catalog's missing topics, report drift of the others."""

from __future__ import annotations

from dataclasses import dataclass

from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig

from .catalog import Catalog
from .plan import TopicPlan, plan

__all__ = ["ApplyResult", "apply"]


@dataclass(frozen=True, slots=True)
class ApplyResult:
    plan: TopicPlan
    created: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """True when every catalog topic exists as declared."""
        return not self.plan.drift


async def apply(catalog: Catalog, config: KafkaConfig, *, dry_run: bool = False) -> ApplyResult:
    """Idempotent: a second run creates nothing and reports the same drift."""
    async with KafkaAdmin(config) as admin:
        current = plan(catalog, await admin.describe(catalog.names()))
        created = [] if dry_run else await admin.create(current.create)
    return ApplyResult(current, tuple(created))

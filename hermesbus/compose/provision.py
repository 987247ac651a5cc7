"""The catalog's topics on a cluster: what ``up`` creates before the processors run, and
the partition check it shares with ``doctor``.

Topics keyed by session must share one partition count (a session's partition number,
with its state and timers, is the same on every topic). Missing ones are created with the
count the existing ones have (``topics apply --partitions 24`` made them so); existing
ones that disagree with each other are refused by ``up`` and failed by ``doctor``, both
from :attr:`Found.disagreeing`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from hermesbus.connectors.kafka import ExistingTopic, KafkaAdmin, KafkaConfig
from hermesbus.errors import ConfigError
from hermesbus.topics import Catalog, TopicPlan, plan, sized_by_existing

__all__ = ["Found", "find", "provision"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Found:
    """The catalog's topics as a cluster has them."""

    listed: Catalog
    """The catalog, its names under the prefix."""
    existing: Mapping[str, ExistingTopic]
    """Those of its topics the cluster has."""
    catalog: Catalog
    """``listed`` with its session topics sized as the existing ones (when they agree)."""
    counts: Mapping[str, int]
    """The existing session topics' partition count: one of them when they agree, every
    one when they differ, none when none exists."""

    @property
    def disagreeing(self) -> str | None:
        """``name=count, ...`` of the session topics when their partition counts differ;
        None when they agree (or none exists)."""
        if len(self.counts) <= 1:
            return None
        return ", ".join(f"{name}={n}" for name, n in sorted(self.counts.items()))

    @property
    def partitions(self) -> int | None:
        """The count the existing session topics agree on, if any exists."""
        return next(iter(self.counts.values()), None) if self.disagreeing is None else None

    def plan(self) -> TopicPlan:
        """What to create (sized as the existing session topics) and how the rest drift."""
        return plan(self.catalog, self.existing)


async def find(admin: KafkaAdmin, prefix: str) -> Found:
    """The catalog's topics under ``prefix`` as the cluster ``admin`` talks to has them."""
    listed = Catalog.load().with_overrides(prefix=prefix)
    existing = await admin.describe(listed.names())
    catalog, counts = sized_by_existing(listed, existing)
    return Found(listed, existing, catalog, counts)


async def provision(
    kafka: KafkaConfig, prefix: str, say: Callable[[str], None], *, announce: bool
) -> list[str]:
    """Create the catalog's missing topics (the names created); ``say`` is told when the
    broker answered (``announce``) and when the missing ones follow the existing ones'
    partition count. Session topics that disagree are a ConfigError: nothing is created."""
    async with KafkaAdmin(kafka) as admin:
        if announce:  # a configured broker is up once it answered
            say(f"broker up: Kafka at {kafka.bootstrap}")
        found = await find(admin, prefix)
        if found.disagreeing is not None:
            raise ConfigError(
                f"topics keyed by session have different partition counts "
                f"({found.disagreeing}): a session would be on a different partition of "
                "each topic. Recreate the odd ones with the same count (partition counts "
                "never change in place), or use another --prefix; `hermesbus doctor` lists "
                "the drift"
            )
        topics = found.plan()
        _say_sized(found, topics, say)
        for drift in topics.drift:
            log.warning("topic drift: %s", drift)
        return await admin.create(topics.create)


def _say_sized(found: Found, topics: TopicPlan, say: Callable[[str], None]) -> None:
    """Tell ``say`` when missing topics get the existing ones' count, not the catalog's."""
    for name, wanted in found.counts.items():  # one: they agree
        default = found.listed.get(name).partitions
        if wanted != default and topics.create:
            say(
                f"topics: the existing session topics have {wanted} partitions ({name}; "
                f"the catalog says {default}): the missing ones get {wanted} too"
            )

"""Which consumer groups have committed what under a topic prefix, on either broker.

A test that shares its broker (other test files run at the same time, and groups of
earlier tests come and go) cannot compare the broker's whole list of groups: it asks
every group, by name, for its commits on its own topics. OffsetFetch names the
partitions (the embedded broker answers no "all partitions" request)."""

from __future__ import annotations

from collections.abc import Sequence

from aiokafka import TopicPartition

from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig


async def partitions_under(kafka: KafkaConfig, prefixes: Sequence[str]) -> list[TopicPartition]:
    """Every partition of the broker's topics whose names start with one of ``prefixes``."""
    async with KafkaAdmin(kafka) as admin:
        names = [t for t in await admin.client.list_topics() if t.startswith(tuple(prefixes))]
        described = await admin.describe(names)
    return [TopicPartition(n, p) for n, t in sorted(described.items()) for p in range(t.partitions)]


async def group_names(kafka: KafkaConfig) -> list[str]:
    """Every consumer group the broker knows, by name."""
    async with KafkaAdmin(kafka) as admin:
        return sorted(str(g[0]) for g in await admin.client.list_consumer_groups())


async def commits_under(
    kafka: KafkaConfig, prefixes: Sequence[str], groups: Sequence[str] | None = None
) -> dict[str, dict[str, int]]:
    """Each group (of ``groups``, or of the broker) that has committed an offset on a
    topic under ``prefixes``: ``{group: {"topic/partition": offset}}``. A group with no
    commit there is left out."""
    parts = await partitions_under(kafka, prefixes)
    names = list(groups) if groups is not None else await group_names(kafka)
    found: dict[str, dict[str, int]] = {}
    if not parts:
        return found
    async with KafkaAdmin(kafka) as admin:
        for group in names:
            offsets = await admin.client.list_consumer_group_offsets(group, partitions=parts)
            mine = {f"{tp.topic}/{tp.partition}": o.offset for tp, o in offsets.items()}
            mine = {place: offset for place, offset in sorted(mine.items()) if offset >= 0}
            if mine:
                found[group] = mine
    return found

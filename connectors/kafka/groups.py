"""Consumer-group offsets: read a group's commits, and start a new group where another left off.

When work moves from one group to a new one (a tool gets a consumer group of its own),
the new group must start where the old one stopped: from the earliest offset it would
replay everything the old group already handled, from the latest it would skip what
the old one had not reached yet.
"""

from __future__ import annotations

import logging

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from hermesbus.errors import BrokerError

from .admin import KafkaAdmin
from .client import start_or_close
from .config import KafkaConfig

__all__ = ["committed", "hand_over"]

log = logging.getLogger(__name__)


async def committed(kafka: KafkaConfig, group_id: str, topic: str) -> dict[int, int]:
    """The offsets ``group_id`` committed on ``topic``, by partition (none: empty).

    Asked through a consumer of the group (OffsetFetch), which every broker here
    answers; the admin client's request is not understood by the embedded one.
    """
    return await _committed(kafka, group_id, topic, await _partitions(kafka, topic))


async def hand_over(kafka: KafkaConfig, topic: str, source: str, target: str) -> dict[int, int]:
    """Commit ``source``'s offsets on ``topic`` for ``target`` unless ``target`` has its own.

    Returns what was committed for ``target`` (nothing when it had offsets, or ``source``
    had none: then ``target`` starts from the earliest record as any new group).
    """
    count = await _partitions(kafka, topic)
    if await _committed(kafka, target, topic, count):
        return {}
    offsets = await _committed(kafka, source, topic, count)
    if not offsets:
        return {}
    consumer = _member(kafka, target)
    await start_or_close(consumer.start, consumer.stop, f"group {target}: cannot reach Kafka")
    try:
        parts = {TopicPartition(topic, p): o for p, o in offsets.items()}
        consumer.assign(list(parts))
        await consumer.commit(parts)
    except KafkaError as exc:
        raise BrokerError(f"cannot hand {topic} over from {source} to {target}: {exc}") from exc
    finally:
        await consumer.stop()
    log.info("group=%s starts on %s where group=%s left off: %s", target, topic, source, offsets)
    return offsets


async def _partitions(kafka: KafkaConfig, topic: str) -> int:
    async with KafkaAdmin(kafka) as admin:
        described = await admin.describe([topic])
    return described[topic].partitions if topic in described else 0


async def _committed(kafka: KafkaConfig, group_id: str, topic: str, count: int) -> dict[int, int]:
    consumer = _member(kafka, group_id)
    await start_or_close(consumer.start, consumer.stop, f"group {group_id}: cannot reach Kafka")
    try:
        found = {p: await consumer.committed(TopicPartition(topic, p)) for p in range(count)}
    except KafkaError as exc:
        raise BrokerError(f"cannot read the offsets of group {group_id}: {exc}") from exc
    finally:
        await consumer.stop()
    return {p: offset for p, offset in found.items() if offset is not None and offset >= 0}


def _member(kafka: KafkaConfig, group_id: str) -> AIOKafkaConsumer:
    """A consumer of the group that never joins it: it only fetches and commits offsets."""
    return AIOKafkaConsumer(**kafka.client_kwargs(), group_id=group_id, enable_auto_commit=False)

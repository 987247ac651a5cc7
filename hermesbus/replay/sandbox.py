"""A redrive's claim on its prefix: only a fresh prefix, or a sandbox a redrive made.

A redrive runs the processors, for real, on ``PREFIX.*`` topics with ``PREFIX.*``
consumer groups. Pointed at another environment's prefix (``--into prod``) it would feed
that environment's running groups, which write its stores and run its tools. So before
anything is created, :func:`claim` looks at the broker: a prefix with topics or consumer
groups (a group the broker lists has members or committed offsets) is refused, unless
it is marked as a redrive's sandbox.

The mark is a topic of the prefix, ``PREFIX.hermes.replay.sandbox`` (one partition,
kept forever), whose first record says ``{"sandbox": PREFIX, "made_by": "hermesbus
replay --redrive"}``; :func:`claim` writes it on a fresh prefix before the sandbox's
topics are made. No hermesbus command but a redrive creates that topic, and no catalog
topic has that name, so an environment's prefix never carries it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig, LogReader, plain_producer
from hermesbus.connectors.kafka.client import kafka_reason, start_or_close
from hermesbus.errors import BrokerError, SettingError
from hermesbus.topics import CONVERSATION_IN, Catalog

__all__ = ["MADE_BY", "MARKER", "claim", "marker_of"]

MARKER: Final = "hermes.replay.sandbox"
"""The marker topic's name after the prefix."""
MADE_BY: Final = "hermesbus replay --redrive"


@dataclass(frozen=True)
class _MarkerTopic:
    """The marker topic as ``KafkaAdmin.create`` takes it (a ``NewTopicSpec``)."""

    name: str
    replication_factor: int
    partitions: int = 1

    def kafka_configs(self) -> dict[str, str]:
        return {"cleanup.policy": "delete", "retention.ms": "-1"}  # kept: the mark is lasting


def marker_of(prefix: str) -> bytes:
    """The marker record's value for ``prefix``."""
    return json.dumps({"sandbox": prefix, "made_by": MADE_BY}).encode()


async def claim(kafka: KafkaConfig, prefix: str, groups: Sequence[str] = ()) -> bool:
    """Make ``prefix`` a sandbox, or check that a redrive made it one; True if it was
    fresh (marked now). SettingError naming what is there when it is anything else.

    ``groups``: the consumer groups the sandbox will join (named with the prefix), asked
    for their members too: a broker may list only the groups with committed offsets
    (the embedded one does)."""
    marker = prefix + MARKER
    topics, used = await _used(kafka, prefix, groups)
    others = [t for t in topics if t != marker]
    if not others and not used:
        await _mark(kafka, prefix, created=marker not in topics)
        return True
    if marker in topics and await _first_record(kafka, marker) == marker_of(prefix):
        return False
    raise SettingError(
        f"--into {prefix}: refused, {_said(others, used)} on {kafka.address}, and {prefix} "
        f"is not a sandbox a redrive made (no {marker} marker): a redrive would run on that "
        "environment's topics and groups. Choose a new --into"
    )


def _said(topics: Sequence[str], groups: Sequence[str]) -> str:
    parts = []
    if topics:
        parts.append(f"topics {_few(topics)} exist")
    if groups:
        parts.append(f"consumer groups {_few(groups)} exist (members or offsets)")
    return " and ".join(parts)


def _few(names: Sequence[str], shown: int = 3) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


async def _used(
    kafka: KafkaConfig, prefix: str, joining: Sequence[str]
) -> tuple[list[str], list[str]]:
    """The broker's topics whose names start with ``prefix``; its consumer groups named so
    that it lists (members or offsets), and those of ``joining`` that have members."""
    async with KafkaAdmin(kafka) as admin:
        try:
            topics = await admin.client.list_topics()
            listed = await admin.client.list_consumer_groups()
            # one group a request: aiokafka misreads a reply about several
            described = [
                r for g in joining for r in await admin.client.describe_consumer_groups([g])
            ]
        except KafkaError as exc:
            raise BrokerError(f"cannot list topics and groups: {kafka_reason(exc)}") from exc
    groups = {str(g[0]) for g in listed if str(g[0]).startswith(prefix)}
    for response in described:
        groups |= {g["group"] for g in response.to_object()["groups"] if g["members"]}
    return sorted(t for t in topics if t.startswith(prefix)), sorted(groups)


async def _mark(kafka: KafkaConfig, prefix: str, *, created: bool) -> None:
    """Create the marker topic (if missing) and write the mark (if it has none)."""
    marker = prefix + MARKER
    if created:
        catalog = Catalog.load().with_overrides(prefix=prefix)
        copies = catalog.get(prefix + CONVERSATION_IN).replication_factor
        async with KafkaAdmin(kafka) as admin:
            await admin.create([_MarkerTopic(marker, copies)])
    elif await _first_record(kafka, marker) is not None:
        return  # a redrive marked it and stopped before making the topics: marked anyway
    producer = plain_producer(kafka, acks="all")
    await start_or_close(producer.start, producer.stop, f"cannot reach Kafka at {kafka.address}")
    try:
        await producer.send_and_wait(marker, marker_of(prefix), partition=0)
    except KafkaError as exc:
        raise BrokerError(f"cannot mark {prefix} as a sandbox: {kafka_reason(exc)}") from exc
    finally:
        await producer.stop()


async def _first_record(kafka: KafkaConfig, topic: str) -> bytes | None:
    """The value of the first record of ``topic``'s partition 0; None when it has none."""
    async with LogReader(kafka, [TopicPartition(topic, 0)], what=f"cannot read {topic}") as log:
        async for batch in log:
            value: bytes | None = batch[0].value
            return value
    return None

"""Committing a consumer's offsets only while it is a member of its group.

aiokafka's ``consumer.commit`` retries a retriable error until it succeeds, and reads the
member's generation afresh for each attempt. A broker that comes back empty (the
embedded broker restarted) has forgotten the group: aiokafka resets the member's
generation to -1 and revokes its partitions before it joins again. A commit made then
(by the revocation, which commits what finished) or retried past that moment is sent
from outside the group, and is refused only while its topic is missing: aiokafka retries
that until ``up`` has created the topic again, and then a broker accepts a generation -1
commit for a group with no members. The offsets of the lost log so stood in the new one,
the group started there once it joined, and the new log's records before them were
never consumed (the first turn after the broker came back got no reply).

:func:`commit_as_member` sends an OffsetCommit only with a generation the coordinator
gave, and does not retry one refused for a missing topic: a consumer that lost its
membership commits nothing (what finished is redelivered, and skipped as a duplicate).
Kafka's Java client does the same for partitions "lost" rather than revoked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import IllegalStateError, KafkaError, UnknownTopicOrPartitionError
from aiokafka.protocol.commit import OffsetCommitRequest
from aiokafka.protocol.group import JoinGroupRequest
from aiokafka.structs import OffsetAndMetadata

__all__ = ["absent", "commit_as_member", "is_member"]

_NO_GENERATION: int = OffsetCommitRequest.DEFAULT_GENERATION_ID
"""aiokafka's generation before a join, and after the coordinator forgot the member."""
_NO_MEMBER: str = JoinGroupRequest.UNKNOWN_MEMBER_ID


async def absent(
    consumer: AIOKafkaConsumer, refused: Mapping[TopicPartition, int]
) -> set[TopicPartition]:
    """Those of the ``refused`` partitions (a commit refused as for an unknown topic) whose
    topic the cluster, asked afresh, no longer has. One OffsetCommit carries every
    partition and the error names none, so a commit of several topics is refused for one
    missing topic: only the missing ones are gone. Metadata that cannot be had counts
    every one as gone (not committing is always safe: what finished is redelivered and
    skipped)."""
    try:
        topics = await consumer.topics()  # a metadata request now, not the cached view
    except KafkaError:
        return set(refused)
    return {tp for tp in refused if tp.topic not in topics}


def is_member(consumer: AIOKafkaConsumer) -> bool:
    """Whether ``consumer`` holds a generation of its group (joined, and not forgotten)."""
    coordinator: Any = getattr(consumer, "_coordinator", None)  # aiokafka keeps it private
    generation: int = getattr(coordinator, "generation", _NO_GENERATION)
    member: str = getattr(coordinator, "member_id", _NO_MEMBER)
    return generation != _NO_GENERATION and member != _NO_MEMBER


async def commit_as_member(
    consumer: AIOKafkaConsumer, offsets: Mapping[TopicPartition, int]
) -> bool:
    """Commit ``offsets`` as a member of the group; False (nothing committed) once the
    consumer is not one, refused for that reason too. A retriable error is retried, asking
    afresh whether it is still a member, except a missing topic: its log is gone, and its
    offsets with it. Other refusals raise aiokafka's KafkaError (IllegalStateError for a
    partition not assigned, as ``consumer.commit``)."""
    coordinator: Any = getattr(consumer, "_coordinator", None)
    while is_member(consumer):
        await coordinator.ensure_coordinator_known()
        try:
            async with coordinator._commit_lock:
                if await _commit_once(consumer, coordinator, offsets):
                    return True
        except UnknownTopicOrPartitionError:
            raise  # never retried: the topic made again is a new log
        except KafkaError as exc:
            if not exc.retriable and is_member(consumer):
                raise
        await asyncio.sleep(coordinator._retry_backoff_ms / 1000)
    return False


async def _commit_once(
    consumer: AIOKafkaConsumer, coordinator: Any, offsets: Mapping[TopicPartition, int]
) -> bool:
    if not is_member(consumer):  # asked right before the request is made
        return False
    stamped = {tp: OffsetAndMetadata(offset, "") for tp, offset in offsets.items()}
    await coordinator._do_commit_offsets(_assignment(consumer, offsets), stamped)
    return True


def _assignment(consumer: AIOKafkaConsumer, offsets: Mapping[TopicPartition, int]) -> Any:
    subscription = consumer._subscription.subscription
    assignment = subscription.assignment if subscription is not None else None
    if assignment is None or not set(offsets) <= assignment.tps:
        raise IllegalStateError(f"not all of {sorted(offsets)} are assigned")
    return assignment

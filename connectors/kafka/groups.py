"""Consumer-group offsets: read a group's commits, and start a new group where another left off.

When work moves from one group to a new one (a tool gets a consumer group of its own),
the new group must start where the old one stopped: from the earliest offset it would
replay everything the old group already handled, from the latest it would skip what
the old one had not reached yet.

The start is committed for every partition before the new group first consumes (the
old group's offset, or the partition's earliest where it has none), so it is on record
however the new group is later stopped or killed: its own commits take over from
there, and a later hand-over never moves it. A group with members but no offsets (a
hand-over killed before its commit, or an older hermesbus that committed nothing when
the old group had nothing) gets the same start.

The commit is made from outside the group (generation -1) where the broker allows it:
on a group without members. Otherwise it is made as a member that joins, waits until it
holds every partition, commits with its generation and leaves; the join waits out a
killed process's member until its session times out. Apache Kafka drops a member that
leaves or times out; the embedded broker (tansu) starts generations at 0, where aiokafka
sends no LeaveGroup, and drops a timed-out member only when the group is joined or
heartbeats again, so a cleanly stopped first member stays there until a join.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping, Sequence

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from hermesbus.connectors.kafka.admin import KafkaAdmin
from hermesbus.connectors.kafka.client import kafka_reason, start_or_close
from hermesbus.connectors.kafka.clients import group_consumer, log_consumer
from hermesbus.connectors.kafka.config import KafkaConfig
from hermesbus.errors import BrokerError

__all__ = ["MEMBER_WAIT_S", "behind", "committed", "hand_over", "hand_over_to_each"]

log = logging.getLogger(__name__)

MEMBER_WAIT_S = 60.0
"""How long a hand-over waits for the target group's other members to leave or time out."""

_SESSION_TIMEOUT_MS = 6_000  # the least Apache Kafka accepts (group.min.session.timeout.ms)
_HEARTBEAT_INTERVAL_MS = 1_000


async def committed(kafka: KafkaConfig, group_id: str, topic: str) -> dict[int, int]:
    """The offsets ``group_id`` committed on ``topic``, by partition (none: empty).
    BrokerError when the cluster does not describe ``topic``: a topic it does not know
    (yet: a cluster's nodes just restarted) has no offsets to say, which is not "none".

    Asked through a consumer of the group (OffsetFetch), which every broker here
    answers; the admin client's request is not understood by the embedded one.
    """
    count = await _partitions(kafka, topic)
    if not count:
        raise BrokerError(
            f"cannot read the offsets of group {group_id} on {topic}: the cluster does not "
            "describe that topic (does it exist? a cluster just restarted may not know it yet)"
        )
    return await _committed(kafka, group_id, topic, count)


async def behind(
    kafka: KafkaConfig, group_id: str, partitions: Mapping[str, int]
) -> tuple[dict[TopicPartition, int], bool]:
    """How many records of each partition (topic -> count) ``group_id`` has not committed,
    and whether it committed any of them; a partition it never committed counts from the
    first record the broker still holds."""
    parts = [TopicPartition(t, p) for t, count in partitions.items() for p in range(count)]
    if not parts:
        return {}, False
    consumer = await _outsider(kafka, group_id)
    try:
        done = {tp: await consumer.committed(tp) for tp in parts}
        starts = await consumer.beginning_offsets(parts)
        ends = await consumer.end_offsets(parts)
    except KafkaError as exc:
        raise BrokerError(f"cannot read the offsets of group {group_id}: {exc}") from exc
    finally:
        await consumer.stop()
    held = {tp: o for tp, o in done.items() if o is not None and o >= 0}
    lag = {tp: max(0, end - max(held.get(tp, 0), starts[tp])) for tp, end in ends.items()}
    return lag, bool(held)


async def hand_over(
    kafka: KafkaConfig, topic: str, source: str, target: str, *, within_s: float = MEMBER_WAIT_S
) -> dict[int, int]:
    """Commit where ``source`` left off on ``topic`` for ``target``, unless it has offsets.

    Every partition gets a start: ``source``'s committed offset, or the partition's
    earliest where ``source`` has none. Returns what was committed for ``target``
    (nothing when it had offsets of its own: those are never moved).
    """
    count = await _partitions(kafka, topic)
    if not count or await _committed(kafka, target, topic, count):
        return {}
    starts = await _starts(kafka, source, topic, count)
    parts = {TopicPartition(topic, p): o for p, o in starts.items()}
    try:
        if not await _commit_outside(kafka, target, parts):
            log.warning(
                "group=%s has members (a stopped or killed process?): joining it to commit its"
                " start on %s, waiting up to %g s for them to leave or time out",
                target,
                topic,
                within_s,
            )
            await _commit_as_member(kafka, target, parts, within_s)
    except (KafkaError, BrokerError) as exc:
        why = kafka_reason(exc) if isinstance(exc, KafkaError) else str(exc)
        raise BrokerError(f"cannot hand {topic} over from {source} to {target}: {why}") from exc
    log.info("group=%s starts on %s where group=%s left off: %s", target, topic, source, starts)
    return starts


async def hand_over_to_each(
    kafka: KafkaConfig,
    topic: str,
    source: str,
    targets: Sequence[str],
    *,
    within_s: float = MEMBER_WAIT_S,
) -> dict[str, dict[int, int]]:
    """``hand_over`` to each of ``targets`` at once, so their waits for members overlap."""
    results = await asyncio.gather(
        *(hand_over(kafka, topic, source, t, within_s=within_s) for t in targets),
        return_exceptions=True,
    )
    failed = [r for r in results if isinstance(r, BaseException)]
    for exc in failed:
        if not isinstance(exc, BrokerError):
            raise exc
    if failed:
        raise BrokerError("; ".join(str(exc) for exc in failed)) from failed[0]
    return {t: r for t, r in zip(targets, results, strict=True) if isinstance(r, dict)}


async def _partitions(kafka: KafkaConfig, topic: str) -> int:
    async with KafkaAdmin(kafka) as admin:
        described = await admin.describe([topic])
    return described[topic].partitions if topic in described else 0


async def _committed(kafka: KafkaConfig, group_id: str, topic: str, count: int) -> dict[int, int]:
    consumer = await _outsider(kafka, group_id)
    try:
        found = {p: await consumer.committed(TopicPartition(topic, p)) for p in range(count)}
    except KafkaError as exc:
        raise BrokerError(f"cannot read the offsets of group {group_id}: {exc}") from exc
    finally:
        await consumer.stop()
    return {p: offset for p, offset in found.items() if offset is not None and offset >= 0}


async def _starts(kafka: KafkaConfig, source: str, topic: str, count: int) -> dict[int, int]:
    """``source``'s committed offsets, and the earliest offset of every other partition."""
    offsets = await _committed(kafka, source, topic, count)
    missing = [TopicPartition(topic, p) for p in range(count) if p not in offsets]
    if not missing:
        return offsets
    consumer = await _outsider(kafka, None)
    try:
        earliest = await consumer.beginning_offsets(missing)
    except KafkaError as exc:
        raise BrokerError(f"cannot read the earliest offsets of {topic}: {exc}") from exc
    finally:
        await consumer.stop()
    return dict(sorted({**offsets, **{tp.partition: o for tp, o in earliest.items()}}.items()))


async def _commit_outside(
    kafka: KafkaConfig, group_id: str, parts: Mapping[TopicPartition, int]
) -> bool:
    """Commit without joining (generation -1); False if refused: the group has members."""
    consumer = await _outsider(kafka, group_id)
    try:
        consumer.assign(list(parts))
        await consumer.commit(dict(parts))
    except CommitFailedError:
        return False
    finally:
        await consumer.stop()
    return True


async def _commit_as_member(
    kafka: KafkaConfig, group_id: str, parts: Mapping[TopicPartition, int], within_s: float
) -> None:
    """Join ``group_id``, wait until this member holds every partition, commit, leave."""
    held = _Holding(parts)
    consumer = group_consumer(
        kafka,
        group_id,
        session_timeout_ms=_SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=_HEARTBEAT_INTERVAL_MS,
    )
    consumer.subscribe(sorted({tp.topic for tp in parts}), listener=held)
    await start_or_close(consumer.start, consumer.stop, f"group {group_id}: cannot reach Kafka")
    try:
        async with asyncio.timeout(within_s):
            while True:
                await held.all.wait()
                try:
                    await consumer.commit(dict(parts))
                except (CommitFailedError, IllegalStateError):
                    continue  # the group rebalanced meanwhile: wait for the next assignment
                return
    except TimeoutError:
        raise BrokerError(
            f"group {group_id} still has other members after {within_s:g} s"
            " (is another hermesbus running on this broker?)"
        ) from None
    finally:
        await consumer.stop()


class _Holding(ConsumerRebalanceListener):  # type: ignore[misc]
    """``all`` is set while the member's assignment covers every partition in ``parts``."""

    def __init__(self, parts: Collection[TopicPartition]) -> None:
        self._parts = frozenset(parts)
        self.all = asyncio.Event()

    async def on_partitions_revoked(self, revoked: Collection[TopicPartition]) -> None:
        self.all.clear()

    async def on_partitions_assigned(self, assigned: Collection[TopicPartition]) -> None:
        if self._parts <= set(assigned):
            self.all.set()


async def _outsider(kafka: KafkaConfig, group_id: str | None) -> AIOKafkaConsumer:
    """A started consumer of the group that never joins it: it only fetches and commits."""
    consumer = log_consumer(kafka) if group_id is None else group_consumer(kafka, group_id)
    await start_or_close(consumer.start, consumer.stop, f"group {group_id}: cannot reach Kafka")
    return consumer

"""A new consumer group starts where another left off on a topic (a tool's own group).

The start must hold after any sequence of stops, kills and restarts:
a target group that had members but no offsets once wedged ``hermesbus up`` for good on
the embedded broker.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition

from hermesbus.compose.settings import Settings
from hermesbus.compose.stack import stack
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.connectors.kafka.groups import committed, hand_over, hand_over_to_each
from hermesbus.errors import BrokerError
from hermesbus.processors import tool
from hermesbus.topics import Catalog, plan

pytestmark = pytest.mark.kafka

PARTITIONS = 6  # hermes.tool in the catalog
EARLIEST = dict.fromkeys(range(PARTITIONS), 0)

# A member that joins, reports its assignment, then holds the session until it is killed.
_MEMBER = """
import asyncio, sys
from aiokafka import AIOKafkaConsumer

async def main(bootstrap, group, topic):
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
        session_timeout_ms=6000, heartbeat_interval_ms=1000,
    )
    consumer.subscribe([topic])
    await consumer.start()
    while not consumer.assignment():
        await consumer.getmany(timeout_ms=100)
    print("joined", flush=True)
    await asyncio.Event().wait()

asyncio.run(main(*sys.argv[1:]))
"""


async def _provision(kafka: KafkaConfig, prefix: str) -> str:
    """The catalog's topics under ``prefix``; returns the tool topic."""
    catalog = Catalog.load().with_overrides(prefix=prefix)
    async with KafkaAdmin(kafka) as admin:
        await admin.create(plan(catalog, await admin.describe(catalog.names())).create)
    return prefix + tool.TOPIC


async def _produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for partition, count in counts.items():
            for _ in range(count):
                await producer.send_and_wait(topic, b"call", partition=partition)
    finally:
        await producer.stop()


@pytest.fixture
async def calls(broker: str, unique: str) -> AsyncIterator[str]:
    """A fresh tool topic with 3 calls on partition 0 and 2 on partition 1."""
    topic = await _provision(KafkaConfig(bootstrap=broker), f"groups-{unique}.")
    await _produce(broker, topic, {0: 3, 1: 2})
    yield topic


async def _commit(bootstrap: str, group: str, offsets: dict[TopicPartition, int]) -> None:
    """Commit from outside the group, as a tool of the old code's hand-over did."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign(list(offsets))
        await consumer.commit(offsets)
    finally:
        await consumer.stop()


class _Assigned(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.event = asyncio.Event()

    async def on_partitions_revoked(self, revoked: object) -> None:
        pass

    async def on_partitions_assigned(self, assigned: object) -> None:
        self.event.set()


async def _join_and_leave(
    bootstrap: str, group: str, topic: str, commit: dict[TopicPartition, int] | None = None
) -> None:
    """A processor stopped cleanly before its first commit (or after ``commit``)."""
    assigned = _Assigned()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    consumer.subscribe([topic], listener=assigned)
    await consumer.start()
    try:
        await asyncio.wait_for(assigned.event.wait(), 60)
        if commit:
            await consumer.commit(commit)
    finally:
        await consumer.stop()


async def _join_and_die(bootstrap: str, group: str, topic: str) -> None:
    """A process killed (-9) while it is a member: its session outlives it."""
    member = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _MEMBER, bootstrap, group, topic, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert member.stdout is not None
        line = await asyncio.wait_for(member.stdout.readline(), 60)
        assert line == b"joined\n"
    finally:
        member.kill()
        await member.wait()


def _at(topic: str, offsets: dict[int, int]) -> dict[TopicPartition, int]:
    return {TopicPartition(topic, p): o for p, o in offsets.items()}


async def test_a_new_group_takes_over_the_old_groups_offsets(broker: str, calls: str) -> None:
    kafka = KafkaConfig(bootstrap=broker)
    old, new = f"tool-{calls}", f"tool-own-{calls}"
    await _commit(broker, old, _at(calls, {0: 3, 1: 1}))

    # the partitions the old group never committed start at their earliest
    start = {**EARLIEST, 0: 3, 1: 1}
    assert await hand_over(kafka, calls, old, new) == start
    assert await committed(kafka, new, calls) == start
    # once the new group has offsets of its own, they are never overwritten
    await _commit(broker, new, _at(calls, {0: 5}))
    assert await hand_over(kafka, calls, old, new) == {}
    assert (await committed(kafka, new, calls))[0] == 5
    # a source with nothing committed: the new group's start is the earliest, on record
    fresh = f"fresh-{calls}"
    assert await hand_over(kafka, calls, f"nobody-{calls}", fresh) == EARLIEST
    assert await committed(kafka, fresh, calls) == EARLIEST


async def test_the_wedge_a_target_that_joined_and_left_without_committing(
    broker: str, calls: str
) -> None:
    """Item 3's sequence: ``tool`` has offsets; ``tool-trip_tool`` joined and left cleanly."""
    kafka = KafkaConfig(bootstrap=broker)
    source, target = f"tool-{calls}", f"tool-trip_tool-{calls}"
    await _commit(broker, source, _at(calls, {0: 2, 1: 1}))
    await _join_and_leave(broker, target, calls)

    start = {**EARLIEST, 0: 2, 1: 1}
    assert await hand_over(kafka, calls, source, target) == start
    assert await committed(kafka, target, calls) == start
    assert await hand_over(kafka, calls, source, target) == {}  # every later start: as is


async def test_a_stop_before_the_targets_first_commit_skips_nothing(
    broker: str, calls: str
) -> None:
    """First start on a fresh topic, the target stops before committing, ``tool`` moved on."""
    kafka = KafkaConfig(bootstrap=broker)
    source, target = f"tool-{calls}", f"tool-trip_tool-{calls}"
    assert await hand_over(kafka, calls, source, target) == EARLIEST
    await _join_and_leave(broker, target, calls)  # stopped before its first commit
    await _commit(broker, source, _at(calls, {0: 3, 1: 2}))  # the tool group went on

    assert await hand_over(kafka, calls, source, target) == {}
    assert await committed(kafka, target, calls) == EARLIEST  # its calls are still ahead


async def test_a_killed_member_holding_the_session_is_waited_out(broker: str, calls: str) -> None:
    """kill -9 of a hand-over or a processor before the target's first commit."""
    kafka = KafkaConfig(bootstrap=broker)
    source, target = f"tool-{calls}", f"tool-trip_tool-{calls}"
    await _commit(broker, source, _at(calls, {0: 3}))
    await _join_and_die(broker, target, calls)

    start = {**EARLIEST, 0: 3}
    assert await hand_over(kafka, calls, source, target) == start
    assert await committed(kafka, target, calls) == start
    # killed again after the commit: the start stays, and nothing waits for the session
    await _join_and_die(broker, target, calls)
    assert await asyncio.wait_for(hand_over(kafka, calls, source, target), 5) == {}
    assert await committed(kafka, target, calls) == start


async def test_a_member_that_stays_is_a_clear_error(broker: str, calls: str) -> None:
    """Another process consuming as the target group: the hand-over gives up, and says why."""
    kafka = KafkaConfig(bootstrap=broker)
    source, target = f"tool-{calls}", f"tool-trip_tool-{calls}"
    await _commit(broker, source, _at(calls, {0: 3}))
    member = AIOKafkaConsumer(bootstrap_servers=broker, group_id=target, enable_auto_commit=False)
    member.subscribe([calls])
    await member.start()
    polling = asyncio.ensure_future(_poll(member))
    try:
        while not member.assignment():
            await asyncio.sleep(0.1)
        with pytest.raises(BrokerError, match="still has other members after 10 s"):
            await hand_over(kafka, calls, source, target, within_s=10)
    finally:
        polling.cancel()
        await member.stop()
    assert await committed(kafka, target, calls) == {}


async def _poll(consumer: AIOKafkaConsumer) -> None:
    """What a live processor does: keep fetching (and so keep rejoining on rebalances)."""
    while True:
        await consumer.getmany(timeout_ms=100)


@pytest.mark.slow
@pytest.mark.timeout(300)  # the embedded broker holds every join for 5 s
async def test_up_starts_after_the_wedge(
    broker: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo stack after item 3's sequence (and a tool group's member killed -9): every
    tool group starts where ``tool`` left off."""
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "home"))
    kafka = KafkaConfig(bootstrap=broker)
    prefix = f"wedge-{unique}."
    topic = await _provision(kafka, prefix)
    await _produce(broker, topic, {0: 2, 1: 1})
    # the tool group handled every call (the stack's groups take its prefix)
    await _join_and_leave(broker, prefix + tool.NAME, topic, commit=_at(topic, {0: 2, 1: 1}))
    await _join_and_leave(broker, prefix + tool.group_name("trip_tool"), topic)
    await _join_and_die(broker, prefix + tool.group_name("ocr_tool"), topic)

    async with stack(
        settings=Settings.from_environment(), kafka=kafka, prefix=prefix, demo=True
    ) as running:
        groups = [prefix + tool.group_name(name) for name in running.tool_names]
        assert prefix + tool.group_name("trip_tool") in groups
        assert {p.group_id for p in running.processors} >= set(groups)
        for group in groups:
            assert await committed(kafka, group, topic) == {**EARLIEST, 0: 2, 1: 1}, group
    # and the next start leaves every group's offsets as they are
    assert await hand_over_to_each(kafka, topic, prefix + tool.NAME, groups) == {
        group: {} for group in groups
    }


async def test_two_stacks_of_different_prefixes_on_one_broker_share_no_group(
    broker: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every group a stack joins starts with its prefix, as its topics do (two stacks used
    to join each other's ``conversation``, rebalancing each other on every start)."""
    kafka = KafkaConfig(bootstrap=broker)
    prefixes = [f"ga{unique}.", f"gb{unique}."]
    settings = []
    for n in range(2):
        monkeypatch.setenv("HERMES_HOME", str(tmp_path / f"home{n}"))
        settings.append(Settings.from_environment())
    async with (
        stack(settings=settings[0], kafka=kafka, prefix=prefixes[0]) as one,
        stack(settings=settings[1], kafka=kafka, prefix=prefixes[1]) as two,
    ):
        joined = {
            prefix: sorted([*(p.group_id for p in running.processors), running.indexer.group_id])
            for prefix, running in zip(prefixes, (one, two), strict=True)
            if running.indexer is not None
        }
    expected = ["conversation", "dispatcher", "indexer", "memory", tool.NAME, tool.MODEL_GROUP]
    for prefix in prefixes:
        assert joined[prefix] == sorted(prefix + name for name in expected)

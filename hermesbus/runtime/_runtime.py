"""The processor runtime: one consumer group, sessions in order, nothing lost.

Records of one session (the Kafka key) run strictly one after another in offset
order; different sessions run concurrently, at most ``max_in_flight`` at once.
Offsets are committed only up to the contiguous prefix of finished records. What
happens to one record is in ``_records``; exactly-once transactions in ``_eos``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import IllegalStateError, KafkaError, UnknownTopicOrPartitionError

from hermesbus.base.lifecycle import Service, cancel_and_wait, logged_task, return_freed_memory
from hermesbus.codec import Codec, default_codec
from hermesbus.connectors.kafka import (
    KafkaConfig,
    absent,
    commit_as_member,
    group_consumer,
    start_or_close,
)
from hermesbus.errors import BrokerError, ConfigError, StoreError
from hermesbus.identity import Guard, Keyring, WritePolicy

from ._eos import Transactions
from ._model import EMPTY, Handler, Observer, PauseNotice
from ._partition import Partition, ProcessorStats, Record
from ._producer import CLOSE_TIMEOUT_S, Producer, close_within
from ._rebalance import RebalanceListener
from ._records import Records
from ._settings import RuntimeSettings
from ._store import StateStore

__all__ = ["Processor", "ProcessorStats"]

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
_HEARTBEAT_MS = 1_000
"""How often a worker records that it runs its partitions (the downtime's resolution)."""
_REPORT_GAP_MS = 2_000
_AT_ADOPTION, _AT_GATE = 1, 2
"""``Partition.resumed``: its timers were resumed when adopted, then when the gate opened."""


class Processor(Service):
    """Runs ``handler`` as consumer group ``group_id`` (default: the processor's name)."""

    def __init__(
        self,
        name: str,
        handler: Handler,
        topics: Sequence[str],
        *,
        store: StateStore,
        kafka: KafkaConfig,
        settings: RuntimeSettings,
        ports: Mapping[str, Any] | None = None,
        codec: Codec | None = None,
        topic_prefix: str = "",
        group_id: str | None = None,
        clock: Callable[[], float] = time.time,
        dead_letter_undecodable: bool = True,
        identity: str | None = None,
        keys: Keyring | None = None,
        keyring: Callable[[], Keyring] | None = None,
        policy: WritePolicy | None = None,
        timers_gate: asyncio.Event | None = None,
        paused: PauseNotice | None = None,
        broker_answers: Callable[[], bool] | None = None,
        observe: Observer | None = None,
    ) -> None:
        """``clock`` (seconds since the epoch) decides when durable timers are due; tests
        pass a controllable one. Handlers never see it: their time is the envelope's.

        ``dead_letter_undecodable=False``: records that do not decode or are refused are
        counted and skipped, for groups that share a topic with one that dead-letters them
        (each tool's own group beside the ``tool`` group), so a bad record is
        dead-lettered once.

        ``identity`` (default: ``name``) is whom the processor signs as, with its key from
        ``keys``, else from ``keyring()`` (the program's keys, as its settings say where they
        are), loaded again when a record names an unknown key id: one of the two is
        required. ``policy`` says who may write what to its topics (default: the signer
        must be the envelope's source).

        Time nobody ran a partition is not charged to its timers: a partition taken over
        moves its not-yet-due timers later by the time since its last owner last ran it,
        and no timer fires before ``timers_gate`` is set (default: this processor joined
        its group), when the time waited for the gate is not charged either. ``hermesbus
        up`` opens one gate for every processor once all have joined, so a deadline waiting
        for a tool's group gets its remaining time once that group runs.

        Time the broker is away is not charged either: while ``broker_answers()`` is False
        (a probe shared by a program's processors; default: always True) no timer fires
        and no heartbeat is recorded, and when it answers again every timer of the owned
        partitions moves later by the time since the last heartbeat. ``paused`` says what
        to tell the sender of a record a backend outage holds in place (see ``Records``).
        ``observe`` is told of every handler run (see :data:`Observer`: an exporter of
        spans).
        """
        if not _NAME.match(name):
            raise ConfigError(f"processor name {name!r}: use lowercase letters, digits, - and _")
        self.name = name
        self.stats = ProcessorStats()
        self._topics = [topic_prefix + t for t in topics]
        self._store = store
        self._kafka = kafka
        self._settings = settings
        self._group = group_id or name
        self._parts: dict[TopicPartition, Partition] = {}
        self._detached: list[Partition] = []
        """Partitions of logs made again, while work of theirs still runs (never committed)."""
        self._sessions: dict[bytes, deque[tuple[Partition, Record]]] = {}
        self._slots = asyncio.Semaphore(self._settings.max_in_flight)
        self._buffered = 0
        self._idle = 0
        """Workers waiting for a session to run (taking none)."""
        self._saturated_at = 0.0
        """When a session last had to wait for a free worker, or fetching last paused."""
        self._finished_at = time.monotonic()
        self._running = 0
        self._paused = False
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: Producer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._workers: list[asyncio.Task[None]] = []
        self._ready: asyncio.Queue[bytes] = asyncio.Queue()
        self._stopping = False
        self._eos = self._settings.exactly_once
        self._clock = clock
        self.joined = asyncio.Event()
        """Set once the group gave this processor its first assignment (possibly empty)."""
        self._gate = timers_gate if timers_gate is not None else self.joined
        self._gate_passed = False
        self._beat_ms = 0
        self._broker_answers = broker_answers or _always
        self._away_ms: int | None = None
        guard = Guard(
            identity or name,
            keys if keys is not None else _loaded(keyring, f"processor {name}"),
            processor=name,
            policy=policy,
            prefix=topic_prefix,
            reload=None if keys is not None else keyring,
        )
        self._records = Records(
            name,
            handler,
            store=store,
            codec=codec or default_codec(),
            settings=self._settings,
            ports=MappingProxyType(dict(ports or {})) if ports else EMPTY,
            prefix=topic_prefix,
            stats=self.stats,
            guard=guard,
            clock=clock,
            dead_letter_undecodable=dead_letter_undecodable,
            partitions=self._partition_count,
            paused=paused,
            observe=observe,
        )
        self._transactions = Transactions(self._records, self._group, self._slots)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Join the group and start consuming; safe to call twice."""
        if self._consumer is not None:
            return
        self._stopping = False
        settings = self._settings
        producer = Producer(self._kafka, self._group, exactly_once=settings.exactly_once)
        await producer.start()  # first, so exactly-once mode is refused before joining
        consumer = member_consumer(self._kafka, self._group, settings)
        consumer.subscribe(self._topics, listener=RebalanceListener(self._adopt, self._release))
        try:
            where = f"processor {self.name}: cannot reach Kafka"
            await start_or_close(consumer.start, consumer.stop, where, self._kafka)
        except BaseException:  # also cancelled while joining (Ctrl-C): nothing left unclosed
            await producer.stop()  # bounded, never raises
            raise
        self._consumer, self._producer = consumer, producer
        self._records.producer, self._transactions.consumer = producer, consumer
        self._records.stopping = False
        self._finished_at = time.monotonic()
        self._tasks = [
            logged_task(self._consume(), f"{self.name}-consume"),
            logged_task(self._commit_loop(), f"{self.name}-commit"),
            logged_task(self._timer_loop(), f"{self.name}-timers"),
        ]
        if not self._eos:  # max_in_flight workers, each running one session at a time
            self._workers = [
                logged_task(self._work(), f"{self.name}-worker-{n}")
                for n in range(self._settings.max_in_flight)
            ]

    async def stop(self) -> None:
        """Finish in-flight work, commit the finished prefix, leave the group: all bounded.

        In-flight work gets ``revoke_timeout_ms`` in all, then it is abandoned (not
        committed, so redelivered); the last commit, then leaving the group, get
        CLOSE_TIMEOUT_S each while the producer flushes, so stop returns in time also
        when the broker is gone.
        """
        consumer, producer = self._consumer, self._producer
        if consumer is None or producer is None:
            return
        self._stopping = self._records.stopping = True
        revoke_s = self._settings.revoke_timeout_ms / 1000
        deadline = asyncio.get_running_loop().time() + revoke_s
        if self._eos:  # the consume loop ends by itself once its transaction commits
            await asyncio.wait(self._tasks[:1], timeout=revoke_s)
        await cancel_and_wait(self._tasks, f"processor {self.name}")
        for part in self._parts.values():
            part.closed = True  # the workers start no more of its records
        parts = [*self._parts.values(), *self._detached]
        busy = [part.idle.wait() for part in parts if part.active]
        try:
            async with asyncio.timeout_at(deadline):
                await asyncio.gather(*busy)
        except TimeoutError:
            log.warning("processor=%s in-flight work outlived revoke_timeout", self.name)
        await cancel_and_wait(self._workers, f"processor {self.name}")
        # nothing produces now: the producer flushes while the finished prefix is committed
        flushed = asyncio.ensure_future(producer.stop())
        await self._release(list(self._parts))  # nothing runs now: it commits and forgets
        self._workers, self._sessions, self._buffered, self._detached = [], {}, 0, []
        self._ready = asyncio.Queue()
        self._consumer = self._producer = self._records.producer = None
        self._transactions.consumer = None
        await close_within(consumer.stop, f"processor {self.name}: the consumer")
        await flushed

    async def run_forever(self) -> None:
        """Start, then serve until cancelled (Ctrl-C in ``hermesbus up``)."""
        await self.start()
        try:
            await asyncio.Event().wait()
        finally:
            await self.stop()

    @property
    def group_id(self) -> str:
        """The consumer group it runs as."""
        return self._group

    def _partition_count(self, topic: str) -> int | None:
        consumer = self._consumer
        found = consumer.partitions_for_topic(topic) if consumer is not None else None
        return len(found) if found else None

    @property
    def waiting(self) -> int:
        """Records fetched and not yet started: the backlog inside this process."""
        return self._buffered - self._running

    def backlog(self) -> int:
        """What waits in this worker for the bus, not for its own session: sessions with
        records fetched that no worker has taken, all being busy, and, while it paused
        fetching (``max_buffered``), the records past what it fetched as far as its last
        fetch saw their ends (unpaused, it fetches what arrives at once; a log's end may
        be a transaction's marker, no record). A record queued behind its own session's
        running one waits for that, as per-session order requires: not counted. Exactly-
        once mode runs what it fetched in transactions: there it is 0."""
        waiting = max(0, self._ready.qsize() - self._idle)
        consumer = self._consumer
        if consumer is None or not self._paused:
            return waiting
        held = consumer.assignment()
        for part in self._parts.values():
            fetched = part.tracker.next
            if part.closed or fetched is None or part.tp not in held:
                continue
            end = consumer.highwater(part.tp)
            waiting += max(0, end - fetched) if end is not None else 0
        return waiting

    @property
    def in_flight(self) -> int:
        """Records a worker is running now (0 in exactly-once mode, which runs a fetched
        batch in a transaction and keeps no workers)."""
        return self._running

    def commit_lag(self) -> dict[TopicPartition, int]:
        """Per owned partition, the records past its commit point: the log's end as the
        last fetch saw it (in exactly-once mode its last stable offset), less the offset
        last committed (before the first commit, the first offset not finished). A
        partition not fetched from yet is left out; one paused for backpressure reads the
        end its last fetch saw, so its lag is at least what is said."""
        consumer = self._consumer
        lags: dict[TopicPartition, int] = {}
        if consumer is None:
            return lags
        held = consumer.assignment()
        for tp, part in list(self._parts.items()):
            if part.closed or tp not in held:
                continue
            # read_committed: the end a reader may reach (past it: open transactions, markers)
            end = consumer.last_stable_offset(tp) if self._eos else consumer.highwater(tp)
            at = part.committed if part.committed >= 0 else part.tracker.committable()
            if end is not None and at is not None:
                lags[tp] = max(0, end - at)
        return lags

    def waited_within(self, within_s: float) -> bool:
        """Whether, at any time in the last ``within_s`` seconds, a session had to wait for
        a free worker or this worker paused fetching: a round that ran then waited in a
        busy bus, though the backlog may be gone by the time it is asked."""
        at = self._saturated_at
        return at > 0 and time.monotonic() - at <= within_s

    @property
    def finished_at(self) -> float:
        """When (``time.monotonic()``) a worker last finished a record (run, skipped or
        dead-lettered); when it started, before its first. A backlog that none of its
        records leaves is a stuck processor, not a busy one."""
        return self._finished_at

    @property
    def assignment(self) -> list[TopicPartition]:
        return sorted(self._parts, key=lambda tp: (tp.topic, tp.partition))

    # -- rebalancing -----------------------------------------------------------------------

    def _adopt(self, assigned: Sequence[TopicPartition]) -> None:
        for tp in assigned:
            if tp not in self._parts:
                self._parts[tp] = Partition(tp)
        self.joined.set()

    async def _release(self, revoked: Sequence[TopicPartition]) -> None:
        """Stop taking work for ``revoked``, wait (bounded) for in-flight, commit the prefix."""
        parts = [p for tp in revoked if (p := self._parts.get(tp)) is not None]
        older = [p for p in self._detached if p.tp in set(revoked)]  # their old logs' work
        for part in (*parts, *older):
            part.closed = True
        waits = [part.idle.wait() for part in (*parts, *older) if part.active]
        if waits:
            timeout = self._settings.revoke_timeout_ms / 1000
            try:
                async with asyncio.timeout(timeout):  # not wait_for: see lifecycle.cancel_and_wait
                    await asyncio.gather(*waits)
            except TimeoutError:
                log.warning("processor=%s in-flight work outlived revoke_timeout", self.name)
        await self._commit(parts)
        ran = [(p.tp.topic, p.tp.partition) for p in parts if p.resumed == _AT_GATE]
        # the next owner charges its timers nothing up to now (while the broker is away:
        # up to when it went, so the time it is away is not charged either)
        last = self._away_ms if self._away_ms is not None else int(self._clock() * 1000)
        try:
            await self._store.heartbeat(self.name, ran, last)
        except StoreError as exc:
            log.warning("processor=%s last heartbeat: %s", self.name, exc)
        self._records.forget(parts)
        for part in parts:
            if self._parts.get(part.tp) is part:
                del self._parts[part.tp]
            if self._eos and self._producer is not None:
                await self._producer.release(part.tp)

    # -- consuming -------------------------------------------------------------------------

    async def _consume(self) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        while not self._stopping:
            try:
                await self._consume_once(consumer)
            except Exception:  # the loop must outlive any one batch
                log.exception("processor=%s consume loop", self.name)
                await asyncio.sleep(self._settings.infra_retry_ms / 1000)

    async def _consume_once(self, consumer: AIOKafkaConsumer) -> None:
        pause = first = self._settings.infra_retry_ms / 1000
        while True:  # a failing fetch is retried here with backoff, and reported once
            try:
                batch = await consumer.getmany(timeout_ms=100)
                break
            except KafkaError as exc:
                level = logging.WARNING if pause == first else logging.DEBUG
                log.log(level, "processor=%s fetch failed (retrying): %s", self.name, exc)
                await asyncio.sleep(pause)
                if self._stopping:
                    return
                pause = min(pause * 2, 10.0)
        if pause != first:
            log.info("processor=%s fetching again", self.name)
        owned = [(p, rs) for tp, rs in batch.items() if (p := self._parts.get(tp)) and not p.closed]
        if self._eos:
            run = self._transactions.transaction
            await asyncio.gather(*(run(part, records) for part, records in owned))
            return
        for owner, records in owned:
            part = owner
            if not part.tracker.follows(records[0].offset):
                part = self._made_again(owner, records[0].offset)
            for record in records:
                part.tracker.add(record.offset)
                self._enqueue(part, record)
        self._backpressure(consumer)

    def _made_again(self, part: Partition, offset: int) -> Partition:
        """``part``'s offsets went back, to ``offset``, with no rebalance: its log was made
        again (the topic deleted and created, or the broker back empty) and the consumer,
        out of range, started the new log at its beginning. A fresh partition takes the new
        log's records; the old log's records already fetched still run (real turns, in their
        sessions' order), but nothing of them is committed into the new log. Before, every
        batch of the new log below the old position was lost to the consume loop's error,
        and the old position was committed into the new log."""
        log.warning(
            "processor=%s %s-%d: offsets went back from %s to %d with no rebalance: its log "
            "was made again (the topic deleted and created, or the broker came back empty); "
            "the new one is read from %d, and nothing of the old one is committed into it",
            self.name,
            part.tp.topic,
            part.tp.partition,
            part.tracker.next,
            offset,
            offset,
        )
        return self._renew(part)

    def _renew(self, part: Partition) -> Partition:
        """A fresh partition for ``part``'s new log; ``part`` is detached, not closed: what
        was fetched of it still runs (``stop`` waits for it too), and is never committed."""
        self._detached = [p for p in self._detached if p.active] + [part]
        fresh = Partition(part.tp)
        fresh.resumed = part.resumed  # its timers are the store's, not the log's
        self._parts[part.tp] = fresh
        self._records.forget([part])
        return fresh

    async def logs_made_again(self, topics: Collection[str]) -> list[TopicPartition]:
        """``topics`` were created again (``up`` saw the broker lose them): the partitions of
        them this worker holds are read from the new logs' beginning, and nothing of the old
        logs is committed into them. Without this, a consumer that never saw the topics
        missing (no rebalance) kept its old positions: fetching from one the new log had
        already reached skipped the new log's first records. Which partitions were reset."""
        consumer = self._consumer
        if consumer is None or self._eos or self._stopping:
            return []
        held = consumer.assignment()
        reset = sorted(  # not one being revoked (closed): the rebalance reads it afresh
            (
                tp
                for tp, p in self._parts.items()
                if tp.topic in topics and tp in held and not p.closed
            ),
            key=lambda tp: (tp.topic, tp.partition),
        )
        for tp in reset:
            self._renew(self._parts[tp])
        if reset:
            try:
                await consumer.seek_to_beginning(*reset)
            except IllegalStateError:  # a rebalance took them meanwhile: read afresh anyway
                return []
            log.warning(
                "processor=%s reads %d partitions of topics made again from their beginning",
                self.name,
                len(reset),
            )
        return reset

    def _backpressure(self, consumer: AIOKafkaConsumer) -> None:
        limit = self._settings.max_buffered
        if not self._paused and self._buffered >= limit:
            consumer.pause(*consumer.assignment())
            self._paused = True
            self._saturated_at = time.monotonic()
        elif self._paused and self._buffered < limit // 2:
            consumer.resume(*consumer.assignment())
            self._paused = False

    def _enqueue(self, part: Partition, record: Record) -> None:
        key = record.key if record.key is not None else b""
        self._buffered += 1
        queue = self._sessions.get(key)
        if queue is not None:
            queue.append((part, record))
            return
        self._sessions[key] = deque([(part, record)])
        self._ready.put_nowait(key)  # a new session: the next free worker takes it
        if self._ready.qsize() > self._idle:  # no worker free for it: it waits for the bus
            self._saturated_at = time.monotonic()

    async def _work(self) -> None:
        """Take a ready session and run its records in order until it has none left.

        A session is in the ready queue or with one worker, never both, so its records
        never run concurrently; records of a closed (revoked) partition are dropped.
        """
        while True:
            self._idle += 1
            try:
                key = await self._ready.get()
            finally:
                self._idle -= 1
            queue = self._sessions[key]
            while queue:
                part, record = queue[0]
                if not part.closed:
                    self._running += 1
                    try:
                        await self._records.guarded(part, record)
                    except Exception:  # unfinished: redelivered after the next rebalance
                        log.exception("processor=%s offset=%s", self.name, record.offset)
                    finally:
                        self._running -= 1
                        self._finished_at = time.monotonic()
                queue.popleft()
                self._buffered -= 1
            del self._sessions[key]

    # -- commits and timers ----------------------------------------------------------------

    async def _commit_loop(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self._settings.commit_interval_ms / 1000)
            await self._commit(list(self._parts.values()))
            if self._records.expire(time.monotonic()):  # a burst's sessions went idle
                return_freed_memory()

    async def _commit(self, parts: Sequence[Partition]) -> None:
        if self._eos:
            return  # offsets are committed inside each transaction
        consumer = self._consumer
        offsets = {}
        for part in parts:
            position = part.tracker.committable()
            if position is not None and position > part.committed and not part.gone:
                offsets[part.tp] = position
        if not offsets or consumer is None:
            return
        # aiokafka waits for a lost group coordinator for ever: bound it, the last one tightly
        timeout_s = CLOSE_TIMEOUT_S if self._stopping else self._kafka.request_timeout_ms / 1000
        try:
            async with asyncio.timeout(timeout_s):
                member = await commit_as_member(consumer, offsets)
        except TimeoutError:  # the broker is gone; up's broker watch reports that, once
            level = logging.WARNING if self._stopping else logging.DEBUG
            log.log(
                level,
                "processor=%s commit got no answer in %g s; what finished since the last "
                "commit will be redelivered (and skipped as duplicates)",
                self.name,
                timeout_s,
            )
            return
        except UnknownTopicOrPartitionError as exc:
            missing = await _absent(consumer, offsets, timeout_s)
            self._gone([part for part in parts if part.tp in missing], exc)
            return
        except KafkaError as exc:
            log.warning("processor=%s commit failed: %s", self.name, exc)
            return
        if not member:  # its offsets may be of a log the broker lost: never committed
            log.info(
                "processor=%s lost its group membership (did the broker restart?): what "
                "finished since the last commit is not committed, and will be redelivered",
                self.name,
            )
            return
        for part in parts:
            if part.tp in offsets:
                part.committed = offsets[part.tp]

    def _gone(self, parts: Sequence[Partition], refusal: KafkaError) -> None:
        if not parts:  # every topic of the commit is there: refused in passing, sent again
            log.warning("processor=%s commit failed: %s", self.name, refusal)
            return
        """The broker refused to commit ``parts`` for an unknown topic: their log is gone,
        and nothing of it is committed again, neither these offsets (sent again the next
        round, they went into the topic once ``up`` made it again) nor later ones (records
        of the old log that finish once it is back). A new log gets a new partition; what
        finished is redelivered, and skipped."""
        for part in parts:
            part.gone = True
        log.warning(
            "processor=%s commit refused (%s): the log of %s is gone; none of its offsets "
            "is committed, what finished of it is redelivered and skipped",
            self.name,
            refusal,
            ", ".join(sorted(f"{p.tp.topic}-{p.tp.partition}" for p in parts)),
        )

    async def _timer_loop(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self._settings.timer_interval_ms / 1000)
            try:
                await self._fire_due()
            except (BrokerError, StoreError) as exc:
                log.warning("processor=%s timers: %s", self.name, exc)

    async def _resume(self, now_ms: int) -> None:
        """Charge no downtime to timers: at adoption, and once more when the gate opens."""
        opening = self._gate.is_set() and not self._gate_passed
        wanted = _AT_GATE if self._gate.is_set() else _AT_ADOPTION
        for part in list(self._parts.values()):
            if part.closed or part.resumed >= wanted:
                continue
            tp = part.tp
            gap = await self._store.resume(self.name, tp.topic, tp.partition, now_ms)
            part.resumed = wanted
            if gap >= _REPORT_GAP_MS:
                log.info(
                    "processor=%s partition=%s:%s timers moved %.1f s later (not run meanwhile)",
                    self.name,
                    tp.topic,
                    tp.partition,
                    gap / 1000,
                )
        if opening:
            self._gate_passed = True

    async def _broker_back(self, now_ms: int) -> bool:
        """False while the broker is away (nothing fires, no heartbeat is recorded); once
        it is back, every owned partition's timers move later by the time since their last
        heartbeat, so a deadline is not charged the time nothing could answer it."""
        if not self._broker_answers():
            if self._away_ms is None:  # up's broker watch tells the operator, once
                self._away_ms = now_ms
                log.info(
                    "processor=%s the broker is away: timers wait, moved later by the time "
                    "it is away",
                    self.name,
                )
            return False
        if self._away_ms is None:
            return True
        for part in list(self._parts.values()):
            if not part.closed and part.resumed == _AT_GATE:
                tp = part.tp
                await self._store.resume(self.name, tp.topic, tp.partition, now_ms)
        log.info(
            "processor=%s the broker is back after %.1f s: timers moved later by that",
            self.name,
            (now_ms - self._away_ms) / 1000,
        )
        self._away_ms = None
        self._beat_ms = now_ms
        return True

    async def _beat(self, now_ms: int) -> None:
        """Record, about every second, that this worker runs its partitions."""
        if now_ms - self._beat_ms < _HEARTBEAT_MS:
            return
        owned = [
            (p.tp.topic, p.tp.partition) for p in self._parts.values() if p.resumed == _AT_GATE
        ]
        await self._store.heartbeat(self.name, owned, now_ms)
        self._beat_ms = now_ms

    async def _fire_due(self) -> None:
        """Produce every due timer of the partitions this worker owns, then forget it."""
        now_ms = int(self._clock() * 1000)
        if not await self._broker_back(now_ms):
            return
        await self._resume(now_ms)
        if not self._gate_passed:
            return  # the processors the timers wait for may not run yet
        await self._beat(now_ms)
        owned = [(tp.topic, tp.partition) for tp, part in self._parts.items() if not part.closed]
        due = await self._store.due(self.name, owned, now_ms, limit=500)
        self.stats.timers_due = len(due)
        if not due:
            return
        await self._records.produce([timer.record for timer in due])
        for timer in due:
            await self._store.delete_timer(timer.timer_id)
        self.stats.timers_fired += len(due)


def _always() -> bool:
    return True


def member_consumer(kafka: KafkaConfig, group: str, settings: RuntimeSettings) -> AIOKafkaConsumer:
    """A consumer that joins ``group`` as the runtime's processors do (the indexer too):
    from the earliest record, with the runtime's poll and group timings, reading only
    committed records in exactly-once mode, a static member when the settings name the
    instance; it commits only when told. Its client id names the group and the member
    (:func:`member_client_id`), so the group's description says which process holds
    which partition."""
    return group_consumer(
        kafka,
        group,
        client_id=member_client_id(group, settings.instance_id),
        auto_offset_reset="earliest",
        isolation_level="read_committed" if settings.exactly_once else "read_uncommitted",
        max_poll_records=settings.max_poll_records,
        session_timeout_ms=settings.session_timeout_ms,
        heartbeat_interval_ms=settings.heartbeat_interval_ms,
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
        group_instance_id=settings.instance_id or None,  # static membership (KIP-345)
    )


def member_client_id(group: str, instance_id: str = "") -> str:
    """``GROUP.INSTANCE``: the static instance id, else ``HOST-PID`` (letters, digits, '.',
    '_' and '-' only, as Kafka's quotas and tools take it), what ``kafka-consumer-groups.sh
    --describe`` shows as CLIENT-ID and the broker puts in front of the member id."""
    member = instance_id or f"{socket.gethostname()}-{os.getpid()}"
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{group}.{member}")


async def _absent(
    consumer: AIOKafkaConsumer, offsets: Mapping[TopicPartition, int], timeout_s: float
) -> set[TopicPartition]:
    """The partitions of a commit refused for an unknown topic whose topic is gone (asked
    of the cluster now, within ``timeout_s``; unanswered: all of them, which is safe)."""
    try:
        async with asyncio.timeout(timeout_s):
            return await absent(consumer, offsets)
    except TimeoutError:
        return set(offsets)


def _loaded(keyring: Callable[[], Keyring] | None, who: str) -> Keyring:
    """The keys ``keyring()`` loads; a processor given neither ``keys`` nor ``keyring`` is
    refused (the program's keys are its settings' to find, never guessed here)."""
    if keyring is None:
        raise ConfigError(f"{who}: give it keys= or keyring= (the program's keys)")
    return keyring()

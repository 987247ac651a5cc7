"""The processor runtime: one consumer group, sessions in order, nothing lost.

Records of one session (the Kafka key) run strictly one after another in offset
order; different sessions run concurrently, at most ``max_in_flight`` at once.
Offsets are committed only up to the contiguous prefix of finished records. Each
record's effects (state, outputs, timers) are saved in one compare-and-set
before its outputs are produced, so a crash at any point either replays the
record or re-sends its saved outputs, never applies it twice.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType, TracebackType
from typing import Any, Self, TypeAlias

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError, ProducerFenced

from hermesbus import headers as h
from hermesbus.codec import Codec, default_codec
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.envelope import Envelope
from hermesbus.errors import BrokerError, ConfigError, ContractError, DecodeError, StoreError
from hermesbus.topics import DLQ

from . import _effects as fx
from ._model import EMPTY, Handler, HandlerInput, SessionState
from ._offsets import OffsetTracker
from ._producer import Producer
from ._rebalance import Rebalance
from ._settings import RuntimeSettings
from ._store import OutRecord, StateChange, StateStore

__all__ = ["Processor", "ProcessorStats"]

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
Record: TypeAlias = ConsumerRecord[bytes, bytes]


@dataclass
class ProcessorStats:
    """Counters a processor keeps (also what ``hermesbus up`` prints on exit)."""

    processed: int = 0
    duplicates: int = 0
    retries: int = 0
    dead_letters: int = 0
    timers_fired: int = 0
    fenced: int = 0
    aborted: int = 0
    """Transactions aborted because a handler failed (exactly-once mode)."""


class _Partition:
    """A partition this worker owns: its offsets, in-flight count and whether it is closed."""

    __slots__ = (
        "active",
        "closed",
        "committed",
        "failed",
        "idle",
        "sent",
        "settled",
        "tp",
        "tracker",
    )

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.tracker = OffsetTracker()
        self.committed = -1
        self.closed = False
        self.active = 0
        self.idle = asyncio.Event()
        self.idle.set()
        # exactly-once mode: what the open transaction holds
        self.sent: list[OutRecord] = []
        self.failed: list[tuple[Record, Envelope, Exception]] = []
        self.settled: list[tuple[str, str]] = []


class Processor:
    """Runs ``handler`` as consumer group ``group_id`` (default: the processor's name)."""

    def __init__(
        self,
        name: str,
        handler: Handler,
        topics: Sequence[str],
        *,
        store: StateStore,
        kafka: KafkaConfig | None = None,
        settings: RuntimeSettings | None = None,
        ports: Mapping[str, Any] | None = None,
        codec: Codec | None = None,
        topic_prefix: str = "",
        group_id: str | None = None,
    ) -> None:
        if not _NAME.match(name):
            raise ConfigError(f"processor name {name!r}: use lowercase letters, digits, - and _")
        self.name = name
        self.stats = ProcessorStats()
        self._handler = handler
        self._topics = [topic_prefix + t for t in topics]
        self._store = store
        self._kafka = kafka or KafkaConfig()
        self._settings = settings or RuntimeSettings()
        self._ports = MappingProxyType(dict(ports or {})) if ports else EMPTY
        self._codec = codec or default_codec()
        self._prefix = topic_prefix
        self._group = group_id or name
        self._parts: dict[TopicPartition, _Partition] = {}
        self._sessions: dict[bytes, deque[tuple[_Partition, Record]]] = {}
        self._slots = asyncio.Semaphore(self._settings.max_in_flight)
        self._buffered = 0
        self._paused = False
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: Producer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._workers: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._eos = self._settings.exactly_once
        self._cache: OrderedDict[str, tuple[_Partition, SessionState]] = OrderedDict()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Join the group and start consuming; safe to call twice."""
        if self._consumer is not None:
            return
        self._stopping = False
        settings = self._settings
        producer = Producer(self._kafka, self._group, exactly_once=settings.exactly_once)
        try:
            await producer.start()  # first: exactly-once mode is refused before joining
        except KafkaError as exc:
            await producer.stop()
            raise BrokerError(f"processor {self.name}: cannot reach Kafka: {exc}") from exc
        consumer = AIOKafkaConsumer(
            **self._kafka.client_kwargs(),
            group_id=self._group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed" if settings.exactly_once else "read_uncommitted",
            max_poll_records=settings.max_poll_records,
            session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=settings.heartbeat_interval_ms,
            fetch_max_wait_ms=settings.fetch_max_wait_ms,
        )
        consumer.subscribe(self._topics, listener=Rebalance(self._adopt, self._release))
        try:
            await consumer.start()
        except KafkaError as exc:
            await producer.stop()
            await consumer.stop()
            raise BrokerError(f"processor {self.name}: cannot reach Kafka: {exc}") from exc
        self._consumer, self._producer = consumer, producer
        self._tasks = [
            asyncio.create_task(self._consume(), name=f"{self.name}-consume"),
            asyncio.create_task(self._commit_loop(), name=f"{self.name}-commit"),
            asyncio.create_task(self._timer_loop(), name=f"{self.name}-timers"),
        ]

    async def stop(self) -> None:
        """Finish in-flight work (bounded), commit the finished prefix, leave the group."""
        consumer, producer = self._consumer, self._producer
        if consumer is None or producer is None:
            return
        self._stopping = True
        # the consume loop ends by itself after its current batch (a transaction commits)
        await asyncio.wait(self._tasks[:1], timeout=self._settings.revoke_timeout_ms / 1000)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._release(list(self._parts))
        for task in list(self._workers):
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._consumer = self._producer = None
        await consumer.stop()
        await producer.stop()

    async def run_forever(self) -> None:
        """Start, then serve until cancelled (Ctrl-C in ``hermesbus up``)."""
        await self.start()
        try:
            await asyncio.Event().wait()
        finally:
            await self.stop()

    @property
    def assignment(self) -> list[TopicPartition]:
        return sorted(self._parts, key=lambda tp: (tp.topic, tp.partition))

    # -- rebalancing -----------------------------------------------------------------------

    def _adopt(self, assigned: Sequence[TopicPartition]) -> None:
        for tp in assigned:
            if tp not in self._parts:
                self._parts[tp] = _Partition(tp)

    async def _release(self, revoked: Sequence[TopicPartition]) -> None:
        """Stop taking work for ``revoked``, wait (bounded) for in-flight, commit the prefix."""
        parts = [p for tp in revoked if (p := self._parts.get(tp)) is not None]
        for part in parts:
            part.closed = True
        waits = [part.idle.wait() for part in parts if part.active]
        if waits:
            timeout = self._settings.revoke_timeout_ms / 1000
            try:
                await asyncio.wait_for(asyncio.gather(*waits), timeout)
            except TimeoutError:
                log.warning("processor=%s in-flight work outlived revoke_timeout", self.name)
        await self._commit(parts)
        for session_id in [s for s, (p, _) in self._cache.items() if p in parts]:
            del self._cache[session_id]
        for part in parts:
            self._parts.pop(part.tp, None)
            if self._eos and self._producer is not None:
                await self._producer.release(part.tp)

    # -- consuming -------------------------------------------------------------------------

    async def _consume(self) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        while not self._stopping:
            try:
                batch = await consumer.getmany(timeout_ms=100)
            except KafkaError as exc:
                log.warning("processor=%s fetch failed: %s", self.name, exc)
                await asyncio.sleep(self._settings.infra_retry_ms / 1000)
                continue
            owned = [
                (p, rs) for tp, rs in batch.items() if (p := self._parts.get(tp)) and not p.closed
            ]
            if self._eos:
                await asyncio.gather(*(self._transaction(part, records) for part, records in owned))
                continue
            for part, records in owned:
                for record in records:
                    part.tracker.add(record.offset)
                    self._enqueue(part, record)
            self._backpressure(consumer)

    def _backpressure(self, consumer: AIOKafkaConsumer) -> None:
        limit = self._settings.max_buffered
        if not self._paused and self._buffered >= limit:
            consumer.pause(*consumer.assignment())
            self._paused = True
        elif self._paused and self._buffered < limit // 2:
            consumer.resume(*consumer.assignment())
            self._paused = False

    def _enqueue(self, part: _Partition, record: Record) -> None:
        key = record.key if record.key is not None else b""
        self._buffered += 1
        queue = self._sessions.get(key)
        if queue is not None:
            queue.append((part, record))
            return
        queue = self._sessions[key] = deque([(part, record)])
        task = asyncio.create_task(self._drain(key, queue))
        self._workers.add(task)
        task.add_done_callback(self._workers.discard)

    async def _drain(self, key: bytes, queue: deque[tuple[_Partition, Record]]) -> None:
        """Run one session's records in order; records of a closed partition are dropped."""
        try:
            while queue:
                part, record = queue[0]
                if not part.closed:
                    async with self._slots:
                        if not part.closed:  # it may have been revoked while we waited
                            await self._guarded(part, record)
                queue.popleft()
                self._buffered -= 1
        finally:
            if self._sessions.get(key) is queue:
                del self._sessions[key]
                self._buffered -= len(queue)

    async def _guarded(self, part: _Partition, record: Record) -> None:
        """Process one record; store and broker outages are retried in place, in order."""
        part.active += 1
        part.idle.clear()
        pause = self._settings.infra_retry_ms / 1000
        try:
            while True:
                try:
                    finished = await self._process(part, record)
                except (BrokerError, StoreError) as exc:
                    if self._eos:
                        raise  # the transaction is rewound as a whole
                    if part.closed or self._stopping:
                        return
                    log.warning(
                        "processor=%s retrying offset=%s: %s", self.name, record.offset, exc
                    )
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, 10.0)
                    continue
                except Exception as exc:  # a bug: dead-letter the record rather than stall
                    log.exception("processor=%s failed on offset=%s", self.name, record.offset)
                    await self._dead_letter(part, record, exc, _attempt(record))
                    finished = True
                if finished:
                    part.tracker.finish(record.offset)
                return
        finally:
            part.active -= 1
            if not part.active:
                part.idle.set()

    # -- one record ------------------------------------------------------------------------

    async def _process(self, part: _Partition, record: Record) -> bool:
        """Handle one record; False means this worker was fenced and must not commit it."""
        try:
            envelope = self._codec.decode(record.value or b"")
            _check_key(record, envelope)
        except DecodeError as exc:
            await self._dead_letter(part, record, exc, _attempt(record))
            return True
        state = await self._state(part, envelope.session_id)
        if envelope.message_id in state.applied:
            self.stats.duplicates += 1
            await self._flush(part, envelope.session_id, envelope.message_id)
            return True
        try:
            change = await self._run(part, record, envelope, state)
        except ContractError as exc:
            await self._dead_letter(part, record, exc, envelope.metadata.attempt)
            return True
        except Exception as exc:  # any handler failure: retried or dead-lettered
            if self._eos:  # aborts the partition's transaction; settled after the batch
                part.failed.append((record, envelope, exc))
            else:
                await self._retry_or_dead_letter(part, record, envelope, exc)
            return True
        if not await self._store.commit(self.name, envelope.session_id, change):
            self._cache.pop(envelope.session_id, None)
            self.stats.fenced += 1
            part.closed = True
            log.error(
                "processor=%s fenced on session=%s partition=%s: another worker saved it first;"
                " dropping this partition's work without committing",
                self.name,
                envelope.session_id,
                part.tp,
            )
            return False
        saved = SessionState(change.expected_version + 1, change.data, change.applied)
        self._remember(part, envelope.session_id, saved)
        await self._emit(part, change.outbox)
        await self._settle(part, envelope.session_id, envelope.message_id)
        self.stats.processed += 1
        return True

    async def _state(self, part: _Partition, session_id: str) -> SessionState:
        """The session's state: cached while this worker owns its partition, else loaded."""
        cached = self._cache.get(session_id)
        if cached is not None and cached[0] is part:
            self._cache.move_to_end(session_id)
            return cached[1]
        state = await self._store.load(self.name, session_id)
        self._remember(part, session_id, state)
        return state

    def _remember(self, part: _Partition, session_id: str, state: SessionState) -> None:
        cache = self._cache
        cache[session_id] = (part, state)
        cache.move_to_end(session_id)
        if len(cache) > self._settings.state_cache_size:
            cache.popitem(last=False)

    async def _run(
        self, part: _Partition, record: Record, envelope: Envelope, state: SessionState
    ) -> StateChange:
        """Call the handler and turn its outcome into one atomic state change."""
        outcome = await self._handler(
            HandlerInput(
                envelope,
                state,
                self.name,
                self._ports,
                record.topic,
                record.partition,
                record.offset,
            )
        )
        if outcome.state is not None:
            json.dumps(dict(outcome.state))  # a state the store cannot save fails the handler
        window = self._settings.applied_window
        timers = fx.timers(
            self._codec,
            self.name,
            envelope,
            outcome.timers,
            topic=part.tp.topic,
            partition=part.tp.partition,
        )
        return StateChange(
            expected_version=state.version,
            message_id=envelope.message_id,
            data=state.data if outcome.state is None else outcome.state,
            applied=(*state.applied, envelope.message_id)[-window:],
            outbox=fx.outputs(self._codec, envelope, outcome, self._prefix),
            timers=timers,
            cancel=tuple(outcome.cancel),
            # the session's previous outbox went out before this record started, unless it
            # waits for its transaction to commit (exactly-once mode clears it then)
            clear_previous=not self._eos,
        )

    async def _flush(self, part: _Partition, session_id: str, message_id: str) -> None:
        """Re-send what an already-applied envelope emitted, if it may not have gone out."""
        pending = await self._store.outbox(self.name, session_id, message_id)
        if pending:
            await self._emit(part, pending)
            await self._settle(part, session_id, message_id)

    async def _emit(self, part: _Partition, records: Sequence[OutRecord]) -> None:
        """Produce now, or add to the partition's open transaction in exactly-once mode."""
        if not self._eos:
            await self._produce(records)
        elif records and self._producer is not None:
            part.sent.extend(records)
            await self._producer.send_in_transaction(part.tp, records)

    async def _settle(self, part: _Partition, session_id: str, message_id: str) -> None:
        """The outbox of ``message_id`` is out; cleared after the transaction commits.

        Without transactions it is cleared by the session's next commit (one write per
        record): a session's records run in order, so the next one starts only after
        this outbox was produced.
        """
        if self._eos:
            part.settled.append((session_id, message_id))

    async def _retry_or_dead_letter(
        self, part: _Partition, record: Record, envelope: Envelope, error: Exception
    ) -> None:
        attempt = envelope.metadata.attempt
        if attempt >= envelope.metadata.retry_policy.max_attempts:
            await self._dead_letter(part, record, error, attempt)
            return
        log.info(
            "processor=%s handler failed on message=%s attempt=%s: %s",
            self.name,
            envelope.message_id,
            attempt,
            error,
        )
        timer = fx.retry_timer(
            self._codec,
            self.name,
            envelope,
            now_ms=int(time.time() * 1000),
            max_backoff_ms=self._settings.max_backoff_ms,
            topic=part.tp.topic,
            partition=part.tp.partition,
        )
        await self._store.schedule(timer)
        self.stats.retries += 1

    async def _dead_letter(
        self, part: _Partition, record: Record, error: BaseException, attempt: int
    ) -> None:
        log.warning(
            "processor=%s dead-letter topic=%s partition=%s offset=%s: %s: %s",
            self.name,
            record.topic,
            record.partition,
            record.offset,
            type(error).__name__,
            error,
        )
        letter = fx.dead_letter(
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            value=record.value or b"",
            headers=list(record.headers),
            error=error,
            processor=self.name,
            attempt=attempt,
            dlq_topic=self._prefix + DLQ,
        )
        await self._emit(part, (letter,))
        self.stats.dead_letters += 1

    async def _produce(self, records: Sequence[OutRecord]) -> None:
        if records:
            producer = self._producer
            if producer is None:
                raise BrokerError(f"processor {self.name} is stopped")
            await producer.send_all(records)

    # -- exactly-once ----------------------------------------------------------------------

    async def _transaction(self, part: _Partition, records: Sequence[Record]) -> None:
        """One transaction per fetched batch of a partition: its outputs and its offsets.

        A handler failure aborts the transaction, so no output of the batch becomes
        visible; a new one then carries the batch's other outputs again (from memory,
        as saved in their outboxes) and the failure's retry or dead letter.
        """
        producer = self._producer
        if producer is None or not records:
            return
        part.active += 1
        part.idle.clear()
        part.sent, part.failed, part.settled = [], [], []
        try:
            txn = await producer.transactional(part.tp)
            await txn.begin_transaction()
            sessions: dict[bytes, list[Record]] = {}
            for record in records:
                part.tracker.add(record.offset)
                sessions.setdefault(record.key or b"", []).append(record)
            async with asyncio.TaskGroup() as group:  # one failure cancels the others
                for session_records in sessions.values():
                    group.create_task(self._in_order(part, session_records))
            if part.closed:  # fenced or revoked meanwhile: nothing of this batch may count
                await txn.abort_transaction()
                return
            if part.failed:
                await self._abort_and_redo(part, txn)
            position = records[-1].offset + 1
            await txn.send_offsets_to_transaction({part.tp: position}, self._group)
            await txn.commit_transaction()
            part.committed = position
            for session_id, message_id in part.settled:
                await self._store.clear_outbox(self.name, session_id, message_id)
        except* ProducerFenced:
            part.closed = True  # a newer owner of this partition took over: we are a zombie
            log.warning("processor=%s fenced out of %s", self.name, part.tp)
        except* (KafkaError, BrokerError, StoreError) as failures:
            log.warning("processor=%s transaction of %s failed: %s", self.name, part.tp, failures)
            await self._rewind(part)
        finally:
            part.sent, part.failed, part.settled = [], [], []
            part.active -= 1
            if not part.active:
                part.idle.set()

    async def _rewind(self, part: _Partition) -> None:
        """After a failed transaction: a fresh producer, and back to the committed offset."""
        consumer, producer = self._consumer, self._producer
        if consumer is None or producer is None:
            return
        await producer.release(part.tp)  # aborts what was open; the next one starts clean
        position = part.committed if part.committed >= 0 else await consumer.committed(part.tp)
        if position is None:
            await consumer.seek_to_beginning(part.tp)  # nothing committed: auto_offset_reset
        else:
            consumer.seek(part.tp, position)
        part.tracker = OffsetTracker()
        await asyncio.sleep(self._settings.infra_retry_ms / 1000)

    async def _in_order(self, part: _Partition, records: Sequence[Record]) -> None:
        for record in records:
            if part.closed:
                return
            async with self._slots:
                await self._guarded(part, record)

    async def _abort_and_redo(self, part: _Partition, txn: AIOKafkaProducer) -> None:
        await txn.abort_transaction()
        self.stats.aborted += 1
        await txn.begin_transaction()
        sent, part.sent = part.sent, []
        await self._emit(part, sent)
        for record, envelope, error in part.failed:
            await self._retry_or_dead_letter(part, record, envelope, error)

    # -- commits and timers ----------------------------------------------------------------

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self._settings.commit_interval_ms / 1000)
            await self._commit(list(self._parts.values()))

    async def _commit(self, parts: Sequence[_Partition]) -> None:
        if self._eos:
            return  # offsets are committed inside each transaction
        consumer = self._consumer
        offsets = {}
        for part in parts:
            position = part.tracker.committable()
            if position is not None and position > part.committed:
                offsets[part.tp] = position
        if not offsets or consumer is None:
            return
        try:
            await consumer.commit(offsets)
        except KafkaError as exc:
            log.warning("processor=%s commit failed: %s", self.name, exc)
            return
        for part in parts:
            if part.tp in offsets:
                part.committed = offsets[part.tp]

    async def _timer_loop(self) -> None:
        while True:
            await asyncio.sleep(self._settings.timer_interval_ms / 1000)
            try:
                await self._fire_due()
            except (BrokerError, StoreError) as exc:
                log.warning("processor=%s timers: %s", self.name, exc)

    async def _fire_due(self) -> None:
        """Produce every due timer of the partitions this worker owns, then forget it."""
        owned = [(tp.topic, tp.partition) for tp, part in self._parts.items() if not part.closed]
        now_ms = int(time.time() * 1000)
        due = await self._store.due(self.name, owned, now_ms, limit=500)
        if not due:
            return
        await self._produce([timer.record for timer in due])
        for timer in due:
            await self._store.delete_timer(timer.timer_id)
        self.stats.timers_fired += len(due)


def _check_key(record: Record, envelope: Envelope) -> None:
    """The Kafka key is the session id: anything else breaks per-session order."""
    key = record.key.decode("utf-8", "replace") if record.key is not None else None
    if key != envelope.session_id:
        raise ContractError(
            f"record key {key!r} is not the envelope's session_id {envelope.session_id!r}"
        )


def _attempt(record: Record) -> int:
    value = h.header(list(record.headers), h.DLQ_ATTEMPT)
    return int(value) if value and value.isdigit() else 1

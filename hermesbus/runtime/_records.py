"""One record through the runtime: decode, state, handler, one atomic save, produce.

Each record's effects (state, outputs, timers) are saved in one compare-and-set
before its outputs are produced, so a crash at any point either replays the
record or re-sends its saved outputs, never applies it twice; a worker that lost
the compare-and-set (a zombie) emits nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from hermesbus.codec import Codec
from hermesbus.connectors.kafka import PARTITIONER_HINT, partition_of
from hermesbus.contract.envelope import Envelope
from hermesbus.contract.fields import epoch_ms
from hermesbus.contract.headers import DLQ_NOTE
from hermesbus.errors import (
    BrokerError,
    ContractError,
    DecodeError,
    IdentityError,
    RegistryError,
    StoreError,
    StoreLost,
)
from hermesbus.identity import Guard
from hermesbus.topics import ALERTS, DLQ

from . import _effects as fx
from ._applied import appended, floor_of
from ._model import (
    Handler,
    HandlerInput,
    HandlerRun,
    ModelState,
    Observer,
    Pause,
    PauseNotice,
    SessionState,
)
from ._partition import Partition, ProcessorStats, Record, attempt_of, check_key
from ._producer import Producer
from ._settings import RuntimeSettings
from ._store import OutRecord, StateChange, StateStore

__all__ = ["Records", "outage"]

log = logging.getLogger(__name__)

_MAX_RETRY_PAUSE_S = 10.0


class _MovedOn(StoreError):
    """Another worker saved the session first: retried at once, not an outage to tell."""


def outage(error: BaseException) -> bool:
    """A backend that is away, busy or full (a store, the broker, the schema registry):
    the record waits in place until it answers, in order, and is never dead-lettered.

    A handler's own bug, a store refusing the request itself (``retriable=False``), or
    a registry that answers 4xx, is not: the retry policy and the dead-letter topic are."""
    if isinstance(error, StoreError | BrokerError):
        return error.retriable
    if isinstance(error, RegistryError):
        return error.outage
    return False


_OBSERVER_LOG_EVERY = 1000
"""A failing observer is logged the first time and every this many failures after."""


class Records:
    """Processes records for one processor; the Processor owns the consuming around it."""

    def __init__(
        self,
        name: str,
        handler: Handler,
        *,
        store: StateStore,
        codec: Codec,
        settings: RuntimeSettings,
        ports: Mapping[str, Any],
        prefix: str,
        stats: ProcessorStats,
        guard: Guard,
        clock: Callable[[], float] = time.time,
        dead_letter_undecodable: bool = True,
        partitions: Callable[[str], int | None] = lambda _topic: None,
        paused: PauseNotice | None = None,
        observe: Observer | None = None,
    ) -> None:
        """``partitions(topic)`` is the topic's partition count (None: unknown yet), to
        refuse a record that is not on the partition its key maps to; ``paused`` says
        what to tell the sender of a record an outage holds (see :data:`PauseNotice`)."""
        self.name = name
        self.paused = paused
        self.observe = observe
        self._observer_failed = 0
        self.guard = guard
        self.partitions = partitions
        self.clock = clock
        self.dead_letter_undecodable = dead_letter_undecodable
        self.handler = handler
        self.store = store
        self.codec = codec
        self.settings = settings
        self.ports = ports
        self.prefix = prefix
        self.stats = stats
        self.eos = settings.exactly_once
        self.producer: Producer | None = None
        self.stopping = False
        self.cache: OrderedDict[str, tuple[Partition, SessionState]] = OrderedDict()
        self.used: dict[str, float] = {}
        """When each cached state was last used (``time.monotonic``), for ``expire``."""

    def _ran(
        self,
        record: Record,
        envelope: Envelope,
        began: float,
        wall_ns: int,
        error: BaseException | None,
        *,
        ended: float | None = None,
    ) -> None:
        """A handler run, timed (``began``/``ended``: ``perf_counter()`` at its start and
        end, the end now if not given; ``wall_ns``: the wall clock at its start) and told to
        the observer. What the observer raises is logged (the first time, then every
        :data:`_OBSERVER_LOG_EVERY`-th), never the record's failure."""
        took_s = (time.perf_counter() if ended is None else ended) - began
        self.stats.handler_ms.observe(took_s * 1000)
        if self.observe is None:
            return
        where = (record.topic, record.partition, record.offset)
        ran = HandlerRun(self.name, envelope, *where, wall_ns, wall_ns + int(took_s * 1e9), error)
        try:
            self.observe(ran)
        except Exception:
            self._observer_failed += 1
            if self._observer_failed % _OBSERVER_LOG_EVERY == 1:
                log.exception(
                    "processor=%s: its observer failed (%d times so far; the records are "
                    "unaffected)",
                    self.name,
                    self._observer_failed,
                )

    def forget(self, parts: Sequence[Partition]) -> None:
        """Drop the cached states of sessions on partitions this worker no longer owns."""
        for session_id in [s for s, (p, _) in self.cache.items() if p in parts]:
            del self.cache[session_id]

    async def guarded(self, part: Partition, record: Record) -> None:
        """Process one record; an outage of a store, the broker or the schema registry
        (:func:`outage`), wherever it shows (the runtime's own state or a handler's
        port), is retried in place with back-off, in order, committing nothing past it.
        The record's sender is told it is paused (``paused``) at once and while it lasts."""
        part.active += 1
        part.idle.clear()
        pause = self.settings.infra_retry_ms / 1000
        held: list[int] = []  # [since_ms, notices sent] once an outage holds the record
        try:
            while True:
                try:
                    finished = await self._attempt(part, record)
                except Exception as exc:
                    if not outage(exc) or self.eos:
                        raise  # exactly-once: the transaction is rewound as a whole
                    if part.closed or self.stopping:
                        return
                    log.warning(
                        "processor=%s retrying offset=%s in place: %s",
                        self.name,
                        record.offset,
                        exc,
                    )
                    if isinstance(exc, StoreLost):
                        await self._alert_lost(record, exc)
                    await self._tell_paused(record, exc, held)
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, self._longest_pause())
                    continue
                if held:
                    lasted = (self.clock() * 1000 - held[0]) / 1000
                    log.info(
                        "processor=%s offset=%s done after an outage of %.1f s",
                        self.name,
                        record.offset,
                        lasted,
                    )
                if finished:
                    part.tracker.finish(record.offset)
                return
        finally:
            part.active -= 1
            if not part.active:
                part.idle.set()

    def _longest_pause(self) -> float:
        if self.paused is None:
            return _MAX_RETRY_PAUSE_S
        return min(_MAX_RETRY_PAUSE_S, self.settings.pause_notice_ms / 1000)

    async def _tell_paused(self, record: Record, error: Exception, held: list[int]) -> None:
        """Send the record's pause notice, if its processor has one for it. Best effort:
        the broker may be what is away, and no failure here may drop the held record."""
        now_ms = int(self.clock() * 1000)
        if not held:
            held.extend((now_ms, 0))
            self.stats.held += 1
        if self.paused is None or not record.value or isinstance(error, _MovedOn):
            return
        try:
            envelope = self.codec.decode(record.value)
            every = self.settings.pause_notice_ms
            news = self.paused(envelope, Pause(error, held[0], now_ms, every, held[1]))
            if news is None:
                return
            held[1] += 1
            await self.produce((fx.notice(self.codec, self.guard.sign, news, self.prefix),))
        except Exception as exc:
            log.debug("processor=%s pause notice not sent: %s", self.name, exc)

    async def _news(self, envelope: Envelope) -> None:
        """Send a handler's news at once (:attr:`HandlerInput.news`). Best effort like a
        pause notice: its receiver admits it by the write policy, as any record."""
        try:
            await self.produce((fx.notice(self.codec, self.guard.sign, envelope, self.prefix),))
        except Exception as exc:
            log.debug("processor=%s news not sent: %s", self.name, exc)

    async def _alert_lost(self, record: Record, lost: StoreLost) -> None:
        """Raise the store's loss on ``hermes.alerts``, once per loss however many processors
        it holds (:meth:`StoreLost.claim_alert`). Best effort like a pause notice: one
        not sent is claimed again on the next retry."""
        if not lost.claim_alert():
            return
        try:
            alert = fx.store_alert(
                self.codec,
                self.guard.sign,
                processor=self.name,
                identity=self.guard.identity,
                record=record,
                session_id=record.key.decode("utf-8", "replace") if record.key else "",
                lost=lost,
                at_ms=int(self.clock() * 1000),
                topic=self.prefix + ALERTS,
            )
            await self.produce((alert,))
        except BaseException as exc:  # cancelled too (a revocation, a stop): not sent
            lost.release_alert()
            if not isinstance(exc, Exception):
                raise
            log.debug("processor=%s store alert not sent: %s", self.name, exc)

    async def _attempt(self, part: Partition, record: Record) -> bool:
        """``process``; a record that can never be handled is dead-lettered instead.

        Outages (:func:`outage`) go up to be retried in place.
        """
        try:
            return await self.process(part, record)
        except Exception as exc:
            if outage(exc):
                raise
            if not isinstance(exc, BrokerError | StoreError):  # else: e.g. an output
                # larger than the broker accepts, a query the store refuses
                log.exception("processor=%s failed on offset=%s", self.name, record.offset)
            error: Exception = exc  # a bug: dead-letter the record rather than stall
        await self.dead_letter(part, record, error, attempt_of(record))
        return True

    async def process(self, part: Partition, record: Record) -> bool:
        """Handle one record; False means this worker was fenced and must not commit it.

        Before anything runs: the record's signature, its envelope, its key and partition,
        and whether its signer may send it here. A record failing any of them is
        dead-lettered with the reason (a refused signer also raises an alert).
        """
        envelope = await self.admitted(part, record)
        if envelope is None:
            return True
        cached = self.cache.get(envelope.session_id)  # the common case, without an await
        if cached is not None and cached[0] is part:
            state = cached[1]
        else:
            state = await self.state(part, envelope.session_id)
        if envelope.message_id in state.applied:
            self.stats.duplicates += 1
            await self.flush(part, envelope.session_id, envelope.message_id)
            return True
        if epoch_ms(envelope.timestamp) <= floor_of(state.applied):  # see ``_applied``
            self.stats.duplicates += 1
            log.warning(
                "processor=%s skipped message=%s of session=%s offset=%s: dated at or before "
                "what the session applied long ago (a re-sent record)",
                self.name,
                envelope.message_id,
                envelope.session_id,
                record.offset,
            )
            return True
        return await self._apply(part, record, envelope, state)

    async def _apply(
        self, part: Partition, record: Record, envelope: Envelope, state: SessionState
    ) -> bool:
        """Run the handler on a new envelope, save its effects, then produce them.

        The run is timed and told to the observer as the envelope's once its state is
        saved (the run that took effect); a run that failed is told as a failed attempt.
        A run revoked, or that lost its session to another worker, is told nothing: it is
        redone where it took effect."""
        began, wall_ns = time.perf_counter(), time.time_ns()
        try:
            change, took = await self.run(part, record, envelope, state)
            ended = time.perf_counter()
        except ContractError as exc:
            self._ran(record, envelope, began, wall_ns, exc)
            await self.dead_letter(part, record, exc, envelope.metadata.attempt)
            return True
        except Exception as exc:  # a handler's failure: retried or dead-lettered
            if outage(exc):
                raise  # a port's backend is away: the record waits in place
            self._ran(record, envelope, began, wall_ns, exc)
            if self.eos:  # aborts the partition's transaction; settled after the batch
                part.failed.append((record, envelope, exc))
            else:
                await self.retry_or_dead_letter(part, record, envelope, exc)
            return True
        if part.closed:
            return False  # revoked while the handler ran: the new owner redoes it
        if not await self._save(envelope.session_id, change):
            return await self._lost_race(part, envelope)
        if took:  # else another group's envelope: nothing ran, nothing to time or count
            self._ran(record, envelope, began, wall_ns, None, ended=ended)
        # the cached state stays read-only too (a ModelState is: its model is frozen)
        data = _read_only(change.data) if change.data_changed else state.data
        saved = SessionState(change.expected_version + 1, data, change.applied)
        self.remember(part, envelope.session_id, saved)
        if change.outbox:
            await self.emit(part, change.outbox)
        if self.eos:
            await self.settle(part, envelope.session_id, envelope.message_id)
        if took:
            self.stats.processed += 1
            where = (record.topic, record.partition)
            self.stats.processed_by[where] = self.stats.processed_by.get(where, 0) + 1
        return True

    async def _save(self, session_id: str, change: StateChange) -> bool:
        try:
            return await self.store.commit(self.name, session_id, change)
        except BaseException:
            self.cache.pop(session_id, None)  # it may or may not have been written
            raise

    async def _lost_race(self, part: Partition, envelope: Envelope) -> bool:
        """Another worker saved this session first (a zombie, or us being one).

        If it applied this very envelope, it also emits its outputs: this worker emits
        nothing and moves on. Otherwise the record is retried with the saved state.
        """
        self.stats.fenced += 1
        self.cache.pop(envelope.session_id, None)
        log.warning(
            "processor=%s lost the compare-and-set on session=%s partition=%s",
            self.name,
            envelope.session_id,
            part.tp,
        )
        state = await self.state(part, envelope.session_id)
        if envelope.message_id in state.applied:
            return True
        if part.closed:
            return False
        raise _MovedOn(f"session {envelope.session_id} moved on meanwhile: retrying")

    async def state(self, part: Partition, session_id: str) -> SessionState:
        """The session's state: cached while this worker owns its partition, else loaded."""
        cached = self.cache.get(session_id)
        if cached is not None and cached[0] is part:
            self.cache.move_to_end(session_id)
            self.used[session_id] = time.monotonic()
            return cached[1]
        state = await self.store.load(self.name, session_id)
        self.remember(part, session_id, state)
        return state

    def remember(self, part: Partition, session_id: str, state: SessionState) -> None:
        cache = self.cache
        cache[session_id] = (part, state)
        cache.move_to_end(session_id)
        self.used[session_id] = time.monotonic()
        if len(cache) > self.settings.state_cache_size:
            self.used.pop(cache.popitem(last=False)[0], None)

    def expire(self, now: float) -> int:
        """Drop the cached states unused for ``state_cache_idle_s`` (least recently used
        first, in the cache's order); how many were dropped."""
        oldest = now - self.settings.state_cache_idle_s
        cache, used, dropped = self.cache, self.used, 0
        while cache:
            session_id = next(iter(cache))
            if used.get(session_id, 0.0) > oldest:
                break
            del cache[session_id]
            used.pop(session_id, None)
            dropped += 1
        if len(used) > len(cache):  # states dropped elsewhere (a revoke, a failed save)
            self.used = {s: t for s, t in used.items() if s in cache}
        return dropped

    async def run(
        self, part: Partition, record: Record, envelope: Envelope, state: SessionState
    ) -> tuple[StateChange, bool]:
        """Call the handler and turn its outcome into one atomic state change; and whether
        the handler took the envelope (False: it is another group's, see ``Outcome.others``)."""
        outcome = await self.handler(
            HandlerInput(
                envelope,
                state,
                self.name,
                self.ports,
                record.topic,
                record.partition,
                record.offset,
                record.timestamp,
                news=self._news,
            )
        )
        if outcome.state is not None:
            json.dumps(dict(outcome.state))  # unsavable: the handler failed
        window = self.settings.applied_window
        timers = (
            ()
            if not outcome.timers
            else fx.timers(
                self.codec,
                self.guard.sign,
                self.name,
                envelope,
                outcome.timers,
                topic=part.tp.topic,
                partition=part.tp.partition,
                now_ms=int(self.clock() * 1000),
            )
        )
        change = StateChange(
            expected_version=state.version,
            message_id=envelope.message_id,
            data=state.data if outcome.state is None else outcome.state,
            applied=appended(
                state.applied, envelope.message_id, epoch_ms(envelope.timestamp), window
            ),
            outbox=(
                fx.outputs(self.codec, self.guard.sign, envelope, outcome, self.prefix)
                if outcome.emit
                else ()
            ),
            timers=timers,
            cancel=tuple(outcome.cancel),
            # the session's previous outbox went out before this record started, unless it
            # waits for its transaction to commit (exactly-once mode clears it then)
            clear_previous=not self.eos,
            data_changed=outcome.state is not None,
        )
        return change, not outcome.others

    async def flush(self, part: Partition, session_id: str, message_id: str) -> None:
        """Re-send what an already-applied envelope emitted, if it may not have gone out."""
        pending = await self.store.outbox(self.name, session_id, message_id)
        if pending:
            await self.emit(part, pending)
            await self.settle(part, session_id, message_id)

    async def emit(self, part: Partition, records: Sequence[OutRecord]) -> None:
        """Produce now, or add to the partition's open transaction in exactly-once mode."""
        if not self.eos:
            await self.produce(records)
        elif records and self.producer is not None:
            part.sent.extend(records)
            await self.producer.send_in_transaction(part.tp, records)

    async def settle(self, part: Partition, session_id: str, message_id: str) -> None:
        """The outbox of ``message_id`` is out; cleared after the transaction commits.

        Without transactions it is cleared by the session's next commit (one write per
        record): a session's records run in order, so the next one starts only after
        this outbox was produced.
        """
        if self.eos:
            part.settled.append((session_id, message_id))

    async def admitted(self, part: Partition, record: Record) -> Envelope | None:
        """The record's envelope if it may run; else None, once it has been refused."""
        value, headers = record.value or b"", list(record.headers)
        envelope: Envelope | None = None
        try:
            signer = self.guard.verify(record.topic, record.key, value, headers)
            envelope = self.codec.decode(value)
            check_key(record, envelope)
            self.check_partition(part, record, envelope.session_id)
            self.guard.admit(record.topic, signer, envelope, retry=attempt_of(record) > 1)
        except (IdentityError, DecodeError) as exc:
            if envelope is None and isinstance(exc, IdentityError):
                envelope = self._claimed(value)
            await self.refuse(part, record, envelope, exc)
            return None
        return envelope

    def _claimed(self, value: bytes) -> Envelope | None:
        """What an unproven record claims to be (for the alert), if its bytes decode."""
        try:
            return self.codec.decode(value)
        except DecodeError:
            return None

    def check_partition(self, part: Partition, record: Record, session_id: str) -> None:
        """Refuse a record that is not on the partition murmur2 of its key maps it to.

        A session whose state is cached for this partition passed the check here before.
        """
        cached = self.cache.get(session_id)
        if cached is not None and cached[0] is part:
            return
        count = self.partitions(record.topic)
        if record.key is None or not count:
            return
        expected = partition_of(record.key, count)
        if expected != record.partition:
            self.stats.misrouted += 1
            raise ContractError(
                f"record of key {record.key.decode('utf-8', 'replace')!r} is on partition "
                f"{record.partition} of {record.topic}, but its key maps to partition "
                f"{expected} of {count}: per-session order needs every producer to "
                f"{PARTITIONER_HINT}"
            )

    async def refuse(
        self, part: Partition, record: Record, envelope: Envelope | None, error: Exception
    ) -> None:
        """Dead-letter a record that may not run; an identity refusal also raises an alert.

        Groups that share their topic with the one that dead-letters (each tool's group
        beside ``tool``) only count it, so a record is dead-lettered and alerted once.
        """
        if isinstance(error, IdentityError):
            self.stats.refused += 1
        elif not self.dead_letter_undecodable:
            self.stats.undecodable += 1
        if not self.dead_letter_undecodable:
            log.warning("processor=%s skipped offset=%s: %s", self.name, record.offset, error)
            return
        await self.dead_letter(part, record, error, attempt_of(record))  # logged there
        if isinstance(error, IdentityError):
            alert = fx.identity_alert(
                self.codec,
                self.guard.sign,
                processor=self.name,
                identity=self.guard.identity,
                record=record,
                envelope=envelope,
                error=error,
                topic=self.prefix + ALERTS,
            )
            await self.emit(part, (alert,))

    async def retry_or_dead_letter(
        self, part: Partition, record: Record, envelope: Envelope, error: Exception
    ) -> None:
        attempt = envelope.metadata.attempt
        if attempt >= envelope.metadata.retry_policy.max_attempts:
            await self.dead_letter(part, record, error, attempt)
            return
        log.info(
            "processor=%s handler failed on message=%s attempt=%s: %s",
            self.name,
            envelope.message_id,
            attempt,
            error,
        )
        timer = fx.retry_timer(
            self.codec,
            self.guard.sign,
            self.name,
            envelope,
            now_ms=int(self.clock() * 1000),
            max_backoff_ms=self.settings.max_backoff_ms,
            topic=part.tp.topic,
            partition=part.tp.partition,
        )
        await self.store.schedule(timer)
        self.stats.retries += 1

    async def dead_letter(
        self, part: Partition, record: Record, error: BaseException, attempt: int
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
            dlq_topic=self.prefix + DLQ,
        )
        try:
            await self.emit(part, (letter,))
        except BrokerError as exc:
            if exc.retriable or self.eos:
                raise
            # the original cannot be copied (too large for the DLQ): a pointer to it instead
            note = f"original not copied ({exc}); read it at the origin offset".encode()
            pointer = replace(letter, value=b"", headers=(*letter.headers, (DLQ_NOTE, note)))
            await self.emit(part, (pointer,))
        self.stats.dead_letters += 1

    async def produce(self, records: Sequence[OutRecord]) -> None:
        if records:
            producer = self.producer
            if producer is None:
                raise BrokerError(f"processor {self.name} is stopped")
            await producer.send_all(records)


def _read_only(data: Mapping[str, Any]) -> Mapping[str, Any]:
    return data if isinstance(data, ModelState) else MappingProxyType(dict(data))

"""Producing records: a plain producer, plus one transactional producer per input partition.

The plain producer has no idempotence, so the embedded broker (no producer ids)
works. Exactly-once mode adds a producer per input partition whose
transactional id is stable (``<group>.<topic>.<partition>``): when the partition
moves, the new owner's producer fences the old one's unfinished transaction.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka import errors as kafka_errors
from aiokafka.errors import KafkaError

from hermesbus.connectors.kafka import (
    KafkaConfig,
    kafka_reason,
    plain_producer,
    start_or_close,
    transactional_producer,
)
from hermesbus.connectors.kafka.refusals import ACLS_HINT
from hermesbus.errors import BrokerError, ConfigError

from ._store import OutRecord

__all__ = ["CLOSE_TIMEOUT_S", "Producer", "close_within"]

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 2.0
"""How long closing one client (or a last commit) may take: with the broker gone, aiokafka
would wait for it."""

_PERMANENT = (
    kafka_errors.MessageSizeTooLargeError,
    kafka_errors.RecordListTooLargeError,
    kafka_errors.InvalidTopicError,
    kafka_errors.TopicAuthorizationFailedError,
    kafka_errors.ClusterAuthorizationFailedError,
    kafka_errors.UnsupportedForMessageFormatError,
    kafka_errors.CorruptRecordException,
)
"""Produce errors that no retry can fix."""


class Producer:
    """Sends records and waits until the broker has them all (``acks=all``); in exactly-once
    mode, also one transactional producer per input partition (see the module)."""

    def __init__(self, kafka: KafkaConfig, group: str, *, exactly_once: bool = False) -> None:
        self._kafka = kafka
        self._group = group
        self.exactly_once = exactly_once
        self._producer: AIOKafkaProducer | None = None
        self._transactional: dict[TopicPartition, AIOKafkaProducer] = {}

    async def start(self) -> None:
        if self._producer is not None:
            return
        if self.exactly_once:
            await self._probe_transactions()
        producer = plain_producer(self._kafka, acks="all", enable_idempotence=False, linger_ms=2)
        where = f"cannot reach Kafka at {self._kafka.address}"
        await start_or_close(producer.start, producer.stop, where, self._kafka)
        self._producer = producer

    async def stop(self) -> None:
        """Flush and close every producer at once, each within CLOSE_TIMEOUT_S; never raises."""
        producer, self._producer = self._producer, None
        closing = [self.release(tp) for tp in list(self._transactional)]
        if producer is not None:
            closing.append(close_within(producer.stop, f"the producer of {self._group}"))
        await asyncio.gather(*closing)

    async def send_all(self, records: Sequence[OutRecord]) -> None:
        """Send ``records`` in order and wait for every acknowledgement."""
        producer = self._producer
        if producer is None:
            raise BrokerError("the producer is not started")
        try:
            pending = [await _send(producer, r) for r in records]
            await asyncio.gather(*pending)
        except KafkaError as exc:
            raise _broker_error(f"cannot produce to {records[0].topic}", exc) from exc

    # -- exactly-once ----------------------------------------------------------------------

    async def transactional(self, tp: TopicPartition) -> AIOKafkaProducer:
        """The producer of input partition ``tp``; starting it fences any older one."""
        producer = self._transactional.get(tp)
        if producer is None:
            producer = self._new_transactional(f"{self._group}.{tp.topic}.{tp.partition}")
            where = f"cannot start the transactional producer of {tp}"
            await start_or_close(producer.start, producer.stop, where)
            self._transactional[tp] = producer
        return producer

    async def release(self, tp: TopicPartition) -> None:
        """Close the producer of ``tp`` (within CLOSE_TIMEOUT_S; never raises)."""
        producer = self._transactional.pop(tp, None)
        if producer is not None:
            await close_within(producer.stop, f"the transactional producer of {tp}")

    async def send_in_transaction(self, tp: TopicPartition, records: Sequence[OutRecord]) -> None:
        """Add ``records`` to the open transaction of ``tp`` (acknowledged at commit).

        Never starts a producer: one released with its partition must not come back and
        fence the partition's new owner.
        """
        producer = self._transactional.get(tp)
        if producer is None:
            raise BrokerError(f"no open transaction for {tp}: the partition was released")
        try:
            for record in records:
                await _send(producer, record)
        except (KafkaError, kafka_errors.IllegalOperation) as exc:
            raise _broker_error(f"cannot produce in the transaction of {tp}", exc) from exc

    def _new_transactional(self, transactional_id: str) -> AIOKafkaProducer:
        return transactional_producer(self._kafka, transactional_id, acks="all", linger_ms=2)

    async def _probe_transactions(self) -> None:
        """Refuse exactly-once mode at start on a broker without transactions."""
        probe = self._new_transactional(f"{self._group}.probe")
        try:
            await probe.start()
        except kafka_errors.KafkaConnectionError as exc:
            raise BrokerError(f"cannot reach Kafka at {self._kafka.address}: {exc}") from exc
        except kafka_errors.TransactionalIdAuthorizationFailed as exc:
            raise BrokerError(
                f"the cluster does not let {self._kafka.principal} use the transactional ids "
                f"{self._group}.*: no ACL allows it; {ACLS_HINT} (with --exactly-once)"
            ) from exc
        except KafkaError as exc:
            raise ConfigError(
                f"--exactly-once needs a broker with transactions (Apache Kafka); the broker at "
                f"{self._kafka.bootstrap} refused a transactional producer ({exc!r}). The "
                "embedded broker has no transactions: run without --exactly-once there."
            ) from exc
        finally:
            await close_within(probe.stop, "the transactions probe")


async def close_within(
    close: Callable[[], Awaitable[object]], what: str, timeout_s: float = CLOSE_TIMEOUT_S
) -> None:
    """``await close()`` (an aiokafka ``stop``) for at most ``timeout_s``; never raises.

    With the broker gone, a stop may wait for it, fail with a KafkaError, or end in a
    CancelledError of aiokafka's own (its fetcher re-raises one of its cancelled
    tasks): each is logged and the caller carries on closing the rest. The close runs
    as a task of its own, so that such a CancelledError is told apart from the
    caller's cancellation, which still goes through.
    """
    closing = asyncio.ensure_future(close())
    closing.add_done_callback(_retrieved)
    await asyncio.wait([closing], timeout=timeout_s)
    if not closing.done():
        closing.cancel()
        log.warning("%s did not close within %g s; left behind", what, timeout_s)
    elif closing.cancelled():
        log.debug("%s: aiokafka cancelled one of its own tasks while closing", what)
    elif (exc := closing.exception()) is not None:
        log.warning("%s: closing failed: %s: %s", what, type(exc).__name__, exc)


def _retrieved(task: asyncio.Future[object]) -> None:
    """Mark the outcome of a close seen, also one left behind that fails later."""
    if not task.cancelled():
        task.exception()


def _broker_error(what: str, exc: Exception) -> BrokerError:
    return BrokerError(f"{what}: {kafka_reason(exc)}", retriable=not isinstance(exc, _PERMANENT))


async def _send(producer: AIOKafkaProducer, r: OutRecord) -> asyncio.Future[object]:
    future: asyncio.Future[object] = await producer.send(
        r.topic, r.value, key=r.key, partition=r.partition, headers=list(r.headers)
    )
    return future

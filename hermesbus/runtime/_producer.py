"""Producing records: one plain producer (no idempotence, so the embedded broker works)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.errors import BrokerError

from ._store import OutRecord

__all__ = ["Producer"]


class Producer:
    """Sends records and waits until the broker has them all (``acks=all``)."""

    def __init__(self, kafka: KafkaConfig, group: str, *, exactly_once: bool = False) -> None:
        self._kafka = kafka
        self._group = group
        self.exactly_once = exactly_once
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        if self._producer is not None:
            return
        producer = AIOKafkaProducer(
            **self._kafka.client_kwargs(), acks="all", enable_idempotence=False, linger_ms=2
        )
        await producer.start()
        self._producer = producer

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def send_all(self, records: Sequence[OutRecord]) -> None:
        """Send ``records`` in order and wait for every acknowledgement."""
        producer = self._producer
        if producer is None:
            raise BrokerError("the producer is not started")
        try:
            pending = [
                await producer.send(
                    r.topic, r.value, key=r.key, partition=r.partition, headers=list(r.headers)
                )
                for r in records
            ]
            await asyncio.gather(*pending)
        except KafkaError as exc:
            raise BrokerError(f"cannot produce to {records[0].topic}: {exc}") from exc

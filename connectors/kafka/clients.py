"""Every aiokafka client of the product, built from the :class:`KafkaConfig` (issue 26 point 2).

Each function gives a new, unstarted client with the cluster's address, security, SASL and
TLS settings (``config.client_kwargs()``) and what its use adds; ``options`` are aiokafka's
own keywords (acks, linger, offset reset, isolation level, timings). No other product
module constructs an aiokafka client: ``tests/unit/test_kafka_clients.py`` holds that.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaClient, AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from hermesbus.connectors.kafka.config import KafkaConfig

__all__ = [
    "admin_client",
    "group_consumer",
    "log_consumer",
    "plain_producer",
    "protocol_client",
    "transactional_producer",
]


def group_consumer(config: KafkaConfig, group_id: str, **options: Any) -> AIOKafkaConsumer:
    """A consumer of group ``group_id`` that commits only the offsets it is told to."""
    return AIOKafkaConsumer(
        **config.client_kwargs(), group_id=group_id, enable_auto_commit=False, **options
    )


def log_consumer(config: KafkaConfig, **options: Any) -> AIOKafkaConsumer:
    """A consumer in no group: it reads the partitions it is assigned and commits nothing."""
    return AIOKafkaConsumer(
        **config.client_kwargs(), group_id=None, enable_auto_commit=False, **options
    )


def plain_producer(config: KafkaConfig, **options: Any) -> AIOKafkaProducer:
    """A producer outside any transaction."""
    return AIOKafkaProducer(**config.client_kwargs(), **options)


def transactional_producer(
    config: KafkaConfig, transactional_id: str, **options: Any
) -> AIOKafkaProducer:
    """An idempotent producer with ``transactional_id``: starting it fences any older
    producer with that id (and fails on a broker without transactions)."""
    return AIOKafkaProducer(
        **config.client_kwargs(),
        enable_idempotence=True,
        transactional_id=transactional_id,
        **options,
    )


def admin_client(config: KafkaConfig) -> AIOKafkaAdminClient:
    """An admin client: topics, their configs, the cluster's description."""
    return AIOKafkaAdminClient(**config.client_kwargs())


def protocol_client(config: KafkaConfig) -> AIOKafkaClient:
    """A bare client that sends Kafka protocol requests (``ApiVersions``) to a node itself."""
    return AIOKafkaClient(**config.client_kwargs())

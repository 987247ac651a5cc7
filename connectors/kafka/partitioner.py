"""Which partition a key belongs to: murmur2, as the Java client and aiokafka compute it.

Every hermesbus topic keyed by session relies on it: a session's records are in order
only on its one partition. Producers in other languages must use the same partitioner
(librdkafka: ``partitioner=murmur2_random``; its default ``consistent_random`` is CRC32).
"""

from __future__ import annotations

from aiokafka.partitioner import murmur2

__all__ = ["PARTITIONER_HINT", "partition_of"]

PARTITIONER_HINT = (
    "produce with the Java client's default partitioner, murmur2 of the key "
    "(aiokafka and the Java client do; librdkafka and confluent-kafka need "
    "partitioner=murmur2_random, Sarama NewCustomHashPartitioner(murmur2), "
    "kafkajs its DefaultPartitioner)"
)


def partition_of(key: bytes, count: int) -> int:
    """The partition of ``key`` on a topic with ``count`` partitions (``count`` >= 1)."""
    if count < 1:
        raise ValueError(f"a topic has at least one partition, not {count}")
    return int(murmur2(key) & 0x7FFFFFFF) % count

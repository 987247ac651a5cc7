"""Kafka connector: connection settings, every client built from them, topic administration,
client start-up, and the group-less log reader."""

from hermesbus.connectors.kafka import (
    assignments as assignments,  # installs the check of a stale assignment
)
from hermesbus.connectors.kafka import (
    offset_fetch as offset_fetch,  # installs the check of an OffsetFetch's own error
)
from hermesbus.connectors.kafka.admin import ExistingTopic, KafkaAdmin, NewTopicSpec
from hermesbus.connectors.kafka.client import (
    NO_TOPIC_HINT,
    UNREACHABLE_HINT,
    kafka_reason,
    require_topic,
    start_or_close,
)
from hermesbus.connectors.kafka.clients import (
    admin_client,
    group_consumer,
    log_consumer,
    plain_producer,
    protocol_client,
    transactional_producer,
)
from hermesbus.connectors.kafka.commits import absent, commit_as_member, is_member
from hermesbus.connectors.kafka.config import KafkaConfig
from hermesbus.connectors.kafka.errors import BrokerError, ConfigError
from hermesbus.connectors.kafka.partitioner import PARTITIONER_HINT, partition_of
from hermesbus.connectors.kafka.reader import (
    BEGINNING,
    END,
    LogReader,
    Position,
    Record,
    partition_counts,
)

__all__ = [
    "BEGINNING",
    "END",
    "NO_TOPIC_HINT",
    "PARTITIONER_HINT",
    "UNREACHABLE_HINT",
    "BrokerError",
    "ConfigError",
    "ExistingTopic",
    "KafkaAdmin",
    "KafkaConfig",
    "LogReader",
    "NewTopicSpec",
    "Position",
    "Record",
    "absent",
    "admin_client",
    "commit_as_member",
    "group_consumer",
    "is_member",
    "kafka_reason",
    "log_consumer",
    "partition_counts",
    "partition_of",
    "plain_producer",
    "protocol_client",
    "require_topic",
    "start_or_close",
    "transactional_producer",
]

"""No hermesbus client asks a broker to create a topic by naming it (aiokafka always does).

The integration suite (tests/integration/faults/test_broker_empty.py) shows it on both
brokers; here: what the requests say, at every Metadata version that can say it.
"""

from __future__ import annotations

import aiokafka.admin.client
import aiokafka.client
import pytest
from aiokafka.protocol import metadata

from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.connectors.kafka.client import NoAutoCreate


def test_every_aiokafka_client_of_the_process_sends_requests_that_create_nothing() -> None:
    assert aiokafka.client.MetadataRequest is NoAutoCreate
    assert aiokafka.admin.client.MetadataRequest is NoAutoCreate


@pytest.mark.parametrize("version", [metadata.MetadataRequest_v4, metadata.MetadataRequest_v5])
def test_a_request_naming_topics_does_not_allow_their_creation(version: type) -> None:
    built = NoAutoCreate(["hermes.conversation.in"]).build(version)
    assert built.allow_auto_topic_creation is False
    assert built.topics == ["hermes.conversation.in"]
    asked = NoAutoCreate(["t"], allow_auto_topic_creation=True).build(version)  # as aiokafka may
    assert asked.allow_auto_topic_creation is False


def test_clients_refresh_metadata_often_enough_to_see_a_topic_made_again() -> None:
    kwargs = KafkaConfig(bootstrap="127.0.0.1:9092").client_kwargs()
    assert kwargs["metadata_max_age_ms"] == 10_000

"""A group member's client id says which process it is, in characters Kafka's tools take."""

from __future__ import annotations

import os
import socket

from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.runtime import RuntimeSettings, member_client_id, member_consumer


def test_a_static_member_is_named_by_its_instance_id() -> None:
    assert member_client_id("prod.dispatcher", "dispatcher-2") == "prod.dispatcher.dispatcher-2"


def test_a_dynamic_member_is_named_by_its_host_and_pid() -> None:
    host = "".join(c if c.isalnum() or c in "._-" else "_" for c in socket.gethostname())
    assert member_client_id("prod.memory") == f"prod.memory.{host}-{os.getpid()}"


def test_characters_kafka_does_not_take_become_underscores() -> None:
    assert member_client_id("a b/c", "x:y") == "a_b_c.x_y"


async def test_the_runtime_s_consumers_carry_it() -> None:  # aiokafka wants a loop
    consumer = member_consumer(
        KafkaConfig(bootstrap="127.0.0.1:9"), "p.conversation", RuntimeSettings(instance_id="c-1")
    )
    try:
        assert consumer._client._client_id == "p.conversation.c-1"
    finally:
        await consumer.stop()  # never started: closes what it built

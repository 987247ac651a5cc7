"""``hermesbus topics apply`` against a real broker: create, idempotence, drift."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from typer.testing import CliRunner

from hermesbus.cli import app
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.errors import BrokerError
from hermesbus.topics import Catalog, ExistingTopic

pytestmark = pytest.mark.kafka


def apply(bootstrap: str, prefix: str, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        app, ["topics", "apply", "--bootstrap", bootstrap, "--prefix", prefix, *extra]
    )
    return result.exit_code, result.output


def test_apply_creates_every_topic_then_is_idempotent(kafka_bootstrap: str, unique: str) -> None:
    prefix = f"t{unique}."
    code, output = apply(kafka_bootstrap, prefix, "--dry-run")
    assert code == 0, output
    assert "11 to create" in output

    code, output = apply(kafka_bootstrap, prefix)
    assert code == 0, output
    assert f"created {prefix}hermes.conversation.in (6 partitions)" in output

    code, output = apply(kafka_bootstrap, prefix)
    assert code == 0, output
    assert "0 created, 11 in sync, 0 drifted" in output

    async def described() -> dict[str, ExistingTopic]:
        async with KafkaAdmin(KafkaConfig(bootstrap=kafka_bootstrap)) as admin:
            names = Catalog.load().with_overrides(prefix=prefix).names()
            return dict(await admin.describe(names))

    topics = asyncio.run(described())
    tool = topics[f"{prefix}hermes.tool"]
    assert tool.partitions == 6
    assert tool.configs is not None
    assert tool.configs["retention.ms"] == str(7 * 86_400_000)


def test_apply_reports_drift_and_never_repartitions(kafka_bootstrap: str, unique: str) -> None:
    prefix = f"d{unique}."

    async def make_wrong_topic() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        await admin.start()
        try:
            await admin.create_topics(
                [NewTopic(f"{prefix}hermes.memory", 2, 1, topic_configs={"retention.ms": "60000"})]
            )
        finally:
            await admin.close()

    asyncio.run(make_wrong_topic())
    code, output = apply(kafka_bootstrap, prefix)
    assert code == 2
    assert f"drift {prefix}hermes.memory: partitions is 2, the catalog says 6" in output
    assert (
        f"drift {prefix}hermes.memory: retention.ms is 60000, the catalog says 604800000" in output
    )
    assert "10 created" in output
    code, output = apply(kafka_bootstrap, prefix)
    assert code == 2
    assert "0 created, 10 in sync, 1 drifted" in output


def test_unreachable_broker_is_a_clear_error() -> None:
    async def attempt() -> None:
        config = KafkaConfig(bootstrap="127.0.0.1:1", request_timeout_ms=2000)
        async with KafkaAdmin(config):
            pass

    with pytest.raises(BrokerError, match="cannot reach Kafka at 127.0.0.1:1"):
        asyncio.run(attempt())

"""The embedded broker (tansu) for real: topics apply through the CLI, a round trip, `broker`."""

from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from typer.testing import CliRunner

from hermesbus.cli import app
from hermesbus.compose.broker import EmbeddedBroker, free_port, metadata_probe
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.topics import Catalog, ExistingTopic

pytestmark = [pytest.mark.kafka, pytest.mark.usefixtures("broker_binary")]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    started = EmbeddedBroker(home=tmp_path)
    started.start()
    yield started
    started.stop()


def test_start_and_stop_are_idempotent(broker: EmbeddedBroker) -> None:
    bootstrap = broker.bootstrap
    broker.start()
    assert broker.bootstrap == bootstrap
    assert broker.running
    assert metadata_probe(broker.port)
    assert broker.log_path.is_file()
    broker.stop()
    broker.stop()
    assert not broker.running
    assert not metadata_probe(broker.port, timeout_s=0.5)


def test_topics_apply_creates_the_catalog_on_the_embedded_broker(
    broker: EmbeddedBroker, unique: str
) -> None:
    prefix = f"e{unique}."
    args = ["topics", "apply", "--bootstrap", broker.bootstrap, "--prefix", prefix]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "11 created, 0 in sync, 0 drifted" in result.output

    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "0 created, 11 in sync, 0 drifted" in result.output

    async def described() -> dict[str, ExistingTopic]:
        async with KafkaAdmin(KafkaConfig(bootstrap=broker.bootstrap)) as admin:
            return dict(await admin.describe(names))

    names = Catalog.load().with_overrides(prefix=prefix).names()
    topics = asyncio.run(described())
    assert sorted(topics) == sorted(names)
    assert topics[f"{prefix}hermes.tool"].partitions == 6


async def test_async_context_manager_round_trip(tmp_path: Path, unique: str) -> None:
    topic = f"r{unique}"
    async with EmbeddedBroker(home=tmp_path) as broker:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 1, 1)])
        finally:
            await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"hello", key=b"session-1")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            record = await consumer.getone()
        finally:
            await consumer.stop()
        assert (record.key, record.value) == (b"session-1", b"hello")
    assert not broker.running


def test_cli_prints_the_bootstrap_answers_and_exits_0_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    command = [sys.executable, "-c", "from hermesbus.cli import main; main()"]
    process = subprocess.Popen(
        [*command, "broker", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HERMES_HOME": str(tmp_path)},
    )
    assert process.stdout is not None
    try:
        ready, _, _ = select.select([process.stdout], [], [], 30)
        assert ready, "no output within 30 s"
        assert process.stdout.readline() == f"KAFKA_BOOTSTRAP=127.0.0.1:{port}\n"
        assert metadata_probe(port)
        process.send_signal(signal.SIGTERM)
        rest, errors = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, errors
    assert rest == ""
    assert "embedded broker stopped" in errors
    assert not metadata_probe(port, timeout_s=0.5)
    assert (tmp_path / "broker" / f"tansu-{port}.log").is_file()

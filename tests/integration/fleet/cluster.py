"""The three-broker Apache Kafka cluster of the fleet tests (``deploy/local/kafka-cluster.sh``):
started once for the module that uses it, its nodes killed, stopped and restarted by the
tests, and what it says about its partitions' leaders."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from aiokafka import AIOKafkaClient, TopicPartition

from tests.services import need

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "deploy/local/kafka-cluster.sh"
START_S = 300
"""How long three JVMs may take to start and find each other on a slow, busy machine."""


@dataclass
class Cluster:
    folder: Path
    bootstrap: str
    secure: str = ""
    """The SASL_SSL listeners' bootstrap, when the cluster was given secure material."""

    def _script(self, *args: str) -> str:
        done = subprocess.run(
            ["bash", str(SCRIPT), *args],
            capture_output=True, text=True, timeout=START_S, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"kafka-cluster.sh {' '.join(args)}: {done.stderr}"
        return done.stdout

    def kill(self, node: int) -> None:
        """SIGKILL: a hard bounce's first half."""
        self._script("kill", str(self.folder), str(node))

    def halt(self, node: int) -> None:
        """SIGTERM, waited for: a controlled shutdown, which moves its leaderships first."""
        self._script("halt", str(self.folder), str(node))

    def restart(self, node: int) -> None:
        """Start it again on its data; returns once it serves."""
        self._script("restart", str(self.folder), str(node))

    def log(self, node: int) -> Path:
        return self.folder / f"node-{node}" / "logs" / "server.log"


def start(folder: Path) -> Iterator[Cluster]:
    """A fixture's body: the cluster in ``folder`` (secure listeners if ``folder/secure``
    holds their material), stopped after; skipped (failed under CI) when it cannot start."""
    if shutil.which("java") is None:
        need("three-broker Kafka cluster", "java not found (Kafka needs Java 17+)", None)
    done = subprocess.run(
        ["bash", str(SCRIPT), "start", str(folder)],
        capture_output=True, text=True, timeout=START_S, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        subprocess.run(["bash", str(SCRIPT), "stop", str(folder), "--keep-logs"], check=False)
        need("three-broker Kafka cluster", f"kafka-cluster.sh start: {done.stderr}", None)
    said = dict(line.split("=", 1) for line in done.stdout.split())
    try:
        yield Cluster(folder, said["KAFKA_CLUSTER_BOOTSTRAP"], said.get("KAFKA_CLUSTER_SECURE", ""))
    finally:
        subprocess.run(
            ["bash", str(SCRIPT), "stop", str(folder)],
            capture_output=True,
            timeout=120,
            check=False,
        )


async def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> the node leading it now (-1: none), from fresh metadata."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        await client.force_metadata_update()
        cluster = client.cluster
        return {
            p: cluster.leader_for_partition(TopicPartition(topic, p)) or -1
            for p in sorted(cluster.partitions_for_topic(topic) or ())
        }
    finally:
        await client.close()

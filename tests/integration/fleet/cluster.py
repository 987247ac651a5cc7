"""The three-broker Apache Kafka cluster of the fleet tests (``deploy/local/kafka-cluster.sh``):
started once for the module that uses it, its nodes killed, stopped and restarted by the
tests, and what it says about its partitions' leaders."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import AIOKafkaClient, TopicPartition
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.services import need

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "deploy/local/kafka-cluster.sh"
START_S = 300
"""How long three JVMs may take to start and find each other on a slow, busy machine."""


ADMIN = "admin"
"""The super user of the secure listeners: it makes topics and ACLs."""


@dataclass
class Cluster:
    folder: Path
    bootstrap: str
    secure: str = ""
    """The SASL_SSL listeners' bootstrap, when the cluster was given secure material."""
    passwords: dict[str, str] = field(default_factory=dict, repr=False)
    """Each SCRAM user's password (the components', the app's, the admin's)."""

    @property
    def ca(self) -> Path:
        return self.folder / "secure" / "ca.pem"

    def env(self, user: str, password: str | None = None) -> dict[str, str]:
        """``HERMES_KAFKA_*`` of a client logging in as ``user`` over SASL_SSL (``password``
        given: that one instead of the user's)."""
        return {
            "HERMES_KAFKA_BOOTSTRAP": self.secure,
            "HERMES_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "HERMES_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "HERMES_KAFKA_SASL_USERNAME": user,
            "HERMES_KAFKA_SASL_PASSWORD": password or self.passwords[user],
            "HERMES_KAFKA_SSL_CAFILE": str(self.ca),
        }

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


def secure_material(folder: Path, users: Sequence[str]) -> dict[str, str]:
    """What ``kafka-cluster.sh`` reads from ``folder/secure``: a CA made here, the nodes'
    key and certificate it signed (for 127.0.0.1 and localhost), a SCRAM user with a fresh
    password for each of ``users`` and the admin, the admin as super user. The passwords."""
    secure = folder / "secure"
    secure.mkdir(mode=0o700, parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hermesbus test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    node = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM

    def private(name: str, data: bytes) -> None:  # a key, passwords: this user's alone
        fd = os.open(secure / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)

    (secure / "ca.pem").write_bytes(ca.public_bytes(pem))
    plain_key = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    private("server.pem", plain_key + node.public_bytes(pem))
    passwords = {user: secrets.token_urlsafe(18) for user in (*users, ADMIN)}
    private("scram.users", "".join(f"{u} {p}\n" for u, p in passwords.items()).encode())
    (secure / "super.user").write_text(ADMIN + "\n")
    return passwords


def start(folder: Path, users: Sequence[str] = ()) -> Iterator[Cluster]:
    """A fixture's body: the cluster in ``folder`` (with secure listeners and a SCRAM user
    for each of ``users`` when given), stopped after; skipped (failed under CI) when it
    cannot start."""
    passwords = secure_material(folder, users) if users else {}
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
        boot, secure = said["KAFKA_CLUSTER_BOOTSTRAP"], said.get("KAFKA_CLUSTER_SECURE", "")
        yield Cluster(folder, boot, secure, passwords)
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


async def in_sync(bootstrap: str, within_s: float) -> None:
    """Wait until every partition of every topic (the internal ones too) has all its
    replicas in sync again: a node restarted is serving before it has caught up, and a
    second fault before then would leave fewer than ``min.insync.replicas``."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    lagging: list[str] = []
    try:
        deadline = time.monotonic() + within_s
        while True:
            await client.force_metadata_update()
            partitions = client.cluster._partitions  # aiokafka keeps the ISR only there
            lagging = [
                f"{topic}-{p}"
                for topic, parts in partitions.items()
                for p, meta in parts.items()
                if len(meta.isr) < len(meta.replicas)
            ]
            if not lagging or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
    finally:
        await client.close()
    assert not lagging, f"not in sync within {within_s:g} s: {lagging[:10]}"

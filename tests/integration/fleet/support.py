"""A fleet of ``hermesbus run`` processes, and what its consumer groups say about it.

:class:`Fleet` starts instances (each an OS process with a state folder of its own, sharing
the broker, the Redis and the keys), stops them with SIGTERM or SIGKILL, and tells which
process a group member is from its client id (``GROUP.HOST-PID``, see
``hermesbus.runtime.member_client_id``). :class:`Assignments` polls the groups'
descriptions and keeps every change of who holds which partition: the rebalances as the
broker saw them.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import KafkaError

from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from tests.cli_process import Background, clean_env

READY = "serving; Ctrl-C stops"
START_S = 180.0
"""How long an instance may take to join its groups (a Python start on a busy 2-core machine)."""
STOP_S = 90.0


@dataclass(eq=False)
class Instance:
    name: str
    processors: tuple[str, ...]
    running: Background
    ended: str = ""
    """How it was ended: '' (running), 'SIGTERM' or 'SIGKILL'."""

    @property
    def pid(self) -> int:
        return self.running.pid


@dataclass
class Fleet:
    """Instances of ``hermesbus run`` on one broker and prefix."""

    folder: Path
    bootstrap: str
    prefix: str
    env: Mapping[str, str]
    """What every instance is given beyond a state folder of its own (keys, Redis)."""
    extra: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """More, by processor (the tool instances' demo keys)."""
    instances: list[Instance] = field(default_factory=list)

    def start(self, *processors: str) -> Instance:
        """One more instance running ``processors``; not waited for (:meth:`ready`)."""
        name = f"{'+'.join(processors)}-{sum(i.processors == processors for i in self.instances)}"
        home = self.folder / name
        more = {k: v for p in processors for k, v in self.extra.get(p, {}).items()}
        running = Background(
            self.folder,
            "run", *processors, "--bootstrap", self.bootstrap, "--prefix", self.prefix,
            env=clean_env(home, **self.env, **more),
            name=name,
        )  # fmt: skip
        instance = Instance(name, processors, running)
        self.instances.append(instance)
        return instance

    async def ready(self, instances: Sequence[Instance]) -> None:
        """Each of ``instances`` has joined its groups and serves."""
        await asyncio.gather(
            *(asyncio.to_thread(i.running.wait_for, READY, START_S) for i in instances)
        )

    def signal(self, instance: Instance, sig: signal.Signals) -> None:
        instance.ended = sig.name
        if sig is signal.SIGKILL:
            instance.running.kill()  # its group too: its tool workers die with it
        else:
            instance.running.process.send_signal(sig)

    def live(self, processor: str) -> list[Instance]:
        return [i for i in self.instances if processor in i.processors and not i.ended]

    def owner(self, client_id: str) -> Instance | None:
        """The instance whose consumer has ``client_id`` (``GROUP.HOST-PID``)."""
        for instance in self.instances:
            if client_id.endswith(f"-{instance.pid}"):
                return instance
        return None

    async def stop_all(self) -> dict[str, int | None]:
        """SIGTERM to every running instance; each one's exit code (None: killed after STOP_S)."""
        for instance in self.instances:
            if not instance.ended:
                instance.ended = "SIGTERM"
                instance.running.process.send_signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        for instance in self.instances:
            try:
                codes[instance.name] = await asyncio.to_thread(
                    instance.running.process.wait, STOP_S
                )
            except subprocess.TimeoutExpired:  # a hung instance: reported, then killed
                codes[instance.name] = None
            instance.running.kill()
        return codes

    def kill_all(self) -> None:
        for instance in self.instances:
            instance.running.kill()


Holders = dict[tuple[str, int], str]
"""(topic, partition) -> the client id of the member holding it."""


@dataclass
class Assignments:
    """Every distinct assignment of each group, as described by the broker while it runs."""

    kafka: KafkaConfig
    groups: Sequence[str]
    every_s: float = 0.5
    seen: dict[str, list[Holders]] = field(default_factory=dict)
    errors: int = 0

    async def watch(self) -> None:
        """Poll until cancelled."""
        async with KafkaAdmin(self.kafka) as admin:
            while True:
                try:
                    for group in self.groups:
                        holders = await _holders(admin, group)
                        history = self.seen.setdefault(group, [])
                        if holders and (not history or history[-1] != holders):
                            history.append(holders)
                except KafkaError:  # a coordinator moving: described again next time
                    self.errors += 1
                await asyncio.sleep(self.every_s)

    def moved(self, group: str) -> set[tuple[str, int]]:
        """The partitions of ``group`` held by more than one member over the run."""
        owners: dict[tuple[str, int], set[str]] = {}
        for holders in self.seen.get(group, []):
            for tp, client in holders.items():
                owners.setdefault(tp, set()).add(client)
        return {tp for tp, clients in owners.items() if len(clients) > 1}

    def members(self, group: str) -> set[str]:
        return {c for holders in self.seen.get(group, []) for c in holders.values()}

    def last(self, group: str) -> Holders:
        history = self.seen.get(group, [])
        return history[-1] if history else {}


async def _holders(admin: KafkaAdmin, group: str) -> Holders:
    holders: Holders = {}
    for response in await admin.client.describe_consumer_groups([group]):
        for described in response.groups:  # error, id, state, protocol type, protocol, members
            if described[2] != "Stable":
                return {}  # rebalancing: no assignment to read yet
            for member in described[5]:  # ..., client id, client host, metadata, assignment
                client_id, raw = member[-4], member[-1]
                if raw:
                    decoded = ConsumerProtocolMemberAssignment.decode(raw)
                    for topic, partitions in decoded.assignment:
                        for partition in partitions:
                            holders[(topic, partition)] = client_id
    return holders

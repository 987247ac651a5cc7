"""The flow registry on Kafka: reading every registered version, registering a new one.

The records are checked by :class:`hermesbus.processors.flow.Registered` (signature, key,
spec); this module moves them: a group-less read of the registry topic from its beginning
to its end, and one signed, acknowledged write. See ``processors/flow/_registry.py`` for
why versions stay immutable (the topic is appended to, never compacted).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.connectors.kafka.client import kafka_reason, start_or_close
from hermesbus.connectors.kafka.clients import plain_producer
from hermesbus.connectors.kafka.reader import LogReader
from hermesbus.errors import BrokerError, ConfigError, HermesError, SettingError
from hermesbus.identity import Keyring, Signer, Verifier
from hermesbus.processors.conversation import FLOW_SETTLE_MS
from hermesbus.processors.flow import (
    DIGEST_CHARS,
    FLOW_SIGNER,
    FlowSpec,
    FlowSpecError,
    FlowVersion,
    Registered,
    StaticCatalog,
    digest_of,
    load_flow,
    record_key,
)
from hermesbus.topics import FLOWS

__all__ = [
    "REREAD_MS",
    "FlowCopy",
    "Registration",
    "RegistryCatalog",
    "bundled",
    "catalog_of",
    "copied_catalog",
    "copies_of",
    "flow_copies",
    "keep_copies",
    "read_flows",
    "register_flow",
]

log = logging.getLogger(__name__)

REREAD_MS = 250
"""The registry catalog reads the registry at most once in this long."""


@dataclass(frozen=True, slots=True)
class Registration:
    """What ``register_flow`` did: ``registered`` a new version, or found it ``already``
    registered with the same text."""

    outcome: Literal["registered", "already"]
    version: FlowVersion


async def read_flows(kafka: KafkaConfig, prefix: str, keyring: Keyring) -> Registered:
    """Every version the registry topic holds now, checked (a missing topic: none)."""
    topic = prefix + FLOWS
    async with KafkaAdmin(kafka) as admin:
        if await admin.missing([topic]):
            return Registered(Verifier(keyring), topic)
    return await _read(kafka, topic, keyring)


async def _read(kafka: KafkaConfig, topic: str, keyring: Keyring) -> Registered:
    """The registry topic's records from its beginning to its end, each checked."""
    registered = Registered(Verifier(keyring), topic)
    part = TopicPartition(topic, 0)
    async with LogReader(kafka, [part], what=f"reading the flow registry {topic}") as log:
        async for batch in log:
            for record in batch:
                registered.add(
                    record.key,
                    record.value,
                    list(record.headers or ()),
                    offset=record.offset,
                    timestamp_ms=record.timestamp,
                )
    return registered


class RegistryCatalog:
    """The registry topic as the processors' flow catalog (``ports["flows"]``).

    It holds what it read last, and reads the registry again (one read at a time; readers
    that wait share it) when asked for a version it does not hold, or for the flows
    current at a time its last read may have missed: the conversation asks for versions
    registered ``settle_ms`` before a turn, and a record is readable well within half of
    that after its timestamp, so a read begun later than that holds all of them and a
    replay decides alike. Reads are at most one per :data:`REREAD_MS` (a turn dated ahead
    of this machine's clock, or a version nobody registered, cannot make it read on every
    record). Versions never change once read. A broker that cannot be reached is a
    BrokerError: the record waits in place.
    """

    def __init__(
        self,
        kafka: KafkaConfig,
        prefix: str,
        keyring: Callable[[], Keyring],
        *,
        settle_ms: int = FLOW_SETTLE_MS,
        clock: Callable[[], float] = time.time,
        copies: Path | None = None,
    ) -> None:
        """``copies``: a folder where each version read is kept as a file, so a replay
        without the broker (``replay --shadow`` from the archive) finds the versions its
        sessions ran (:class:`CopiedCatalog`)."""
        self._kafka, self._prefix, self._keyring = kafka, prefix, keyring
        self._settle_ms, self._clock, self._copies = settle_ms, clock, copies
        self._registered: Registered | None = None
        self._read_from_ms = 0.0
        self._lock = asyncio.Lock()
        self.reads = 0
        """How many times the registry was read (the tests watch it)."""

    async def start(self) -> None:
        await self._refresh(0)

    async def stop(self) -> None:
        return None

    def _now_ms(self) -> float:
        return self._clock() * 1000

    async def _refresh(self, needed_ms: float) -> Registered:
        """What the registry holds, read again unless a read began at ``needed_ms`` or
        later, or less than REREAD_MS ago."""
        async with self._lock:
            fresh = self._read_from_ms >= needed_ms
            recent = self._now_ms() - self._read_from_ms < REREAD_MS
            if self._registered is None or not (fresh or recent):
                began = self._now_ms()
                self._registered = await self._read()
                self._read_from_ms = began
                self.reads += 1
                if self._copies is not None:
                    keep_copies(self._registered, self._copies)
            return self._registered

    async def _read(self) -> Registered:
        """One read of the registry, bounded: a broker that holds it back (a topic deleted
        and made again, metadata not yet known) is a BrokerError, so the record waits in
        place and is tried again, and no session waits on a read that never ends."""
        within_s = self._kafka.request_timeout_ms / 1000
        try:
            async with asyncio.timeout(within_s):
                return await read_flows(self._kafka, self._prefix, self._keyring())
        except TimeoutError:
            raise BrokerError(
                f"reading the flow registry {self._prefix}{FLOWS} took over {within_s:g} s"
            ) from None

    async def version(self, flow: str, version: int) -> FlowSpec | None:
        registered = self._registered
        kept = registered.get(flow, version) if registered is not None else None
        if kept is None:
            kept = (await self._refresh(self._now_ms())).get(flow, version)
        return kept.spec if kept is not None else None

    async def current(self, at_ms: int) -> Mapping[str, FlowSpec]:
        """The newest version of each flow registered at or before ``at_ms``."""
        registered = self._registered
        if registered is None or self._read_from_ms < at_ms + self._settle_ms / 2:
            registered = await self._refresh(at_ms + self._settle_ms / 2)
        newest: dict[str, FlowSpec] = {}
        for flow, versions in registered.versions.items():
            taken = [v for v in versions.values() if v.registered_at_ms <= at_ms]
            if taken:
                newest[flow] = max(taken, key=lambda v: v.spec.version).spec
        return newest


def flow_copies(home: Path, prefix: str) -> Path:
    """Where a bus's state folder keeps its copies of the registered versions."""
    return home / "flows" / (prefix.rstrip(".") or "default")


def keep_copies(registered: Registered, folder: Path) -> None:
    """Each version ``registered`` holds, as ``<flow>@<version>.json`` in ``folder`` (written
    once: versions are immutable), with the time it was registered."""
    folder.mkdir(parents=True, exist_ok=True)
    for flow, versions in registered.versions.items():
        for number, version in versions.items():
            path = folder / f"{flow}@{number}.json"
            if path.exists():
                continue
            copy = {
                "flow": flow,
                "version": number,
                "registered_at_ms": version.registered_at_ms,
                "offset": version.offset,
                "text": version.text.decode("utf-8"),
            }
            partial = path.with_suffix(".partial")
            partial.write_text(json.dumps(copy, ensure_ascii=False), encoding="utf-8")
            partial.replace(path)


def copied_catalog(folder: Path) -> StaticCatalog:
    """The versions kept in ``folder`` by :func:`keep_copies`, as a catalog (a copy that
    does not read as a spec is skipped, with a warning)."""
    return catalog_of(_kept(folder))


def catalog_of(copies: Iterable[FlowCopy]) -> StaticCatalog:
    """``copies`` as a catalog, each registered when it was."""
    return StaticCatalog([(copy.spec, copy.registered_at_ms) for copy in copies])


@dataclass(frozen=True, slots=True)
class FlowCopy:
    """A registered version to register again elsewhere (a redrive's sandbox), as it was:
    its text and the time it was registered (sessions choose by that time)."""

    spec: FlowSpec
    text: bytes
    registered_at_ms: int

    def entry(self) -> dict[str, object]:
        """As a bundle carries it (and :meth:`of` reads it back)."""
        return {
            "flow": self.spec.flow,
            "version": self.spec.version,
            "registered_at_ms": self.registered_at_ms,
            "text": self.text.decode("utf-8"),
        }

    @classmethod
    def of(cls, entry: Mapping[str, Any], where: str) -> FlowCopy:
        """A copy read back (a kept copy, a bundle's); SettingError (a damaged bundle is a
        bad argument: exit 2) when it is no spec, not the version it says, or dated outside
        what a Kafka record can be."""
        text, at = entry.get("text"), entry.get("registered_at_ms")
        if not isinstance(text, str):
            raise SettingError(f"{where}: not a flow copy (its text is not a string)")
        if not isinstance(at, int) or isinstance(at, bool) or not 0 <= at <= LATEST_MS:
            raise SettingError(f"{where}: registered_at_ms {at!r} is not a time in epoch ms")
        try:
            spec, _ = load_flow(text, where)
        except FlowSpecError as exc:
            raise SettingError(str(exc)) from None
        if (spec.flow, spec.version) != (entry.get("flow"), entry.get("version")):
            raise SettingError(f"{where}: its text is {spec.flow} v{spec.version}, not its name")
        return cls(spec, text.encode("utf-8"), at)


MAX_CARRIED: Final = 1_024
"""The most flow versions a bundle may carry."""
LATEST_MS: Final = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z: a registration time later than this is no time."""


def bundled(entries: Sequence[Mapping[str, Any]], where: str) -> list[FlowCopy]:
    """The flow versions a bundle carries (``where``: the bundle), each once."""
    if len(entries) > MAX_CARRIED:
        raise SettingError(
            f"{where}: flows.json holds {len(entries)} versions, at most {MAX_CARRIED}"
        )
    copies: dict[tuple[str, int], FlowCopy] = {}
    for n, entry in enumerate(entries):
        copy = FlowCopy.of(entry, f"{where}: flows.json[{n}]")
        name = (copy.spec.flow, copy.spec.version)
        if name in copies:
            raise SettingError(f"{where}: flows.json holds {name[0]} v{name[1]} twice")
        copies[name] = copy
    return list(copies.values())


def _kept(folder: Path) -> list[FlowCopy]:
    copies = []
    for path in sorted(folder.glob("*@*.json")) if folder.is_dir() else ():
        try:
            copies.append(FlowCopy.of(json.loads(path.read_text(encoding="utf-8")), str(path)))
        except (OSError, ValueError, HermesError) as exc:
            log.warning("flow copy %s skipped: %s", path, exc)
    return copies


async def copies_of(
    needed: Mapping[str, set[int]],
    kafka: KafkaConfig,
    prefix: str,
    keyring: Keyring,
    folder: Path,
    *,
    carried: Sequence[FlowCopy] = (),
    complete: bool = True,
) -> list[FlowCopy]:
    """Every registered version of each flow of ``needed`` (flow -> the versions the
    sessions ran), oldest first. A flow ``carried`` (a bundle's) is taken from there alone:
    its versions are those of the bus it was exported from, never this machine's. The
    others come from the registry of ``prefix`` when there is a broker (when it cannot be
    read, the copies stand in, with a warning), then the copies in ``folder``.
    ``complete``: ConfigError names a version the sessions ran that none holds; else what
    was found is returned (the caller says what is missing)."""
    carrying = {copy.spec.flow for copy in carried}
    found = {(c.spec.flow, c.spec.version): c for c in carried if c.spec.flow in needed}
    local = [flow for flow in needed if flow not in carrying]
    read = False
    if local and kafka.bootstrap:
        try:
            registered = await read_flows(kafka, prefix, keyring)
        except BrokerError as exc:
            log.warning("flow registry %s not read (%s): the copies stand in", prefix + FLOWS, exc)
        else:
            read = True
            for flow in local:
                for number, version in registered.versions.get(flow, {}).items():
                    copy = FlowCopy(version.spec, version.text, version.registered_at_ms)
                    found.setdefault((flow, number), copy)
    for copy in _kept(folder) if local else ():
        if copy.spec.flow in local:
            found.setdefault((copy.spec.flow, copy.spec.version), copy)
    ran = [(flow, number) for flow, versions in needed.items() for number in versions]
    missing = sorted(f"{flow} v{number}" for flow, number in ran if (flow, number) not in found)
    if missing and complete:
        places = ["the bundle"] if carried else []
        places += [f"the registry {prefix + FLOWS} on {kafka.address}"] if read else []
        places.append(f"the copies in {folder}")
        said = ", ".join(missing)
        raise ConfigError(f"the sessions ran flow {said}: not in {' nor in '.join(places)}")
    return sorted(found.values(), key=lambda c: (c.spec.flow, c.spec.version))


async def register_flow(
    kafka: KafkaConfig,
    prefix: str,
    keyring: Keyring,
    text: bytes,
    where: str,
    *,
    registered_at_ms: int | None = None,
) -> Registration:
    """Register the spec ``text`` (read from ``where``) as its version of its flow, signed
    by the conversation; refused for a version taken by another text, a version below the
    newest, or a bus without the registry topic. ``registered_at_ms``: the time it was
    registered on another bus (a copy; default: now)."""
    spec, _ = load_flow(text.decode("utf-8"), where)
    topic = prefix + FLOWS
    async with KafkaAdmin(kafka) as admin:
        if await admin.missing([topic]):
            raise ConfigError(
                f"no flow registry topic {topic} at {kafka.address}: `hermesbus topics apply` "
                "(or `hermesbus up`) creates it"
            )
    before = await _read(kafka, topic, keyring)
    taken = before.get(spec.flow, spec.version)
    if taken is not None:
        if taken.text == text:
            return Registration("already", taken)
        raise ConfigError(
            f"version {spec.version} of flow {spec.flow} is registered already, with other "
            f"text (digest {taken.digest[:16]}): versions are immutable; register it as "
            f"version {_next(before, spec.flow)}"
        )
    digest = digest_of(text)[:DIGEST_CHARS]
    others = [(d, at) for d, at in before.claimed(spec.flow, spec.version) if d != digest]
    if others:
        raise ConfigError(
            f"version {spec.version} of flow {spec.flow} was registered (offset {others[0][1]}) "
            "with other text, signed with a conversation key since rotated out: it can no longer "
            "be verified, and its version is not free; register that text again (it is signed "
            f"anew) or this one as version {_next(before, spec.flow)}"
        )
    newest = before.newest(spec.flow)
    if newest is not None and spec.version < newest.spec.version:
        raise ConfigError(
            f"flow {spec.flow} is at version {newest.spec.version}: a new version is higher "
            f"(register it as version {_next(before, spec.flow)})"
        )
    key = record_key(spec.flow, spec.version, text)
    headers = Signer(FLOW_SIGNER, keyring).sign(topic, key, text, ())
    await _produce(kafka, topic, key, text, list(headers), timestamp_ms=registered_at_ms)
    after = await _read(kafka, topic, keyring)
    kept = after.get(spec.flow, spec.version)
    if kept is None or kept.text != text:
        first = f" (offset {kept.offset})" if kept is not None else ""
        raise ConfigError(
            f"version {spec.version} of flow {spec.flow} was registered with other text by "
            f"someone else first{first}; yours is ignored: register it as version "
            f"{_next(after, spec.flow)}"
        )
    return Registration("registered", kept)


def _next(registered: Registered, flow: str) -> int:
    """The version after every one registered, believed or not."""
    newest = registered.newest(flow)
    taken = [v for f, v in registered.unverifiable if f == flow]
    return max([newest.spec.version if newest else 0, *taken]) + 1


async def _produce(
    kafka: KafkaConfig,
    topic: str,
    key: bytes,
    value: bytes,
    headers: list[tuple[str, bytes]],
    *,
    timestamp_ms: int | None,
) -> None:
    producer = plain_producer(kafka, acks="all")
    await start_or_close(producer.start, producer.stop, f"cannot reach Kafka at {kafka.address}")
    try:
        await producer.send_and_wait(
            topic, value, key=key, partition=0, headers=headers, timestamp_ms=timestamp_ms
        )
    except KafkaError as exc:
        raise BrokerError(f"cannot register the flow on {topic}: {kafka_reason(exc)}") from exc
    finally:
        await producer.stop()

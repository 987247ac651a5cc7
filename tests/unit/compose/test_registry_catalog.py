"""When the registry catalog reads the flow registry again: enough to decide as a replay
does, never once per record. The registry's reads are faked here (a list of versions and
when each became readable); reading the real topic is the integration suite's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesbus.compose import flows as module
from hermesbus.compose.flows import REREAD_MS, RegistryCatalog, copied_catalog
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.errors import BrokerError, ConfigError
from hermesbus.identity import Keyring
from hermesbus.processors.flow import FlowVersion, Registered, load_flow
from tests.unit.processors.flow.specs import CONTRACT, changed

SETTLE_MS = 1_000


class Registry:
    """Versions, each with its record time and the time it became readable; a clock."""

    def __init__(self) -> None:
        self.now_ms = 0.0
        self.records: list[tuple[int, int, float]] = []  # version, stamped, readable at

    def register(self, version: int, stamped_ms: int, readable_ms: float) -> None:
        self.records.append((version, stamped_ms, readable_ms))

    async def read(self, *_: Any) -> Registered:
        registered = Registered(verifier=None, topic="hermes.flows")  # type: ignore[arg-type]
        for version, stamped, readable in self.records:
            if readable <= self.now_ms:
                text = changed(CONTRACT, "version: 1", f"version: {version}")
                spec = load_flow(text, "test.yaml")[0]
                kept = registered.versions.setdefault(spec.flow, {})
                kept[version] = FlowVersion(spec, text.encode(), version, stamped)
        return registered


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[Registry]:
    faked = Registry()
    monkeypatch.setattr(module, "read_flows", faked.read)
    yield faked


def catalog(registry: Registry) -> RegistryCatalog:
    return RegistryCatalog(
        KafkaConfig(bootstrap="127.0.0.1:1"),
        "",
        lambda: Keyring({}),
        settle_ms=SETTLE_MS,
        clock=lambda: registry.now_ms / 1000,
    )


async def newest(catalog: RegistryCatalog, turn_ms: int) -> int:
    """The version a session whose first turn is at ``turn_ms`` starts in."""
    return (await catalog.current(turn_ms - SETTLE_MS))["contract_lookup"].version


async def test_a_version_stamped_a_settle_before_the_turn_is_taken_though_read_late(
    registry: Registry,
) -> None:
    """v2 is stamped 1,010 ms before the turn but became readable after the catalog's last
    read began: the catalog reads again, and decides as a replay (a fresh read) does."""
    registry.register(1, 0, 0)
    live = catalog(registry)
    registry.now_ms = 11_600
    await live.start()
    registry.register(2, 11_580, 11_620)
    registry.now_ms = 12_600
    assert await newest(live, 12_590) == 2
    replay = catalog(registry)
    assert await newest(replay, 12_590) == 2


async def test_a_read_serves_every_turn_it_is_fresh_for(registry: Registry) -> None:
    registry.register(1, 0, 0)
    live = catalog(registry)
    registry.now_ms = 5_000
    await live.start()
    for turn_ms in range(4_000, 5_500, 50):  # turns up to half a settle after the read
        registry.now_ms = turn_ms + 10
        assert await newest(live, turn_ms) == 1
    assert live.reads == 1


async def test_turns_dated_ahead_of_this_clock_read_at_most_once_per_interval(
    registry: Registry,
) -> None:
    registry.register(1, 0, 0)
    live = catalog(registry)
    await live.start()
    for n in range(20):  # 20 sessions in 200 ms, each turn dated a minute ahead
        registry.now_ms = 1_000 + 10 * n
        await newest(live, int(registry.now_ms) + 60_000)
    assert live.reads <= 1 + 200 // REREAD_MS + 1


async def test_a_version_nobody_registered_is_not_read_for_on_every_record(
    registry: Registry,
) -> None:
    registry.register(1, 0, 0)
    live = catalog(registry)
    await live.start()
    registry.now_ms = 1_000
    for _ in range(5):
        assert await live.version("contract_lookup", 9) is None
    assert live.reads == 2  # the start, and one read for the unknown version
    registry.now_ms += REREAD_MS
    assert await live.version("contract_lookup", 9) is None
    assert live.reads == 3
    assert await live.version("contract_lookup", 1) is not None
    assert live.reads == 3


async def test_the_versions_read_are_copied_for_a_replay_without_the_broker(
    registry: Registry, tmp_path: Path
) -> None:
    registry.register(1, 0, 0)
    registry.register(2, 5_000, 5_000)
    registry.now_ms = 6_000
    live = RegistryCatalog(
        KafkaConfig(bootstrap="127.0.0.1:1"),
        "",
        lambda: Keyring({}),
        clock=lambda: registry.now_ms / 1000,
        copies=tmp_path / "flows",
    )
    await live.start()
    copied = copied_catalog(tmp_path / "flows")
    for at_ms in (100, 4_999, 5_000, 9_000):
        assert await copied.current(at_ms) == await live.current(at_ms)
    assert (await copied.version("contract_lookup", 2)) == (
        await live.version("contract_lookup", 2)
    )
    assert sorted(p.name for p in (tmp_path / "flows").iterdir()) == [
        "contract_lookup@1.json",
        "contract_lookup@2.json",
    ]


async def test_a_redrive_takes_a_bundles_flow_from_the_bundle_alone(
    registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This machine's registry has versions 1 and 2 of the flow; the bundle carries the
    bus's version 1 only: the sandbox gets that one, so a turn picks what it picked then.
    A flow no bundle carries comes from the registry, or, when it cannot be read, from
    the state folder's copies."""
    registry.register(1, 0, 0)
    registry.register(2, 5_000, 0)
    kafka, keys, folder = KafkaConfig(bootstrap="127.0.0.1:1"), Keyring({}), tmp_path / "flows"
    theirs = module.FlowCopy(load_flow(CONTRACT, "bundle")[0], CONTRACT.encode(), 7)
    needed = {"contract_lookup": {1}}
    carried = await module.copies_of(needed, kafka, "", keys, folder, carried=[theirs])
    assert carried == [theirs]
    ours = await module.copies_of(needed, kafka, "", keys, folder)
    assert [(c.spec.version, c.registered_at_ms) for c in ours] == [(1, 0), (2, 5_000)]

    module.keep_copies(await registry.read(), folder)

    async def away(*_: Any) -> Registered:
        raise BrokerError("cannot reach Kafka at 127.0.0.1:1")

    monkeypatch.setattr(module, "read_flows", away)
    kept = await module.copies_of(needed, kafka, "", keys, folder)
    assert [(c.spec.version, c.registered_at_ms) for c in kept] == [(1, 0), (2, 5_000)]
    with pytest.raises(ConfigError, match=r"the sessions ran flow contract_lookup v9: not in"):
        await module.copies_of({"contract_lookup": {9}}, kafka, "", keys, folder)
    found = await module.copies_of(
        {"contract_lookup": {9}}, kafka, "", keys, folder, complete=False
    )
    assert len(found) == 2  # what there is: the caller says what is missing

"""``hermesbus up`` on topics that exist already: one partition count for every session topic."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.identity import KEYS_FILE_ENV
from hermesbus.topics import SESSION_KEY, Catalog
from tests.cli_process import Ran, clean_env, hermesbus

pytestmark = pytest.mark.kafka


def _up(broker: str, prefix: str, home: Path) -> Ran:
    env = clean_env(home, **{KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV]})
    options = ("--once", "--bootstrap", broker, "--prefix", prefix)
    return hermesbus("up", *options, env=env, cwd=home.parent, timeout=300)


async def _make(broker: str, prefix: str, partitions: dict[str, int]) -> None:
    """Create the catalog's ``name -> partitions`` topics under ``prefix``."""
    catalog = Catalog.load().with_overrides(prefix=prefix)
    async with KafkaAdmin(KafkaConfig(bootstrap=broker)) as admin:
        for name, count in partitions.items():
            spec = catalog.get(prefix + name).model_copy(update={"partitions": count})
            assert await admin.create([spec]) == [prefix + name]


async def _counts(broker: str, prefix: str) -> dict[str, int]:
    catalog = Catalog.load().with_overrides(prefix=prefix)
    session = [spec.name for spec in catalog if spec.key == SESSION_KEY]
    async with KafkaAdmin(KafkaConfig(bootstrap=broker)) as admin:
        existing = await admin.describe(session)
    return {name.removeprefix(prefix): topic.partitions for name, topic in existing.items()}


async def test_missing_topics_take_the_count_of_the_existing_ones(
    broker: str, unique: str, tmp_path: Path
) -> None:
    """`topics apply --partitions 4` made one; up makes the rest with 4, not the catalog's 6."""
    prefix = f"adopt-{unique}."
    await _make(broker, prefix, {"hermes.conversation.in": 4})
    result = _up(broker, prefix, tmp_path / "home")
    assert result.code == 0, result.err
    assert "topics ready: 10 created" in result.err  # the catalog's 11, less the one made
    adopted = f"the existing session topics have 4 partitions ({prefix}hermes.conversation.in;"
    assert adopted in result.err and "the missing ones get 4 too" in result.err
    counts = await _counts(broker, prefix)
    assert len(counts) == 8  # the session topics and the rollup's changelog, sized with them
    assert set(counts.values()) == {4}


async def test_session_topics_that_disagree_are_refused(
    broker: str, unique: str, tmp_path: Path
) -> None:
    prefix = f"odd-{unique}."
    await _make(broker, prefix, {"hermes.conversation.in": 4, "hermes.dispatcher": 6})
    result = _up(broker, prefix, tmp_path / "home")
    assert result.code == 1
    said = result.err
    assert "topics keyed by session have different partition counts" in said
    assert f"{prefix}hermes.conversation.in=4" in said and f"{prefix}hermes.dispatcher=6" in said
    assert "Traceback" not in said
    assert "joined" not in said  # refused before any processor started
    assert await _counts(broker, prefix) == {"hermes.conversation.in": 4, "hermes.dispatcher": 6}

"""``hermesbus up`` on topics that exist already: one partition count for every session topic."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.identity import KEYS_FILE_ENV
from hermesbus.topics import SESSION_KEY, Catalog

pytestmark = pytest.mark.kafka


def _up(broker: str, prefix: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env.update({"HERMES_HOME": str(home), KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV]})
    options = ("--once", "--bootstrap", broker, "--prefix", prefix)
    return subprocess.run(
        [sys.executable, "-m", "hermesbus.cli", "up", *options],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


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
    assert result.returncode == 0, result.stderr
    assert "topics ready: 7 created" in result.stderr  # 7 session topics and alerts, less one
    adopted = f"the existing session topics have 4 partitions ({prefix}hermes.conversation.in;"
    assert adopted in result.stderr and "the missing ones get 4 too" in result.stderr
    counts = await _counts(broker, prefix)
    assert len(counts) == 7
    assert set(counts.values()) == {4}


async def test_session_topics_that_disagree_are_refused(
    broker: str, unique: str, tmp_path: Path
) -> None:
    prefix = f"odd-{unique}."
    await _make(broker, prefix, {"hermes.conversation.in": 4, "hermes.dispatcher": 6})
    result = _up(broker, prefix, tmp_path / "home")
    assert result.returncode == 1
    said = result.stderr
    assert "topics keyed by session have different partition counts" in said
    assert f"{prefix}hermes.conversation.in=4" in said and f"{prefix}hermes.dispatcher=6" in said
    assert "Traceback" not in said
    assert "joined" not in said  # refused before any processor started
    assert await _counts(broker, prefix) == {"hermes.conversation.in": 4, "hermes.dispatcher": 6}

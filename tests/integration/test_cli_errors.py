"""``hermesbus trace`` on a cluster without the catalog's topics.

It used to end in aiokafka's CancelledError from ``consumer.stop()``, four times out
of four; now it names the missing topics and exits 1, on a new broker and with a
prefix nobody provisioned, and it keeps no state.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hermesbus.compose.broker import EmbeddedBroker
from hermesbus.topics import Catalog
from tests.cli_process import clean_env, hermesbus

pytestmark = pytest.mark.kafka

TOPICS = [spec.name for spec in Catalog.load() if spec.value_schema]


def _trace(bootstrap: str, tmp_path: Path, *options: str) -> tuple[int, str, str]:
    home = tmp_path / "home"
    ran = hermesbus(
        "trace", "trace_1", "--from-log", "--bootstrap", bootstrap, *options,
        env=clean_env(home), cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert "Traceback" not in ran.output and "CancelledError" not in ran.output, ran.output
    assert not home.exists()
    return ran.code, ran.out, ran.err


@pytest.mark.usefixtures("broker_binary")
async def test_trace_on_a_new_broker_names_every_missing_topic(tmp_path: Path) -> None:
    async with EmbeddedBroker(home=tmp_path / "broker") as fresh:
        code, out, err = _trace(fresh.bootstrap, tmp_path)
    assert code == 1, out + err
    assert f"none of the {len(TOPICS)} topics of the catalog exist on {fresh.bootstrap}" in err
    assert all(name in err for name in TOPICS)
    assert f"hermesbus topics apply --bootstrap {fresh.bootstrap}" in err


def test_trace_with_a_prefix_nobody_provisioned_says_so(
    broker: str, tmp_path: Path, unique: str
) -> None:
    prefix = f"nope{unique}."
    code, out, err = _trace(broker, tmp_path, "--prefix", prefix)
    assert code == 1, out + err
    assert f"(prefix {prefix!r}); missing: {prefix}hermes.conversation.in" in err
    assert all(prefix + name in err for name in TOPICS)
    assert "pass --prefix" in err


def test_trace_on_provisioned_topics_reads_them(broker: str, tmp_path: Path, unique: str) -> None:
    """The check does not get in the way: with the topics there, an absent trace is just
    not found (exit 1, saying so)."""
    prefix = f"t{unique}."
    env = clean_env(tmp_path / "home")
    applied = hermesbus(
        "topics", "apply", "--bootstrap", broker, "--prefix", prefix, env=env, cwd=tmp_path
    )
    assert applied.code == 0, applied.output
    code, out, err = _trace(broker, tmp_path, "--prefix", prefix)
    assert code == 1, out + err
    assert f"no envelope of trace 'trace_1' on the topics at {broker} (prefix '{prefix}')" in err
    assert "check the id, --session and --prefix" in err
    assert "missing" not in err

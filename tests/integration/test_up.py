"""``hermesbus up --demo --once`` on the embedded default: no servers, no Java."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hermesbus.demo import FIGURES
from hermesbus.identity import KEYS_FILE_ENV

pytestmark = pytest.mark.kafka


def _up(
    home: Path, cwd: Path, *options: str, keys: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env["HERMES_HOME"] = str(home)
    if keys is not None:
        env["HERMES_KEYS_FILE"] = str(keys)
    return subprocess.run(
        [sys.executable, "-m", "hermesbus.cli", "up", "--demo", "--once", *options],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
        check=False,
    )


def test_up_runs_both_demo_conversations_on_the_embedded_broker(tmp_path: Path) -> None:
    result = _up(tmp_path / "home", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for figure in FIGURES:
        assert figure in out
    assert "已提交报销单 EXP-" in out  # A (seed 000 §6)
    assert "当前进度已保存为未完成报销流程" in out  # B (seed 000 §2)
    assert out.count("(conversation:S5)") == 2
    assert "demo: both conversations finished" in out
    waterfalls = out.split("trace trace_")[1:]
    assert len(waterfalls) == 2
    for drawn in waterfalls:
        rows = [line.split()[0] for line in drawn.splitlines() if "|" in line]
        assert {"conversation", "dispatcher", "tool", "memory"} <= set(rows)
        assert "S3→S3.1" in drawn and "S3.1→S4" in drawn  # the seed's path
    assert "embedded broker (tansu, in memory)" in result.stderr
    assert "topics: 8 created" in result.stderr
    assert "tools: org_tool, finance_tool, ocr_tool, trip_tool, rule_engine_tool" in result.stderr
    for store in ("state", "memory", "tools"):
        assert (tmp_path / "home" / f"{store}.sqlite3").exists()
    keys = tmp_path / "home" / "keys.json"  # made on the embedded broker, private
    assert keys.stat().st_mode & 0o777 == 0o600
    assert f"signing keys: {keys}" in result.stderr


def test_up_runs_the_demo_in_exactly_once_mode_on_apache_kafka(
    kafka_bootstrap: str, unique: str, tmp_path: Path
) -> None:
    """The same demo with every processor writing in Kafka transactions."""
    options = ("--exactly-once", "--bootstrap", kafka_bootstrap, "--prefix", f"eos-{unique}.")
    keys = Path(os.environ[KEYS_FILE_ENV])  # a configured broker: the processes share keys
    result = _up(tmp_path / "home", tmp_path, *options, keys=keys)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "demo: both conversations finished" in result.stdout
    assert "dead_letters=0" in result.stderr and "dead_letters=1" not in result.stderr


def test_up_on_a_configured_broker_needs_shared_keys(
    broker: str, unique: str, tmp_path: Path
) -> None:
    """Keys are made only on the embedded broker; elsewhere up says how to make them."""
    result = _up(tmp_path / "home", tmp_path, "--bootstrap", broker, "--prefix", f"k-{unique}.")
    assert result.returncode == 1
    assert "no signing keys for app, conversation, dispatcher, tool, memory" in result.stderr
    assert "hermesbus keys init" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "home" / "keys.json").exists()

"""``hermesbus replay --shadow`` after the demo: from the trace index's archive once the
embedded broker is gone (and restarted), and from the topics of each real broker."""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hermesbus import Envelope, Reply
from hermesbus.cli import app
from hermesbus.compose.settings import Settings
from hermesbus.compose.stack import Stack, shadows
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.demo.expense import run
from hermesbus.processors import conversation
from hermesbus.processors.protocol import ProtocolPolicy
from hermesbus.replay.shadow import Recording, from_broker, shadow
from hermesbus.runtime import Handler, HandlerInput, Outcome
from tests.cli_process import Ran, clean_env, hermesbus
from tests.integration.stacks import demo_stack

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture(scope="module")
def demo_home(
    broker_binary: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, list[str]]]:
    """A HERMES_HOME after ``up --demo --once`` twice (the embedded broker, and its log,
    started afresh the second time), and the first run's four sessions (the two expense
    conversations, the table export, a flow replayed with the registry's copies the state
    folder keeps, and the budget assistant, whose model's answers are read from the log)."""
    home = tmp_path_factory.mktemp("replay") / "home"
    env = clean_env(home)
    first = hermesbus("up", "--demo", "--once", env=env, cwd=home.parent, timeout=300)
    assert first.code == 0, first.output
    again = hermesbus("up", "--demo", "--once", env=env, cwd=home.parent, timeout=300)
    assert again.code == 0, again.output
    yield home, _sessions(first)


def _sessions(up: Ran) -> list[str]:
    """The sessions the demo says to replay (``replay them: hermesbus replay --session ...``)."""
    line = next(line for line in up.out.splitlines() if line.startswith("replay them:"))
    return re.findall(r"--session (\S+)", line)


def test_the_demo_replays_from_the_archive_without_divergence(
    demo_home: tuple[Path, list[str]],
) -> None:
    home, sessions = demo_home
    assert len(sessions) == 4
    args = [a for s in sessions for a in ("--session", s)]
    ran = hermesbus("replay", *args, "--shadow", env=clean_env(home), cwd=home.parent)
    assert ran.code == 0, ran.output
    assert ran.out.strip().endswith("no divergence")
    assert f"from trace index {home / 'index.sqlite3'}" in ran.out
    as_json = hermesbus("replay", *args, "--shadow", "--json", env=clean_env(home), cwd=home.parent)
    answer = json.loads(as_json.out)
    assert answer["divergences"] == [] and answer["sessions"] == sessions
    # every processor compared on the four conversations (the table export's 5 turns and
    # 5 answers, its 5 calls too; the budget assistant's turn, 3 model answers and 2 tool
    # results, its 3 model rounds and 2 calls), memory fed both runs' writes
    assert answer["compared"]["conversation"] == 31 and answer["compared"]["tool"] == 21
    assert answer["compared"]["dispatcher"] > 40 and answer["outputs"] > 100
    assert answer["replayed"]["memory"] > answer["compared"]["memory"]


def _reworded(text: str) -> Handler:
    """Today's conversation handler, but for B's hold reply, which says ``text``."""
    original = conversation.handle

    async def handle(inp: HandlerInput) -> Outcome:
        outcome = await original(inp)
        emit = tuple(_reword(e, text) for e in outcome.emit)
        return Outcome(emit=emit, state=outcome.state, timers=outcome.timers, cancel=outcome.cancel)

    return handle


def _reword(envelope: Envelope, text: str) -> Envelope:
    body = envelope.payload.body
    if not isinstance(body, Reply) or "暂不提交" not in body.text:
        return envelope
    changed = body.model_copy(update={"text": body.text.replace("暂不提交", text)})
    return envelope.model_copy(
        update={"payload": envelope.payload.model_copy(update={"body": changed})}
    )


def test_a_changed_reply_text_exits_1_naming_the_field(
    demo_home: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deliberate change: conversation B's "好的，暂不提交" now says "先不提交"."""
    home, (_, stopped, _, _) = demo_home
    for name in [n for n in os.environ if n.startswith("HERMES_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.setattr(conversation, "handle", _reworded("先不提交"))
    result = CliRunner().invoke(app, ["replay", "--session", stopped, "--shadow"])
    assert result.exit_code == 1, result.output
    assert "divergence in conversation on UserTurn" in result.output
    assert "field payload.body.text" in result.output
    assert "recorded: '好的，暂不提交。" in result.output
    assert "replayed: '好的，先不提交。" in result.output


def test_a_dry_run_says_what_it_would_read_and_writes_nothing(
    demo_home: tuple[Path, list[str]],
) -> None:
    home, (submitted, _, _, _) = demo_home
    before = sorted(p.name for p in home.iterdir())
    ran = hermesbus(
        "replay",
        "--session",
        submitted,
        "--shadow",
        "--dry-run",
        env=clean_env(home),
        cwd=home.parent,
    )
    assert ran.code == 0, ran.output
    assert "would read" in ran.out and "conversation: run 8 inputs, compare 8" in ran.out
    assert "would write nothing" in ran.out
    assert sorted(p.name for p in home.iterdir()) == before


def test_an_unknown_session_is_an_error_not_a_clean_replay(
    demo_home: tuple[Path, list[str]],
) -> None:
    home, _ = demo_home
    ran = hermesbus(
        "replay", "--session", "sess_nobody", "--shadow", env=clean_env(home), cwd=home.parent
    )
    assert ran.code == 1
    assert "no envelope of session sess_nobody in trace index" in ran.err
    assert "Traceback" not in ran.output


# -- from the topics of each broker ---------------------------------------------------------


@pytest.fixture
async def running(
    broker: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Stack]:
    async with demo_stack(broker, f"replay-{unique}.", tmp_path / "home", monkeypatch) as started:
        yield started


def _quiet(kind: str, item: object) -> None:
    """The demo's printer, silenced."""


async def _settled(
    kafka: KafkaConfig, sessions: list[str], prefix: str, across: list[str]
) -> Recording:
    """The recording once the bus is quiet: the last reply reaches the user while memory
    writes and snapshots are still on their way (an input logged before its outputs
    would be a divergence of the test's making)."""
    recording = await from_broker(kafka, sessions, prefix=prefix, every_session_of=across)
    for _ in range(60):
        await asyncio.sleep(0.5)
        again = await from_broker(kafka, sessions, prefix=prefix, every_session_of=across)
        if len(again) == len(recording):
            return again
        recording = again
    raise AssertionError(f"the topics were still growing after 30 s ({len(recording)} records)")


async def test_the_demo_replays_from_the_topics_without_divergence(
    running: Stack, tmp_path: Path
) -> None:
    said = await run(running.bootstrap, running.prefix, _quiet)
    sessions = [s.conversation.session_id for s in said]
    kafka = KafkaConfig(bootstrap=running.bootstrap)
    memory_topic = running.prefix + "hermes.memory"
    recording = await _settled(kafka, sessions, running.prefix, [memory_topic])
    assert recording.source == f"Kafka at {running.bootstrap}"
    async with shadows(Settings.from_environment(), prefix=running.prefix) as wired:
        report = await shadow(recording, wired, policy=ProtocolPolicy(), prefix=running.prefix)
    assert report.divergences == [], [d.lines() for d in report.divergences]
    assert report.compared["conversation"] == 15 and report.compared["tool"] == 11
    # the command as a user types it, reading the same topics
    args = ["--session", sessions[0], "--shadow", "--bootstrap", running.bootstrap]
    env = clean_env(tmp_path / "home")
    ran = hermesbus("replay", *args, "--prefix", running.prefix, env=env, cwd=tmp_path, timeout=180)
    assert ran.code == 0, ran.output
    assert f"from Kafka at {running.bootstrap}" in ran.out and "no divergence" in ran.out


def test_an_exported_bundle_replays_where_there_is_no_broker_and_no_index(
    demo_home: tuple[Path, list[str]], tmp_path: Path
) -> None:
    home, (_, stopped, _, _) = demo_home
    bundle = tmp_path / "b.tar.gz"
    out = hermesbus("export", stopped, "-o", str(bundle), env=clean_env(home), cwd=tmp_path)
    assert out.code == 0, out.output
    assert re.search(
        r"exported \d+ records \(\d+ of session .+, [1-9]\d* of memory for the same user\)", out.out
    )
    elsewhere = clean_env(tmp_path / "empty-home")  # no keys, no index, no broker configured
    ran = hermesbus("replay", "--bundle", str(bundle), "--shadow", env=elsewhere, cwd=tmp_path)
    assert ran.code == 0, ran.output
    assert f"from bundle {bundle}" in ran.out and ran.out.strip().endswith("no divergence")
    assert not (tmp_path / "empty-home").exists()  # nothing written


def test_a_redrive_with_live_tools_runs_the_registered_tools_in_the_sandbox(
    demo_home: tuple[Path, list[str]],
) -> None:
    """On the embedded default: the sandbox gets its own embedded broker, the bus's tool
    registry copied, and the demo tools really run; the bus's files stay as they were."""
    home, (submitted, _, _, _) = demo_home
    before = {p.name: p.read_bytes() for p in sorted(home.glob("*.sqlite3*"))}
    args = ["--session", submitted, "--redrive", "--into", "live-1.", "--live-tools"]
    ran = hermesbus("replay", *args, env=clean_env(home), cwd=home.parent, timeout=240)
    assert ran.code == 0, ran.output
    answers = [line for line in ran.out.splitlines() if line.startswith("hermes  ")]
    assert answers[-1].startswith("hermes  已提交报销单 EXP-"), ran.out
    assert "on the embedded broker (gone now" in ran.out
    assert {p.name: p.read_bytes() for p in sorted(home.glob("*.sqlite3*"))} == before
    assert (home / "replays" / "live-1" / "tools.sqlite3").exists()


def test_a_time_range_alone_replays_every_session_in_it(demo_home: tuple[Path, list[str]]) -> None:
    home, sessions = demo_home
    ran = hermesbus(
        "replay", "--from", "0", "--shadow", "--json", env=clean_env(home), cwd=home.parent
    )
    assert ran.code == 0, ran.output
    answer = json.loads(ran.out)
    assert set(sessions) < set(answer["sessions"]) and len(answer["sessions"]) == 8  # both runs
    assert answer["divergences"] == []

"""``hermesbus up --demo --once`` on the embedded default: no servers, no Java."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.neo4j import Neo4jConfig, Neo4jGraphStore
from hermesbus.connectors.redis import RedisConfig, RedisStateStore
from hermesbus.contract.payloads import TrustLevel
from hermesbus.demo.expense import FIGURES
from hermesbus.identity import KEYS_FILE_ENV
from tests.cli_process import Background
from tests.integration.demo_run import DemoRun

pytestmark = pytest.mark.kafka

BUDGET_SCALE = "HERMES_CONVERSATION_BUDGET_SCALE"


def _up(
    home: Path, cwd: Path, *options: str, keys: Path | None = None, **settings: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env["HERMES_HOME"] = str(home)
    # not about timing: a cycle gets 6x the documents' budget (S1 30 s), since on a busy
    # machine a fresh Neo4j answered memory's first query in 4.9-8.7 s of S1's 5 s
    env[BUDGET_SCALE] = "6"
    env.update(settings)
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


@pytest.fixture(scope="module")
def python_demo(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One ``up --demo --once`` on the embedded broker with the python tools (its home and
    what it printed), read by each test about that run: a run takes half a minute here."""
    where = tmp_path_factory.mktemp("python-demo")
    return where / "home", _up(where / "home", where)


def test_up_runs_both_demo_conversations_on_the_embedded_broker(
    python_demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    home, result = python_demo
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for figure in FIGURES:
        assert figure in out
    assert "已提交报销单 EXP-" in out  # A, submitted
    assert "当前进度已保存为未完成报销流程" in out  # B, held
    assert out.count("(conversation:S5)") == 2
    assert "demo: all four conversations finished" in out
    waterfalls = out.split("trace trace_")[1:]
    assert len(waterfalls) == 2
    for drawn in waterfalls:
        rows = [line.split()[0] for line in drawn.splitlines() if "|" in line]
        assert {"conversation", "dispatcher", "tool", "memory"} <= set(rows)
        assert "S3→S3.1" in drawn and "S3.1→S4" in drawn  # the walkthrough's path
    said = result.stderr  # each start-up step, as it completes
    assert "broker up: embedded (tansu, in memory) at 127.0.0.1:" in said
    assert "topics ready: 11 created" in said
    assert re.search(r"s  metrics: http://127\.0\.0\.1:\d+/metrics$", said, re.M), said
    assert f"state: {home}\n" in said
    assert (
        "tools ready: finance_tool, ocr_tool, org_tool, rule_engine_tool, table_tool, trip_tool"
        in said
    )
    joined = ("conversation", "dispatcher", "memory", "tool", "tool-org_tool", "tool-trip_tool")
    for name in joined:
        assert f"{name} joined" in said
    assert said.index("topics ready") < said.index("conversation joined") < said.index("ready\n")
    for store in ("state", "memory", "tools"):
        assert (home / f"{store}.sqlite3").exists()
    keys = home / "keys.json"  # made on the embedded broker, private
    assert keys.stat().st_mode & 0o777 == 0o600
    assert f"signing keys: {keys}" in result.stderr


async def test_up_runs_the_demo_with_redis_and_neo4j_configured(
    tmp_path: Path, unique: str, redis_url: str, neo4j_url: str
) -> None:
    """Session state in Redis, the long-term graph in Neo4j: both conversations finish, and
    the stores hold what they should (each processor's state per session, in one hash
    slot; the approval edge with who verified it and how trusted it is)."""
    result = await asyncio.to_thread(
        _up,
        tmp_path / "home",
        tmp_path,
        HERMES_REDIS_URL=redis_url,
        HERMES_REDIS_PREFIX=f"up{unique}",
        HERMES_NEO4J_URL=neo4j_url,
        HERMES_NEO4J_NAMESPACE=f"up{unique}",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "demo: all four conversations finished" in result.stdout
    assert f"session state: Redis at {redis_url} (keys up{unique}:*)" in result.stderr
    assert not (tmp_path / "home" / "state.sqlite3").exists()  # nothing went to SQLite
    book = MarkBook(tmp_path / "home")  # up's: the stores' marks as up recorded them
    async with RedisStateStore(
        RedisConfig(url=redis_url, prefix=f"up{unique}"), book=book
    ) as redis:
        keys = {k.decode() async for k in redis.redis.scan_iter(match=f"up{unique}:*")}
    sessions = {k.split("{", 1)[1].split("}", 1)[0] for k in keys if k.endswith(":state:memory")}
    assert len(sessions) == 4  # the two expense conversations, the table export, the budget
    for counted in ("table_export:1", "expense:1"):  # the paths of the finished sessions
        assert f"up{unique}:{{{counted}}}:state:conversation.paths" in keys
    for session in sessions:
        for processor in ("conversation", "dispatcher", "memory", "tool"):
            assert f"up{unique}:{{{session}}}:state:{processor}" in keys
    assert f"up{unique}:items:{{u_xyz789}}" in keys  # mid-term: the unfinished report
    assert not (tmp_path / "home" / "memory.sqlite3").exists()
    config = Neo4jConfig(url=neo4j_url, namespace=f"up{unique}")
    async with Neo4jGraphStore(config, book=book) as graph:
        rows = await graph.driver.execute_query(
            "MATCH (s:Entity {ns: $ns})-[r:FACT {relation: 'approved_by'}]->(o:Entity) "
            "RETURN s.name AS s, o.name AS o, r.verified_by AS by, r.trust_level AS trust, "
            "r.verified_at AS at, r.deprecated AS deprecated",
            ns=f"up{unique}",
        )
        approvals = [dict(r) for r in rows.records]
        assert len(approvals) == 1
        (approval,) = approvals
        assert approval["s"].startswith("expense:EXP-") and approval["o"] == "person:张主管"
        assert (approval["by"], approval["trust"], approval["deprecated"]) == (
            "finance_tool",
            "verified",
            False,
        )
        assert approval["at"] > 0
        facts = await graph.facts("user:u_xyz789", TrustLevel.VERIFIED)
        assert ("belongs_to", "dept:采购部") in {(f.relation, f.object) for f in facts}


def test_up_runs_the_demo_in_exactly_once_mode_on_apache_kafka(
    kafka_bootstrap: str, unique: str, tmp_path: Path
) -> None:
    """The same demo with every processor writing in Kafka transactions."""
    options = ("--exactly-once", "--bootstrap", kafka_bootstrap, "--prefix", f"eos-{unique}.")
    keys = Path(os.environ[KEYS_FILE_ENV])  # a configured broker: the processes share keys
    result = _up(tmp_path / "home", tmp_path, *options, keys=keys)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "demo: all four conversations finished" in result.stdout
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


# -- the broker goes away -------------------------------------------------------------------

NOTICE_S = 15.0
"""How long up may take to notice its embedded broker died and to stop."""
REVOKE_MS = 3_000
"""The revoke timeout the stop tests run with; up must stop within it plus STOP_MARGIN_S."""
STOP_MARGIN_S = 5.0


class _Command(Background):
    """A hermesbus command in the background (in the test's session: ``end`` stops its
    children itself)."""

    def __init__(self, folder: Path, name: str, *args: str, env: dict[str, str]) -> None:
        super().__init__(folder, *args, env=env, name=name, session=False)

    def end(self) -> None:
        """SIGTERM, then SIGKILL of it and its children (the broker is in its own session)."""
        if self.process.poll() is None:
            children = _children(self.pid)
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                for child in children:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(child, signal.SIGKILL)
                self.process.kill()
                self.process.wait()


@contextlib.contextmanager
def _command(folder: Path, name: str, *args: str, env: dict[str, str]) -> Iterator[_Command]:
    command = _Command(folder, name, *args, env=env)
    try:
        yield command
    finally:
        command.end()


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    return {**env, "HERMES_HOME": str(home), **extra}


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _tansu(pid: int) -> int:
    """The embedded broker among the children of ``pid`` (up also runs tool workers)."""
    (found,) = [c for c in _children(pid) if b"tansu" in Path(f"/proc/{c}/cmdline").read_bytes()]
    return found


def _cpu_s(pid: int) -> float:
    """User plus system CPU time of ``pid`` so far, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _clean(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr
    assert "Unclosed" not in stderr, stderr


@pytest.mark.slow
def test_up_stops_saying_why_when_its_embedded_broker_dies(tmp_path: Path) -> None:
    """Its topics were in memory: up stops (exit 3) rather than restart the broker empty."""
    home = tmp_path / "home"
    with _command(tmp_path, "up", "up", env=_env(home)) as up:
        up.wait_for("serving; Ctrl-C stops", within_s=90)
        tansu = _tansu(up.pid)
        killed = time.monotonic()
        os.kill(tansu, signal.SIGKILL)
        code = up.process.wait(NOTICE_S)
        took = time.monotonic() - killed
    said = up.stderr()
    assert code == 3, said
    assert took < NOTICE_S
    assert f"(tansu, pid {tansu}, log {home / 'broker'}" in said
    assert "died: signal 9 (SIGKILL)" in said
    assert "its topics and messages were in memory and are lost" in said.lower()
    assert "stopping (exit code 3)" in said
    assert said.rstrip().endswith("stopped")
    _clean(said)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_up_waits_for_a_lost_broker_says_so_every_30_s_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    """A configured broker gone: reported once, again after 30 s, no CPU spent; SIGTERM stops."""
    keys = os.environ[KEYS_FILE_ENV]  # a configured broker: the processes share keys
    env = _env(tmp_path / "home", HERMES_KEYS_FILE=keys)
    env["HERMES_RUNTIME_REVOKE_TIMEOUT_MS"] = str(REVOKE_MS)
    with _command(tmp_path, "broker", "broker", env=_env(tmp_path / "broker-home")) as broker:
        said = broker.wait_for("KAFKA_BOOTSTRAP=", within_s=30, stdout=True)
        bootstrap = said.strip().removeprefix("KAFKA_BOOTSTRAP=")
        with _command(tmp_path, "up", "up", "--bootstrap", bootstrap, env=env) as up:
            up.wait_for("serving; Ctrl-C stops", within_s=90)
            os.kill(_tansu(broker.pid), signal.SIGKILL)
            broker.process.wait(10)  # `hermesbus broker` exits when its tansu has died
            up.wait_for(f"the Kafka broker at {bootstrap} is unreachable (since", within_s=10)
            before = _cpu_s(up.pid)
            time.sleep(10)
            spent = _cpu_s(up.pid) - before
            up.wait_for(f"the Kafka broker at {bootstrap} is still unreachable", within_s=35)
            assert up.process.poll() is None, up.stderr()
            signalled = time.monotonic()
            up.process.send_signal(signal.SIGTERM)
            code = up.process.wait(REVOKE_MS / 1000 + STOP_MARGIN_S)
            took = time.monotonic() - signalled
    said = up.stderr()
    assert code == 0, said
    assert took < REVOKE_MS / 1000 + STOP_MARGIN_S
    assert spent < 3.0, f"{spent:.2f} s of CPU in 10 s while the broker was gone"
    assert said.count("is unreachable (since") == 1  # once, then every 30 s: not per fetch
    assert said.count("still unreachable") == 1
    assert "fetch failed" not in said
    assert said.rstrip().endswith("stopped")
    _clean(said)


def _replies(out: str) -> list[str]:
    """What the demo's users were told, with this run's ids made alike."""
    said = [line for line in out.splitlines() if line.startswith("hermes  ")]
    return [re.sub(r"EXP-[0-9a-f]{8}", "EXP-…", line) for line in said]


def test_up_runs_the_demo_through_its_mcp_server_with_the_same_replies(
    python_demo: tuple[Path, subprocess.CompletedProcess[str]], mcp_demo: DemoRun
) -> None:
    """The same demo with its tools served by the demo MCP server over stdio (on the shared
    embedded broker, under a prefix of its own) tells its users the same."""
    _, python = python_demo
    assert python.returncode == 0, python.stdout + python.stderr
    served = mcp_demo.ran
    assert served.returncode == 0, served.stdout + served.stderr
    assert "demo: all four conversations finished" in served.stdout
    assert len(_replies(python.stdout)) >= 8
    assert _replies(served.stdout) == _replies(python.stdout)
    assert (mcp_demo.home / "mcp" / "demo.stderr.log").exists()  # the server ran over stdio
    listed = subprocess.run(
        [sys.executable, "-m", "hermesbus.cli", "tools", "list", "--home", str(mcp_demo.home)],
        env={**os.environ, "COLUMNS": "250"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert listed.returncode == 0 and listed.stdout.count(" mcp ") == 6, listed.stdout

"""``hermesbus doctor`` as a user runs it: each check ok or its fix, and its exit code."""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from hermesbus.cli._doctor import NEED_SETTINGS
from hermesbus.compose.broker import free_port
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.identity import KEYS_FILE_ENV
from hermesbus.topics import Catalog
from tests.cli_process import Ran, clean_env, hermesbus

pytestmark = pytest.mark.kafka

CHECKS = (
    "settings",
    "python",
    "state",
    "signing keys",
    "broker",
    "transactions",
    "topics",
    "trace index",
)
"""The checks every run prints (the schema registry and tools too)."""


def _run(*args: str, env: dict[str, str], cwd: Path) -> Ran:
    return hermesbus(*args, env=env, cwd=cwd, timeout=300)  # up --demo --once among them


def _statuses(out: str) -> dict[str, str]:
    """Check name -> ok / warn / FAIL / skip, from doctor's lines."""
    found = {}
    for line in out.splitlines():
        status, _, rest = line.partition("  ")
        if status.strip() in {"ok", "warn", "FAIL", "skip"}:
            name = rest.strip().split("  ", 1)[0]
            found[name] = status.strip()
    return found


def test_after_the_run_command_every_check_is_ok(broker_binary: str, tmp_path: Path) -> None:
    """The acceptance: the embedded default, after ``up --demo --once``, is ready."""
    env = clean_env(tmp_path / "home")
    up = _run("up", "--demo", "--once", env=env, cwd=tmp_path)
    assert up.code == 0, up.out + up.err
    result = _run("doctor", env=env, cwd=tmp_path)
    assert result.code == 0, result.out + result.err
    statuses = _statuses(result.out)
    assert set(CHECKS) <= set(statuses)
    assert {f"tool {name}" for name in ("org_tool", "ocr_tool", "trip_tool")} <= set(statuses)
    assert set(statuses.values()) == {"ok"}, result.out
    assert f"state                  {tmp_path / 'home'} (HERMES_HOME)" in result.out
    assert f"{tmp_path / 'home' / 'keys.json'}" in result.out
    indexed = re.search(
        r"index\.sqlite3 \(HERMES_ELASTICSEARCH_URL unset\): ([\d,]+) envelopes", result.out
    )
    assert indexed is not None and int(indexed[1].replace(",", "")) > 0, result.out  # the demo's
    assert "doctor: ready" in result.out


def test_on_a_fresh_machine_it_creates_nothing(broker_binary: str, tmp_path: Path) -> None:
    home = tmp_path / "never-made"
    result = _run("doctor", env=clean_env(home), cwd=tmp_path)
    assert result.code == 0, result.out + result.err
    assert set(_statuses(result.out).values()) == {"ok"}
    assert "not created yet" in result.out
    assert "`hermesbus up` makes them" in result.out  # the keys, on the embedded broker
    assert not home.exists()
    assert not (tmp_path / ".hermes").exists()


def test_an_unreachable_broker_fails_naming_it(tmp_path: Path) -> None:
    where = f"127.0.0.1:{free_port()}"
    result = _run("doctor", "--bootstrap", where, env=clean_env(tmp_path / "home"), cwd=tmp_path)
    assert result.code == 1
    assert _statuses(result.out)["broker"] == "FAIL"
    assert f"cannot reach Kafka at {where}" in result.out
    assert "fix: start the broker, or fix the address" in result.out
    assert "doctor: 2 to fix: signing keys, broker" in result.out  # no keys for a cluster
    assert "Traceback" not in result.out + result.err


def test_an_unreachable_schema_registry_fails(broker_binary: str, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    env = clean_env(tmp_path / "home", HERMES_SCHEMA_REGISTRY_URL=url)
    result = _run("doctor", env=env, cwd=tmp_path)
    assert result.code == 1
    assert _statuses(result.out)["schema registry"] == "FAIL"
    assert f"{url}: ConnectError" in result.out
    assert "Traceback" not in result.out + result.err


def test_a_configured_broker_without_keys_fails_on_the_keys(
    embedded_bootstrap: str, unique: str, tmp_path: Path
) -> None:
    options = ("doctor", "--bootstrap", embedded_bootstrap, "--prefix", f"doc-{unique}.")
    result = _run(*options, env=clean_env(tmp_path / "home"), cwd=tmp_path)
    assert result.code == 1
    statuses = _statuses(result.out)
    assert statuses["signing keys"] == "FAIL"
    assert "run `hermesbus keys init`" in result.out
    assert statuses["broker"] == "ok"
    assert statuses["topics"] == "warn"  # up creates missing topics: not a failure
    assert f"11 of 11 missing: doc-{unique}.hermes.conversation.in" in result.out
    fix = f"`hermesbus topics apply --bootstrap {embedded_bootstrap} --prefix doc-{unique}.`"
    assert fix in result.out  # the command creates the topics doctor looked for


def test_apache_kafka_with_keys_is_ready_and_has_transactions(
    kafka_bootstrap: str, unique: str, tmp_path: Path
) -> None:
    env = clean_env(tmp_path / "home", **{KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV]})
    options = ("doctor", "--bootstrap", kafka_bootstrap, "--prefix", f"doc-{unique}.")
    result = _run(*options, env=env, cwd=tmp_path)
    assert result.code == 0, result.out + result.err
    statuses = _statuses(result.out)
    assert statuses["signing keys"] == statuses["broker"] == statuses["transactions"] == "ok"
    assert "supported: `up --exactly-once` can run here" in result.out
    assert statuses["topics"] == "warn"
    applied = _run("topics", "apply", *options[1:], env=env, cwd=tmp_path)
    assert applied.code == 0, applied.out + applied.err
    again = _run(*options, env=env, cwd=tmp_path)
    assert _statuses(again.out)["topics"] == "ok"
    assert "all 11, session topics with 6 partitions" in again.out


async def test_session_topics_that_disagree_fail_the_topics_check(
    embedded_bootstrap: str, unique: str, tmp_path: Path
) -> None:
    prefix = f"doc-odd-{unique}."
    catalog = Catalog.load().with_overrides(prefix=prefix)
    async with KafkaAdmin(KafkaConfig(bootstrap=embedded_bootstrap)) as admin:
        for name, count in (("hermes.conversation.in", 4), ("hermes.dispatcher", 6)):
            spec = catalog.get(prefix + name).model_copy(update={"partitions": count})
            await admin.create([spec])
    env = clean_env(tmp_path / "home", **{KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV]})
    options = ("doctor", "--bootstrap", embedded_bootstrap, "--prefix", prefix)
    result = _run(*options, env=env, cwd=tmp_path)
    assert result.code == 1
    assert _statuses(result.out)["topics"] == "FAIL"
    assert f"{prefix}hermes.conversation.in=4, {prefix}hermes.dispatcher=6" in result.out


def test_a_state_folder_that_is_a_file_fails_and_the_other_checks_still_run(
    broker_binary: str, tmp_path: Path
) -> None:
    """HERMES_HOME is a setting every part reads: doctor reads the settings once, first,
    names the variable, still checks what needs only the broker's settings, and skips the
    checks that would need the rest (none runs on defaults)."""
    home = tmp_path / "afile"
    home.write_text("")
    result = _run("doctor", env=clean_env(home), cwd=tmp_path)
    assert result.code == 1
    statuses = _statuses(result.out)
    assert statuses["settings"] == "FAIL"
    assert f"HERMES_HOME: {home} is a file, not a folder" in result.out
    assert statuses["python"] == statuses["broker"] == "ok"  # checked all the same
    skipped = set(NEED_SETTINGS) - {"broker", "transactions", "topics"}
    assert {statuses[name] for name in skipped} == {"skip"}, result.out
    assert "doctor: 1 to fix: settings" in result.out
    assert "Traceback" not in result.out + result.err


def _probe_rows(home: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(home / "tools.sqlite3") as db:
        return list(db.execute("SELECT * FROM probes ORDER BY tool"))


def test_probing_the_tools_changes_nothing_a_running_bus_reads(
    broker_binary: str, tmp_path: Path
) -> None:
    """doctor probes each tool live but keeps the answers to itself."""
    home = tmp_path / "home"
    env = clean_env(home)
    up = _run("up", "--demo", "--once", env=env, cwd=tmp_path)
    assert up.code == 0, up.err
    before = _probe_rows(home)
    assert len(before) == 6  # the six demo tools
    result = _run("doctor", env=env, cwd=tmp_path)
    assert result.code == 0, result.out
    assert "tool ocr_tool" in result.out
    assert _probe_rows(home) == before


class _HtmlPage(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html>login</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


def test_a_registry_address_that_is_not_a_registry_fails_plainly(
    broker_binary: str, tmp_path: Path
) -> None:
    server = HTTPServer(("127.0.0.1", 0), _HtmlPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        url = f"http://user:s3cret@127.0.0.1:{port}"
        result = _run("doctor", env=clean_env(tmp_path / "home", HERMES_SCHEMA_REGISTRY_URL=url),
                      cwd=tmp_path)  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert result.code == 1
    assert _statuses(result.out)["schema registry"] == "FAIL"
    assert f"http://127.0.0.1:{port}/subjects did not answer JSON" in result.out
    assert "s3cret" not in result.out + result.err
    assert _statuses(result.out)["tools"] == "ok"  # the report went on


def test_configured_redis_and_neo4j_are_checked_and_never_written(
    broker_binary: str, tmp_path: Path, redis_url: str, neo4j_url: str, unique: str
) -> None:
    env = clean_env(
        tmp_path / "home",
        HERMES_REDIS_URL=redis_url,
        HERMES_REDIS_PREFIX=f"doc{unique}",
        HERMES_NEO4J_URL=neo4j_url,
        HERMES_NEO4J_NAMESPACE=f"doc{unique}",
    )
    result = _run("doctor", env=env, cwd=tmp_path)
    statuses = _statuses(result.out)
    assert (statuses["redis"], statuses["neo4j"]) == ("ok", "ok"), result.out
    assert f"{redis_url} answers (Redis 7." in result.out
    assert f"{neo4j_url} answers (Neo4j/5." in result.out
    assert f"none registered in Redis at {redis_url}" in result.out  # tools: read from Redis


def test_an_unreachable_redis_fails_naming_it_but_not_its_password(
    broker_binary: str, tmp_path: Path
) -> None:
    port = free_port()
    env = clean_env(tmp_path / "home", HERMES_REDIS_URL=f"redis://:s3cret@127.0.0.1:{port}/0")
    result = _run("doctor", env=env, cwd=tmp_path)
    assert result.code == 1
    assert _statuses(result.out)["redis"] == "FAIL"
    assert f"Redis at redis://127.0.0.1:{port}/0" in result.out
    assert "s3cret" not in result.out + result.err

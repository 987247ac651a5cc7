"""A failed test run keeps every service's log and says where: Redis and Neo4j too.

Their stop scripts used to delete their whole folder, so a failed run listed the brokers,
the registry and Elasticsearch, but never Redis or Neo4j. Each is started here on its own
(the run's shared servers are left alone), stopped keeping its logs, and ``evidence`` (the
part of ``deploy/local/test.sh`` that prints the list) is run on what is left.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str, *args: str, run_dir: Path) -> subprocess.CompletedProcess[str]:
    variable = f"HERMES_{name.upper()}_RUN_DIR"
    env = {**os.environ, variable: str(run_dir), "TMPDIR": str(run_dir)}
    env["HERMES_NEO4J_START_TIMEOUT"] = "300"  # a second JVM beside the run's services
    return subprocess.run(
        ["bash", str(ROOT / "deploy/local" / f"{name}.sh"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=400,
        check=False,
    )


@pytest.fixture
def started(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``deploy/local/NAME.sh start`` in a run folder of its own; stopped in any case."""
    name = request.param
    run_dir = tmp_path / name
    run_dir.mkdir()
    done = _script(name, "start", run_dir=run_dir)
    assert done.returncode == 0, done.stderr
    try:
        yield name, run_dir
    finally:
        _script(name, "stop", *(["--fast"] if name == "neo4j" else []), run_dir=run_dir)


def _evidence(run_dir: Path, **logs: Path) -> str:
    """``evidence`` on a run with one set of services (a worker's), whose env file names
    ``logs``, as deploy/local/services.sh writes it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_TEST_")}
    env["RUN_DIR"] = str(run_dir)
    (run_dir / "gw0").mkdir(exist_ok=True)
    (run_dir / "gw0" / "env").write_text(
        "".join(f"export HERMES_TEST_{k.upper()}_LOG='{v}'\n" for k, v in logs.items())
    )
    done = subprocess.run(
        ["bash", "-c", f"source {ROOT / 'deploy/local/evidence.sh'}; evidence 1 {run_dir}/gw0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=True,
    )
    return done.stdout


@pytest.mark.redis
@pytest.mark.parametrize("started", ["redis"], indirect=True)
def test_redis_keeps_its_log_when_asked_and_evidence_lists_it(
    started: tuple[str, Path], redis_url: str
) -> None:
    _, run_dir = started
    folder = Path((run_dir / "redis.dir").read_text().strip())
    stopped = _script("redis", "stop", "--keep-logs", run_dir=run_dir)
    assert stopped.returncode == 0, stopped.stderr
    log = folder / "redis.log"
    assert log.stat().st_size > 0 and "Ready to accept connections" in log.read_text()
    assert [p.name for p in folder.iterdir()] == ["redis.log"]
    listed = _evidence(run_dir, redis=log)
    assert f"Redis            log: {log}" in listed
    assert f"the logs of the services are kept in {run_dir}" in listed


@pytest.mark.neo4j
@pytest.mark.parametrize("started", ["neo4j"], indirect=True)
def test_neo4j_keeps_its_logs_not_its_data_and_evidence_lists_them(
    started: tuple[str, Path], neo4j_url: str
) -> None:
    _, run_dir = started
    folder = Path((run_dir / "neo4j.dir").read_text().strip())
    log = Path((run_dir / "neo4j.logfile").read_text().strip())
    assert log.name == "debug.log" and log.is_relative_to(folder)
    stopped = _script("neo4j", "stop", "--fast", "--keep-logs", run_dir=run_dir)
    assert stopped.returncode == 0, stopped.stderr
    assert log.stat().st_size > 0  # the server's own log, kept where it was
    kept = [p for p in folder.rglob("*") if p.is_file()]
    assert kept and all(p.suffix == ".log" or p.name == "runner.out" for p in kept), kept
    assert f"Neo4j            log: {log}" in _evidence(run_dir, neo4j=log)


def test_nothing_is_listed_and_the_folder_goes_when_no_service_ran(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    assert _evidence(run_dir, redis=run_dir / "none.log") == ""
    assert not run_dir.exists()

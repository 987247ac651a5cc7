"""deploy/local/lib.sh, what the five service scripts share, run for real in bash.

Each test sources the library in a bash of its own, with the settings a service script
gives it, and checks what the functions do to real processes, files and ports: a free
port binds, a pid file is read and removed, a process that ignores SIGTERM is gone after
SIGKILL, status and usage errors exit as the scripts' callers expect.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LOCAL = ROOT / "deploy/local"
LIB = LOCAL / "lib.sh"
SCRIPTS = ("kafka", "schema-registry", "elasticsearch", "redis", "neo4j")
PRELUDE = """set -euo pipefail
LOG_NAME=thing.sh SERVICE=Thing USAGE="start | stop"
PID_FILE=$T/thing.pid PID_PATTERN=$PATTERN DIR_FILE=$T/thing.dir MARKER=.thing
source "$LIB"
"""
ASLEEP = "^sleep 600"
"""The command line of the processes these tests start (``exec sleep 600``)."""
UP_AND_ASLEEP = ': >"$T/up"; exec sleep 600'
"""Writes T/up once it runs, then sleeps (its command line: ``sleep 600``)."""


def _lib(body: str, tmp: Path, pattern: str = ASLEEP) -> subprocess.CompletedProcess[str]:
    """Run ``body`` in bash after sourcing lib.sh; T is ``tmp``."""
    env = {**os.environ, "T": str(tmp), "LIB": str(LIB), "PATTERN": pattern}
    return subprocess.run(
        ["bash", "-c", PRELUDE + body],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@contextmanager
def _process(command: str, tmp: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A bash running ``command``, a process of this test's own; killed if the test leaves it."""
    proc = subprocess.Popen(
        ["bash", "-c", command],
        env={**os.environ, "T": str(tmp)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)


def _exited(proc: subprocess.Popen[bytes]) -> None:
    """Wait until ``proc`` has exited, without reaping it: it stays a zombie, its pid ours."""
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)


def _until(predicate: Callable[[], bool], what: str) -> None:
    """Poll ``predicate`` for up to 120 s."""
    deadline = time.monotonic() + 120
    while not predicate():
        assert time.monotonic() < deadline, f"not within 120 s: {what}"
        time.sleep(0.05)


def _written(path: Path) -> bool:
    """``path`` holds a whole line (its writer has finished it)."""
    return path.exists() and path.read_text().endswith("\n")


def _gone(pid: int) -> bool:
    """No process ``pid``, or one that has exited and waits to be reaped."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return text.rpartition(") ")[2].startswith("Z")


# ---------------------------------------------------------------- messages and checks


def test_log_and_die_prefix_their_lines_and_die_exits_1(tmp_path: Path) -> None:
    done = _lib('log "hello there"; die "it broke"; echo unreachable', tmp_path)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == "thing.sh: hello there\nthing.sh: it broke\n"


def test_a_usage_error_is_one_line_naming_what_is_wrong_and_exits_2(tmp_path: Path) -> None:
    for body, wrong in (
        ('usage_error "stop takes no PORT"', "stop takes no PORT"),
        ('unknown_command "strat"', "unknown command 'strat'"),
        ('unknown_command ""', "no command given"),
        ('only_flags "--fast --keep-logs" --fast --slow', "unexpected argument '--slow'"),
        ("check_port PORT 0", "PORT must be a port number from 1 to 65535, got '0'"),
        ("check_port PORT 65536", "PORT must be a port number from 1 to 65535, got '65536'"),
        ("check_port PORT 80a", "PORT must be a port number from 1 to 65535, got '80a'"),
        ('check_port PORT ""', "PORT must be a port number from 1 to 65535, got ''"),
    ):
        done = _lib(body, tmp_path)
        assert done.returncode == 2, (body, done.stderr)
        assert done.stderr == f"thing.sh: {wrong}; usage: bash start | stop\n", body


def test_main_checks_the_command_line_then_runs_the_scripts_command(tmp_path: Path) -> None:
    commands = """STOP_FLAGS="--fast --keep-logs"
cmd_start() { echo "start ${1:-none}"; }
cmd_stop() { echo "stop $*"; }
cmd_status() { echo status; return 3; }
"""
    for args, out, status in (
        ("start", "start none\n", 0),
        ("start 8081", "start 8081\n", 0),
        ("stop --keep-logs --fast", "stop --keep-logs --fast\n", 0),
        ("status", "status\n", 3),
    ):
        done = _lib(f"{commands}main {args}", tmp_path)
        assert (done.returncode, done.stdout, done.stderr) == (status, out, ""), args
    for args, wrong in (
        ("fetch", "unknown command 'fetch'"),  # this script has no cmd_fetch
        ("start 1 2", "start takes one PORT at most"),
        ("stop --now", "unexpected argument '--now'"),
        ("status --all", "unexpected argument '--all'"),
    ):
        done = _lib(f"{commands}main {args}", tmp_path)
        assert (done.returncode, done.stdout) == (2, ""), args
        assert done.stderr == f"thing.sh: {wrong}; usage: bash start | stop\n", args


def test_run_files_names_the_state_files_in_the_run_folder(tmp_path: Path) -> None:
    done = _lib(
        'RUN_DIR=/run/x; run_files es; echo "$PID_FILE $DIR_FILE $URL_FILE $MARKER"', tmp_path
    )
    assert done.stdout == "/run/x/es.pid /run/x/es.dir /run/x/es.url .hermesbus-es\n"


def test_good_arguments_and_settings_pass_their_checks(tmp_path: Path) -> None:
    body = """check_port PORT 1; check_port PORT 65535; check_uint T 0; check_heap H 512m
check_heap H 1g; check_heap H 1073741824; only_flags "--fast --keep-logs" --keep-logs --fast
has_flag --fast --keep-logs --fast && ! has_flag --fast --keep-logs && echo passed"""
    done = _lib(body, tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "passed\n", "")


def test_a_bad_setting_exits_1_naming_the_variable(tmp_path: Path) -> None:
    for body, said in (
        ("check_uint HERMES_X_START_TIMEOUT 10s", "HERMES_X_START_TIMEOUT must be a number"),
        ("check_heap HERMES_X_HEAP 1gb", "HERMES_X_HEAP must look like 512m or 1g, got '1gb'"),
    ):
        done = _lib(body, tmp_path)
        assert done.returncode == 1, body
        assert done.stderr.startswith(f"thing.sh: {said}"), done.stderr


# ---------------------------------------------------------------- ports


_CLAIMS = 'export HERMES_PORT_CLAIMS="$T/claims"; '
"""Claims in the test's folder, not the user's shared one."""


def test_a_free_port_is_free_and_binds_on_loopback(tmp_path: Path) -> None:
    done = _lib(_CLAIMS + "free_port", tmp_path)
    assert done.returncode == 0, done.stderr
    port = int(done.stdout)
    assert 0 < port < 65536
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_a_free_port_is_none_of_the_ports_it_is_told_to_avoid(tmp_path: Path) -> None:
    with socket.socket() as taken:  # bound: the kernel hands this one to nobody else
        taken.bind(("127.0.0.1", 0))
        first = int(_lib(_CLAIMS + "free_port", tmp_path).stdout)
        done = _lib(_CLAIMS + f"free_port {first} {taken.getsockname()[1]}", tmp_path)
        assert done.returncode == 0, done.stderr
        port = int(done.stdout)
        assert port not in (first, taken.getsockname()[1])
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_ports_handed_out_at_once_are_all_different_and_claimed(tmp_path: Path) -> None:
    # CI: two test sets started side by side, and one Elasticsearch node was handed as its
    # transport port the HTTP port of the other (both asked the kernel for port 0 at once).
    runs = [
        subprocess.Popen(
            ["bash", "-c", f'export HERMES_PORT_CLAIMS="$T/claims"; {PRELUDE}free_port'],
            env={**os.environ, "T": str(tmp_path), "LIB": str(LIB), "PATTERN": ASLEEP},
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(12)
    ]
    ports = [int(run.communicate(timeout=120)[0]) for run in runs]
    assert all(run.returncode == 0 for run in runs)
    assert len(set(ports)) == len(ports), sorted(ports)
    claimed = {int(path.name) for path in (tmp_path / "claims").iterdir() if path.name.isdigit()}
    assert claimed == set(ports)


@pytest.mark.skipif(
    not Path("/proc/sys/net/ipv4/ip_local_port_range").exists(), reason="Linux's port range"
)
def test_a_free_port_is_outside_the_range_the_kernel_hands_out_by_itself(tmp_path: Path) -> None:
    # ports the kernel picks (bind to 0, every outgoing connection) come from that range
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    if low <= 21000 and high >= 64000:
        pytest.skip(f"the kernel's range {low}-{high} leaves no room outside it")
    for _ in range(5):
        done = _lib('export HERMES_PORT_CLAIMS="$T/claims"; free_port', tmp_path)
        assert done.returncode == 0, done.stderr
        assert not low <= int(done.stdout) <= high, (done.stdout, low, high)


def test_claims_of_starts_long_over_are_swept_and_fresh_ones_kept(tmp_path: Path) -> None:
    claims = tmp_path / "claims"
    claims.mkdir(mode=0o700)
    (claims / "23001").write_text("1\n")
    (claims / "23002").write_text("1\n")
    hour_ago = time.time() - 3600
    os.utime(claims / "23001", (hour_ago, hour_ago))
    done = _lib('export HERMES_PORT_CLAIMS="$T/claims"; free_port', tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (claims / "23001").exists()
    assert (claims / "23002").exists()
    assert int(done.stdout) != 23002


_FAILS_ONCE = """again_if_port_taken "$T/start.log" bash -c '
  n=$(cat "$T/tries" 2>/dev/null || echo 0); echo $((n + 1)) >"$T/tries"
  if ((n == 0)); then echo "BindException: Address already in use" >&2; exit 1; fi
  echo "started" >&2; echo URL=http://127.0.0.1:1'"""


def test_a_start_whose_port_was_taken_meanwhile_runs_once_more(tmp_path: Path) -> None:
    done = _lib(_FAILS_ONCE, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "URL=http://127.0.0.1:1\n"
    assert (tmp_path / "tries").read_text() == "2\n"
    assert "a port was taken meanwhile" in done.stderr
    assert (tmp_path / "start.log").read_text() == "started\n"
    assert "Address already in use" in (tmp_path / "start.log.first").read_text()


def test_a_start_that_failed_for_another_reason_is_not_run_again(tmp_path: Path) -> None:
    body = """again_if_port_taken "$T/start.log" bash -c '
      n=$(cat "$T/tries" 2>/dev/null || echo 0); echo $((n + 1)) >"$T/tries"
      echo "java not found" >&2; exit 3'"""
    done = _lib(body + " || echo rc=$?", tmp_path)
    assert done.stdout == "rc=3\n"
    assert (tmp_path / "tries").read_text() == "1\n"
    assert "java not found" in done.stderr
    assert not (tmp_path / "start.log.first").exists()


def test_a_claims_folder_another_user_could_have_made_is_refused(tmp_path: Path) -> None:
    claims = tmp_path / "claims"
    claims.mkdir(mode=0o777)
    claims.chmod(0o777)  # as if made by someone else in /tmp: open to all
    done = _lib(_CLAIMS + "free_port", tmp_path)
    assert done.returncode != 0
    assert f"free_port: {claims} must be a folder of this user's, mode 0700" in done.stderr
    assert not (claims / ".lock").exists()


# ---------------------------------------------------------------- pid files and status


def test_running_pid_reads_the_pid_of_a_live_process_whose_command_line_matches(
    tmp_path: Path,
) -> None:
    with _process(UP_AND_ASLEEP, tmp_path) as proc:
        _until((tmp_path / "up").exists, "the process runs")
        (tmp_path / "thing.pid").write_text(f"{proc.pid}\n")
        done = _lib("running_pid", tmp_path)
        assert (done.returncode, done.stdout) == (0, f"{proc.pid}\n")
        status = _lib('report_status "THING_URL=http://x"', tmp_path)
        assert (status.returncode, status.stdout) == (
            0,
            f"running pid={proc.pid} THING_URL=http://x\n",
        )
        # a recycled pid: alive, but not the server the pid file was written for
        assert _lib("running_pid", tmp_path, pattern="kafka\\.Kafka").returncode == 1


def test_already_running_prints_what_start_prints_only_when_the_server_runs(
    tmp_path: Path,
) -> None:
    line = 'already_running "THING_URL=http://x" || echo "not running: $?"'
    assert _lib(line, tmp_path).stdout == "not running: 1\n"
    with _process(UP_AND_ASLEEP, tmp_path) as proc:
        _until((tmp_path / "up").exists, "the process runs")
        (tmp_path / "thing.pid").write_text(f"{proc.pid}\n")
        done = _lib(line, tmp_path)
        assert (done.returncode, done.stdout) == (0, "THING_URL=http://x\n")
        assert done.stderr == f"thing.sh: already running (pid {proc.pid}), reusing it\n"


def test_running_pid_fails_for_a_missing_garbled_or_exited_pid(tmp_path: Path) -> None:
    pid_file = tmp_path / "thing.pid"
    assert _lib("running_pid", tmp_path).returncode == 1  # no pid file
    pid_file.write_text("12ab\n")
    assert _lib("running_pid", tmp_path).returncode == 1
    with _process("exec sleep 600", tmp_path) as proc:
        pid_file.write_text(f"{proc.pid}\n")
        proc.send_signal(signal.SIGTERM)
        _exited(proc)  # a zombie: kill -0 still succeeds, yet it is not running
        done = _lib("running_pid", tmp_path)
        assert (done.returncode, done.stdout) == (1, "")
        status = _lib('report_status "THING_URL=http://x"', tmp_path)
        assert (status.returncode, status.stdout) == (3, "not running\n")


def test_the_data_folder_is_noted_and_clean_state_removes_it_and_the_state_files(
    tmp_path: Path,
) -> None:
    done = _lib('data_dir_new "$T" thing-data; data_dir', tmp_path)
    assert done.returncode == 0, done.stderr
    made, noted = done.stdout.splitlines()
    folder = Path(made)
    assert noted == made and folder.parent == tmp_path and folder.name.startswith("thing-data.")
    assert (folder / ".thing").is_file()
    assert (tmp_path / "thing.dir").read_text() == f"{folder}\n"
    (folder / "server.log").write_text("a log\n")
    for name in ("thing.pid", "thing.url"):
        (tmp_path / name).write_text("x\n")
    done = _lib('clean_state "$T/thing.url"', tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_clean_state_leaves_a_folder_it_did_not_make(tmp_path: Path) -> None:
    stranger = tmp_path / "not-ours"
    (stranger / "keep").mkdir(parents=True)
    (tmp_path / "thing.dir").write_text(f"{stranger}\n")
    (tmp_path / "thing.pid").write_text("1\n")
    done = _lib("data_dir || echo not-ours; clean_state", tmp_path)
    assert (done.returncode, done.stdout) == (0, "not-ours\n")
    assert (stranger / "keep").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-ours"]


# ---------------------------------------------------------------- stop


def test_stop_sends_sigkill_to_a_process_that_ignores_sigterm(tmp_path: Path) -> None:
    with _process('trap "" TERM; : >"$T/up"; exec sleep 600', tmp_path) as proc:
        _until((tmp_path / "up").exists, "the process runs")
        (tmp_path / "thing.pid").write_text(f"{proc.pid}\n")
        done = _lib("stop_service 1", tmp_path)
        assert done.returncode == 0, done.stderr
        assert proc.wait(timeout=60) == -signal.SIGKILL
        assert done.stderr == (
            f"thing.sh: stopping Thing (pid {proc.pid})\n"
            f"thing.sh: Thing (pid {proc.pid}) did not stop within 1s of SIGTERM: "
            "sending SIGKILL\n"
        )


@pytest.mark.parametrize(
    ("grace", "ended_by"), [(60, signal.SIGTERM), (0, signal.SIGKILL)], ids=["grace", "no-grace"]
)
def test_stop_ends_a_process_that_heeds_sigterm_with_sigterm_or_with_no_grace_sigkill(
    tmp_path: Path, grace: int, ended_by: signal.Signals
) -> None:
    with _process(UP_AND_ASLEEP, tmp_path) as proc:
        _until((tmp_path / "up").exists, "the process runs")
        done = _lib(f"stop_pid {proc.pid} {grace}", tmp_path)
        assert (done.returncode, done.stderr) == (0, "")
        assert proc.wait(timeout=60) == -ended_by


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_sigkill_takes_the_children_of_the_process_with_it(tmp_path: Path) -> None:
    command = 'trap "" TERM; sleep 600 & echo $! >"$T/child"; exec sleep 601'
    child = 0
    try:
        with _process(command, tmp_path) as proc:
            _until(lambda: _written(tmp_path / "child"), "the child runs")
            child = int((tmp_path / "child").read_text())
            done = _lib(f"stop_pid {proc.pid} 1", tmp_path)
            assert done.returncode == 0, done.stderr
            assert proc.wait(timeout=60) == -signal.SIGKILL
            _until(lambda: _gone(child), f"the child {child} is gone")
    finally:  # the child is this test's own process: it must not outlive a failure
        if child and not _gone(child) and "sleep" in Path(f"/proc/{child}/cmdline").read_text():
            os.kill(child, signal.SIGKILL)


def test_stop_service_with_no_server_running_does_nothing(tmp_path: Path) -> None:
    done = _lib("stop_service 30 && echo done", tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "done\n", "")


# ---------------------------------------------------------------- start and wait


def test_wait_ready_returns_once_the_check_passes(tmp_path: Path) -> None:
    with _process(UP_AND_ASLEEP, tmp_path) as proc:
        (tmp_path / "thing.pid").write_text(f"{proc.pid}\n")
        done = _lib('POLL_S=0.1 wait_ready 600 test -e "$T/up" && echo ready', tmp_path)
        assert (done.returncode, done.stdout, done.stderr) == (0, "ready\n", "")


def test_wait_ready_gives_up_when_the_process_exits_during_start_up(tmp_path: Path) -> None:
    with _process("exit 4", tmp_path) as proc:
        (tmp_path / "thing.pid").write_text(f"{proc.pid}\n")
        _exited(proc)  # not reaped: kill -0 still succeeds on it
        done = _lib("wait_ready 600 false || echo $?", tmp_path)
        assert (done.returncode, done.stdout) == (0, "1\n")
        assert done.stderr == "thing.sh: Thing exited during start-up\n"


def test_wait_ready_gives_up_after_its_timeout(tmp_path: Path) -> None:
    done = _lib("wait_ready 1 false || echo $?", tmp_path)
    assert (done.returncode, done.stdout) == (0, "2\n")
    assert done.stderr == "thing.sh: Thing was not ready within 1s\n"


# ---------------------------------------------------------------- the scripts that source it


def test_lib_is_sourced_not_run() -> None:
    """It says so on its second line (test_script_modes.py skips such files), and has no x bit."""
    assert "Sourced by" in LIB.read_text().splitlines()[1]
    assert not LIB.stat().st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def test_no_service_script_redefines_what_lib_sh_holds() -> None:
    defined = re.compile(r"^([a-z_][a-z0-9_]*)\(\) *\{", re.MULTILINE)
    shared = set(defined.findall(LIB.read_text()))
    assert {"log", "die", "free_port", "running_pid", "stop_pid", "wait_ready"} <= shared
    for name in SCRIPTS:
        text = (LOCAL / f"{name}.sh").read_text()
        assert re.search(r'^source "\$[A-Z_]+/lib\.sh"$', text, re.MULTILINE), name
        assert not shared & set(defined.findall(text)), name


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_service_script_refuses_a_bad_command_in_one_line_and_exit_2(
    name: str, tmp_path: Path
) -> None:
    run_dirs = ("KAFKA", "SR", "ES", "REDIS", "NEO4J")
    env = {**os.environ, **{f"HERMES_{d}_RUN_DIR": str(tmp_path / d) for d in run_dirs}}
    for args, wrong in (
        ([], "no command given"),
        (["strat"], "unknown command 'strat'"),
        (["stop", "--now"], "unexpected argument '--now'"),
        (["start", "70000"], "PORT must be a port number from 1 to 65535, got '70000'"),
    ):
        done = subprocess.run(
            ["bash", str(LOCAL / f"{name}.sh"), *args],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 2, (args, done.stderr)
        (line,) = done.stderr.splitlines()
        assert line.startswith(f"{name}{'' if name == 'schema-registry' else '.sh'}: {wrong};")
        assert done.stdout == ""
    assert not any(tmp_path.iterdir())  # nothing was started or written


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_service_script_says_not_running_with_exit_3(name: str, tmp_path: Path) -> None:
    run_dirs = ("KAFKA", "SR", "ES", "REDIS", "NEO4J")
    env = {**os.environ, **{f"HERMES_{d}_RUN_DIR": str(tmp_path / d) for d in run_dirs}}
    done = subprocess.run(
        ["bash", str(LOCAL / f"{name}.sh"), "status"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    said = {"kafka": "not running\n", "elasticsearch": "not running\n"}
    assert done.stdout == said.get(name, "")

"""The embedded broker's pure parts: finding the binary, ports, start failures, the CLI's."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hermesbus.cli import app
from hermesbus.compose.broker import (
    BrokerWatch,
    EmbeddedBroker,
    answers,
    find_broker_binary,
    free_port,
    metadata_probe,
)
from hermesbus.errors import BrokerError


@pytest.fixture
def listening() -> Iterator[int]:
    """A loopback port that something listens on (and never answers Kafka)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def script(folder: Path, body: str) -> str:
    path = folder / "fake-tansu"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_the_bundled_binary_is_found() -> None:
    path = find_broker_binary()
    assert os.access(path, os.X_OK), path


def test_a_bad_override_is_a_broker_error_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    not_executable = tmp_path / "tansu"
    not_executable.write_text("")
    monkeypatch.setenv("CALF_TANSU_BIN", str(not_executable))
    with pytest.raises(BrokerError, match=r"no embedded broker binary \(tansu\): CALF_TANSU_BIN="):
        find_broker_binary()


def test_free_port_is_a_bindable_loopback_port() -> None:
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))


def test_probe_is_false_where_nothing_answers_kafka(listening: int) -> None:
    assert not metadata_probe(free_port(), timeout_s=0.5)
    assert not metadata_probe(listening, timeout_s=0.5)


def test_a_taken_port_is_refused_before_anything_starts(tmp_path: Path, listening: int) -> None:
    broker = EmbeddedBroker(listening, home=tmp_path, binary="/nonexistent/tansu")
    with pytest.raises(BrokerError, match=f"port {listening} is already in use"):
        broker.start()
    assert not broker.running


def test_a_missing_binary_is_a_broker_error(tmp_path: Path) -> None:
    broker = EmbeddedBroker(home=tmp_path, binary=str(tmp_path / "no-such-tansu"))
    with pytest.raises(BrokerError, match="cannot run the embedded broker"):
        broker.start()


def test_a_broker_that_dies_at_start_names_its_error_and_log(tmp_path: Path) -> None:
    binary = script(tmp_path, 'echo "listening"; echo "Error: boom"; exit 3')
    broker = EmbeddedBroker(home=tmp_path, binary=binary)
    with pytest.raises(BrokerError, match="exited with code 3 at start: Error: boom") as caught:
        broker.start()
    assert str(tmp_path / "broker" / "tansu-") in str(caught.value)


def test_a_silent_broker_times_out_and_is_killed_if_it_ignores_sigterm(tmp_path: Path) -> None:
    binary = script(tmp_path, "trap '' TERM; exec sleep 30")
    broker = EmbeddedBroker(home=tmp_path, binary=binary, start_timeout_s=0.5, stop_grace_s=0.5)
    started = time.monotonic()
    with pytest.raises(BrokerError, match=r"did not answer on 127\.0\.0\.1:\d+ within 0\.5 s"):
        broker.start()
    assert time.monotonic() - started < 10
    assert not broker.running


def test_before_start_there_is_no_bootstrap_and_stop_is_a_no_op(tmp_path: Path) -> None:
    broker = EmbeddedBroker(home=tmp_path)
    broker.stop()
    with pytest.raises(BrokerError, match="not started"):
        _ = broker.bootstrap


def test_cli_reports_a_taken_port_on_one_line(listening: int) -> None:
    result = CliRunner().invoke(app, ["broker", "--port", str(listening)])
    assert result.exit_code == 1
    assert f"error: cannot start the embedded broker: port {listening} is already in use" in (
        result.output
    )
    assert "KAFKA_BOOTSTRAP" not in result.output


async def test_answers_wants_a_kafka_reply_unless_a_connection_is_enough(listening: int) -> None:
    refused = free_port()
    assert not await answers(f"127.0.0.1:{refused}", timeout_s=0.5)
    assert not await answers(f"127.0.0.1:{listening}", timeout_s=0.5)  # accepts, never answers
    assert await answers(f"127.0.0.1:{listening}", kafka=False, timeout_s=0.5)
    assert await answers(f"127.0.0.1:{refused}, 127.0.0.1:{listening}", kafka=False)  # any one
    assert not await answers("no port here")


async def test_the_watch_reports_an_outage_when_it_starts_while_it_lasts_and_when_it_ends() -> None:
    lines: list[str] = []
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        bootstrap = f"127.0.0.1:{sock.getsockname()[1]}"
        watch = BrokerWatch(bootstrap, lines.append, kafka=False, report_s=0.3, timeout_s=0.5)
        await watch.check()
        await watch.check()
        assert not watch.reachable
        assert len(lines) == 1
        assert lines[0].startswith(f"the Kafka broker at {bootstrap} is unreachable (since 20")
        assert lines[0].endswith("the processors wait for it (reported every 0.3 s)")
        await asyncio.sleep(0.4)
        await watch.check()
        assert lines[1].startswith(f"the Kafka broker at {bootstrap} is still unreachable, since")
        assert lines[1].endswith("(0 s)")
        sock.listen()
        await watch.check()
        await watch.check()
    assert watch.reachable
    assert lines[2:] == [f"the Kafka broker at {bootstrap} is back after 0 s"]

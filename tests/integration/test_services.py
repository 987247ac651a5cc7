"""A test that loses its broker mid-run says which one is gone and shows its log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermesbus.compose.broker import EmbeddedBroker

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]

_LOSES_ITS_BROKER = """
import os, signal, socket, time

def test_fails_while_its_broker_is_up(embedded_bootstrap):
    assert embedded_bootstrap == "somewhere else"

def test_loses_its_broker(embedded_bootstrap):
    os.kill({pid}, signal.SIGKILL)
    host, port = embedded_bootstrap.split(":")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # until the kernel has closed its port
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
        except ConnectionRefusedError:
            break
        time.sleep(0.05)
    socket.create_connection((host, int(port)), timeout=1)  # what its client sees
"""


@pytest.fixture
def own_broker(tmp_path: Path, broker_binary: str) -> Iterator[EmbeddedBroker]:
    broker = EmbeddedBroker(home=tmp_path / "home", binary=broker_binary)
    broker.start()
    yield broker
    broker.stop()


def test_a_failed_test_names_the_broker_it_lost_and_the_end_of_its_log(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, own_broker: EmbeddedBroker
) -> None:
    for gone in ("HERMES_TEST_KAFKA_BOOTSTRAP", "HERMES_TEST_SCHEMA_REGISTRY_URL", "CI"):
        monkeypatch.delenv(gone, raising=False)  # only the broker this test kills is probed
    monkeypatch.setenv("HERMES_TEST_EMBEDDED_BOOTSTRAP", own_broker.bootstrap)
    monkeypatch.setenv("HERMES_TEST_EMBEDDED_LOG", str(own_broker.log_path))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_lost=_LOSES_ITS_BROKER.format(pid=own_broker.pid))

    result = pytester.runpytest_subprocess("-p", "tests.services", "-p", "no:asyncio")

    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    gone = (
        f"embedded broker at {own_broker.bootstrap} is gone; "
        f"its log: {own_broker.log_path} (last lines:\n"
    )
    assert out.count(gone) == 1  # not for the test that failed while the broker was up
    assert out.index("_ test_loses_its_broker _") < out.index(gone)
    assert "ConnectionRefusedError" in out  # the test's own error is still there
    lines = own_broker.log_path.read_text().splitlines()
    last = [line.rstrip() for line in lines if line.strip()][-1]
    assert f"    {last})" in out
    assert own_broker.exit_reason() == "signal 9 (SIGKILL)"

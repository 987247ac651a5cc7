"""A missing service skips outside CI and fails under CI=true; a gone one is named."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.services import KAFKA, need, workers_services

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
_VARIABLES = [
    "HERMES_TEST_EMBEDDED_BOOTSTRAP",
    "HERMES_TEST_KAFKA_BOOTSTRAP",
    "HERMES_TEST_SCHEMA_REGISTRY_URL",
    "HERMES_TEST_EMBEDDED_LOG",
    "HERMES_TEST_KAFKA_LOG",
    "HERMES_TEST_SCHEMA_REGISTRY_LOG",
]


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "schema-registry.log"
    path.write_text("".join(f"line {n}\n" for n in range(1, 9)) + "\n")
    return path


def test_under_ci_a_missing_service_fails_naming_it_and_the_end_of_its_log(
    monkeypatch: pytest.MonkeyPatch, log: Path
) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception) as failed:
        need("schema registry", "HERMES_TEST_SCHEMA_REGISTRY_URL is unset", str(log))
    message = str(failed.value)
    assert message.startswith(
        "schema registry is missing under CI=true: HERMES_TEST_SCHEMA_REGISTRY_URL is unset; "
        f"its log: {log} (last lines:\n"
    )
    assert message.endswith("    line 4\n    line 5\n    line 6\n    line 7\n    line 8)")


@pytest.mark.parametrize("ci", [None, "false", "0", ""])
def test_outside_ci_a_missing_service_skips_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, log: Path, ci: str | None
) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception) as skipped:
        need("schema registry", "HERMES_TEST_SCHEMA_REGISTRY_URL is unset", str(log))
    assert str(skipped.value) == (
        f"no schema registry: HERMES_TEST_SCHEMA_REGISTRY_URL is unset (its log: {log})"
    )


def test_a_service_that_stops_answering_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HERMES_TEST_KAFKA_LOG", raising=False)
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        address = f"127.0.0.1:{listening.getsockname()[1]}"
        monkeypatch.setenv("HERMES_TEST_KAFKA_BOOTSTRAP", address)
        assert KAFKA.gone() is None
    assert KAFKA.gone() == (
        f"Apache Kafka broker at {address} is gone; "
        "its log: unknown (HERMES_TEST_KAFKA_LOG is unset)"
    )
    monkeypatch.delenv("HERMES_TEST_KAFKA_BOOTSTRAP")
    assert KAFKA.gone() is None  # a run that was not given it has not lost it


_USES_EVERY_SERVICE = """
def test_embedded(embedded_bootstrap): pass
def test_kafka(kafka_bootstrap): pass
def test_registry(schema_registry_url): pass
def test_binary(broker_binary): pass
"""


@pytest.mark.parametrize("ci", ["true", None])
def test_every_service_fixture_goes_through_need(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ci: str | None
) -> None:
    """The real fixtures, in a pytest run of their own with no service exported."""
    for variable in _VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    kafka_log = tmp_path / "kafka-start.log"
    kafka_log.write_text("test.sh: no java/mvn on PATH, so Apache Kafka was not started\n")
    monkeypatch.setenv("HERMES_TEST_KAFKA_LOG", str(kafka_log))
    monkeypatch.setenv("CALF_TANSU_BIN", str(tmp_path / "no-tansu"))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    pytester.makepyfile(test_needs=_USES_EVERY_SERVICE)
    result = pytester.runpytest_subprocess(
        "-p", "tests.services", "-p", "no:asyncio", "-p", "no:cacheprovider", "-ra"
    )
    out = result.stdout.str()
    if ci:
        result.assert_outcomes(errors=4)
        assert "embedded broker is missing under CI=true: HERMES_TEST_EMBEDDED_BOOTSTRAP" in out
        assert "its log: unknown (HERMES_TEST_EMBEDDED_LOG is unset)" in out
        assert f"its log: {kafka_log} (last lines:\n    test.sh: no java/mvn on PATH" in out
        assert "schema registry is missing under CI=true" in out
        assert "embedded broker binary is missing under CI=true: no embedded broker" in out
    else:
        result.assert_outcomes(skipped=4)
        assert "no embedded broker: HERMES_TEST_EMBEDDED_BOOTSTRAP is unset" in out
        assert "no Apache Kafka broker: HERMES_TEST_KAFKA_BOOTSTRAP is unset" in out
        assert f"(its log: {kafka_log})" in out
        assert "no schema registry: HERMES_TEST_SCHEMA_REGISTRY_URL is unset" in out
        assert "no embedded broker binary: no embedded broker binary (tansu)" in out


def test_a_worker_uses_its_own_set_of_services_and_no_other() -> None:
    exported = {
        "HERMES_TEST_KAFKA_BOOTSTRAP": "127.0.0.1:1",  # the first set, under the plain names
        "HERMES_TEST_KAFKA_BOOTSTRAP__GW0": "127.0.0.1:1",
        "HERMES_TEST_KAFKA_BOOTSTRAP__GW1": "127.0.0.1:2",
        "HERMES_TEST_REDIS_URL__GW1": "",  # its Redis did not start: not the first set's
        "HERMES_TEST_REDIS_URL": "redis://127.0.0.1:3/0",
        "HERMES_TEST_REDIS_URL__GW10": "redis://127.0.0.1:4/0",
    }
    assert workers_services(exported, "gw1") == {
        "HERMES_TEST_KAFKA_BOOTSTRAP": "127.0.0.1:2",
        "HERMES_TEST_REDIS_URL": "",
    }
    assert workers_services(exported, "gw0") == {"HERMES_TEST_KAFKA_BOOTSTRAP": "127.0.0.1:1"}
    assert workers_services(exported, None) == {}  # one process: the plain names as they are

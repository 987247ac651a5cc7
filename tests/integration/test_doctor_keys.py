"""``hermesbus doctor`` on a keyring file other users can read: the keys check fails."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from hermesbus.identity import KEYS_FILE_ENV
from tests.cli_process import clean_env, hermesbus

pytestmark = pytest.mark.kafka


def _keys_line(out: str) -> str:
    return next(line for line in out.splitlines() if "signing keys" in line)


def test_a_world_readable_keyring_fails_doctor_and_says_chmod(
    embedded_bootstrap: str, unique: str, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.json"
    shutil.copyfile(os.environ[KEYS_FILE_ENV], keys)
    env = clean_env(tmp_path / "home", **{KEYS_FILE_ENV: str(keys)})
    options = ("doctor", "--bootstrap", embedded_bootstrap, "--prefix", f"doc-{unique}.")

    keys.chmod(0o644)
    loose = hermesbus(*options, env=env, cwd=tmp_path, timeout=300)
    assert loose.code == 1, loose.out + loose.err
    assert _keys_line(loose.out).startswith("FAIL  signing keys"), loose.out
    said = f"{keys} is mode 0644: its group and every user can read the signing secrets"
    assert said in loose.out
    assert f"fix: chmod 600 {keys}" in loose.out
    assert "signing keys" in loose.out.splitlines()[-1]  # doctor: N to fix: ..., signing keys

    keys.chmod(0o600)
    tight = hermesbus(*options, env=env, cwd=tmp_path, timeout=300)
    assert _keys_line(tight.out).startswith("ok    signing keys"), tight.out

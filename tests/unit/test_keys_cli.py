"""``hermesbus keys``: make the keyring, rotate one identity, list key ids, never secrets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hermesbus.cli import app
from hermesbus.identity import KEYS_FILE_ENV, Keyring

runner = CliRunner()


@pytest.fixture
def path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    keys = tmp_path / "keys.json"
    monkeypatch.setenv(KEYS_FILE_ENV, str(keys))
    return keys


def test_init_rotate_and_list(path: Path) -> None:
    made = runner.invoke(app, ["keys", "init"])
    assert made.exit_code == 0, made.output
    assert "app, conversation, diagnostics, dispatcher, memory, tool" in made.output
    first = Keyring.read(path).kids("dispatcher")
    again = runner.invoke(app, ["keys", "init"])  # idempotent: existing keys are kept
    assert again.exit_code == 0 and Keyring.read(path).kids("dispatcher") == first

    rotated = runner.invoke(app, ["keys", "rotate", "dispatcher"])
    assert rotated.exit_code == 0, rotated.output
    kids = Keyring.read(path).kids("dispatcher")
    assert kids[1:] == first and kids[0] in rotated.output  # the new one signs, the old lives

    listed = runner.invoke(app, ["keys", "list"])
    assert listed.exit_code == 0
    assert ", ".join(kids) in listed.output
    secrets = [k["secret"] for keys in json.loads(path.read_text())["keys"].values() for k in keys]
    assert not any(secret in listed.output + rotated.output + made.output for secret in secrets)


def test_rotate_says_what_is_wrong(path: Path) -> None:
    missing = runner.invoke(app, ["keys", "rotate", "app"])
    assert missing.exit_code == 2
    assert "no keyring at" in missing.output and "keys init" in missing.output
    runner.invoke(app, ["keys", "init"])
    unknown = runner.invoke(app, ["keys", "rotate", "root"])
    assert unknown.exit_code == 2
    assert "unknown identity 'root'" in unknown.output


def test_a_broken_keyring_is_one_clear_line(path: Path) -> None:
    path.write_text("{not json")
    result = runner.invoke(app, ["keys", "list"])
    assert result.exit_code == 1
    assert f"the keyring {path} is not JSON" in result.output
    assert "Traceback" not in result.output


def test_a_keyring_says_which_identities_it_lacks_in_their_order() -> None:
    keys = Keyring({}).with_missing(["tool", "app"])
    assert keys.lacking(["app", "conversation", "tool", "memory"]) == ["conversation", "memory"]
    assert keys.lacking(["tool"]) == []

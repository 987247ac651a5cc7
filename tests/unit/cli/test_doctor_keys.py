"""doctor's keyring file check: group or world access to the signing secrets is reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermesbus.cli._doctor_keys import key_file_check


def _keys(tmp_path: Path, mode: int) -> Path:
    path = tmp_path / "keys.json"
    path.write_text('{"version": 1, "keys": {}}\n')
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o700, 0o611])
def test_a_file_only_its_owner_reads_or_writes_is_fine(tmp_path: Path, mode: int) -> None:
    assert key_file_check(_keys(tmp_path, mode)) is None


def test_group_read_alone_is_a_warning(tmp_path: Path) -> None:
    path = _keys(tmp_path, 0o640)
    check = key_file_check(path)
    assert check is not None
    assert check.status == "warn"
    assert check.said == f"{path} is mode 0640: its group can read the signing secrets"
    assert check.fix.startswith(f"chmod 600 {path}")


@pytest.mark.parametrize(
    ("mode", "who", "what"),
    [
        (0o644, "its group and every user", "read"),
        (0o604, "every user", "read"),
        (0o660, "its group", "read and replace"),
        (0o664, "its group and every user", "read and replace"),
        (0o602, "every user", "replace"),
    ],
)
def test_world_access_or_any_write_fails(tmp_path: Path, mode: int, who: str, what: str) -> None:
    path = _keys(tmp_path, mode)
    check = key_file_check(path)
    assert check is not None
    assert check.status == "FAIL"
    assert check.said == (
        f"{path} is mode {mode:04o}: {who} can {what} the signing secrets and sign as any component"
    )
    assert check.fix.startswith(f"chmod 600 {path}")


def test_an_absent_file_is_left_to_the_keyring_check(tmp_path: Path) -> None:
    assert key_file_check(tmp_path / "keys.json") is None

"""``hermesbus doctor`` reads the settings once, as its first check: a malformed ``HERMES_*``
variable is one FAIL line naming it, and every check that needs the settings is skipped
(none runs on defaults), as a user runs it (a subprocess; no service is reached)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermesbus.cli._doctor import NEED_SETTINGS
from hermesbus.compose.broker import free_port
from tests.cli_process import Ran, clean_env, hermesbus


def _lines(ran: Ran) -> dict[str, str]:
    """Check name -> its line, from doctor's report."""
    found = {}
    for line in ran.out.splitlines():
        status, _, rest = line.partition("  ")
        if status.strip() in {"ok", "warn", "FAIL", "skip"}:
            found[rest.strip().split("  ", 1)[0]] = line
    return found


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("HERMES_KAFKA_BOOTSTRAP", "127.0.0.1:99999", "port '99999' is not a number in 1..65535"),
        ("HERMES_REDIS_TIMEOUT_S", "soon", "HERMES_REDIS_TIMEOUT_S: Input should be a valid"),
        ("HERMES_RUNTIME_MAX_IN_FLIGHT", "many", "HERMES_RUNTIME_MAX_IN_FLIGHT: Input should be"),
    ],
)
def test_a_malformed_variable_fails_the_settings_named_and_skips_what_needs_them(
    tmp_path: Path, variable: str, value: str, says: str
) -> None:
    home = tmp_path / "home"
    ran = hermesbus("doctor", env=clean_env(home, **{variable: value}), cwd=tmp_path)
    assert ran.code == 1, ran.output
    lines = _lines(ran)
    assert lines["settings"].startswith("FAIL"), ran.out
    assert "invalid setting: " in lines["settings"] and variable in lines["settings"]
    assert says in lines["settings"]
    assert "fix: set the variable it names right" in ran.out
    assert lines["python"].startswith("ok")
    # the broker's checks need only the Kafka part: they run unless it is what is malformed
    kafka: set[str] = {"broker", "transactions", "topics"}
    if variable.startswith("HERMES_KAFKA_"):
        kafka = set()
    else:
        assert lines["broker"].startswith("ok"), ran.out
    for name in set(NEED_SETTINGS) - kafka:
        assert lines[name].startswith("skip"), ran.out
        assert "not checked: the settings are invalid (see settings)" in lines[name]
    assert "doctor: 1 to fix: settings" in ran.out
    assert "Traceback" not in ran.output and "unexpected" not in ran.output
    assert not home.exists()


def test_well_formed_settings_are_an_ok_line_and_a_bad_flag_is_still_exit_2(
    tmp_path: Path,
) -> None:
    """A malformed ``--bootstrap`` is a bad argument (exit 2, the flag named), not a check."""
    env = clean_env(tmp_path / "home", HERMES_KAFKA_BOOTSTRAP=f"127.0.0.1:{free_port()}")
    ran = hermesbus("doctor", "--bootstrap", "localhost", env=env, cwd=tmp_path)
    assert ran.code == 2, ran.output
    assert "error: invalid --bootstrap 'localhost': 'localhost' is not HOST:PORT" in ran.err
    assert "Traceback" not in ran.output

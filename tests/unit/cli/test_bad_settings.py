"""Bad settings, run as a user runs them (a subprocess): exit 2, the flag or variable named,
no "unexpected" error and no traceback (#24, items 5 and 6).

No test here needs a broker: "broker down" is a loopback port nobody listens on.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hermesbus.client import Client
from hermesbus.compose.broker import free_port
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.errors import ConfigError
from hermesbus.identity import Keyring
from tests.cli_process import Ran, clean_env, hermesbus

BAD_BOOTSTRAPS = [
    ("127.0.0.1:56l31", "port '56l31' is not a number in 1..65535"),
    ("127.0.0.1:99999", "port '99999' is not a number in 1..65535"),
    ("127.0.0.1:0", "port '0' is not a number in 1..65535"),
    ("localhost", "'localhost' is not HOST:PORT"),
    ("a:1,,b:2", "'' is not HOST:PORT"),
    ("a:1,b:x", "port 'x' (in 'b:x') is not a number in 1..65535"),
]
COMMANDS = [("tail",), ("trace", "t1", "--from-log"), ("say", "s1", "hi"), ("up", "--once")]
CASES = [(COMMANDS[0], *bad) for bad in BAD_BOOTSTRAPS] + [
    (command, *BAD_BOOTSTRAPS[0]) for command in COMMANDS[1:]
]
"""Every bad bootstrap through one command, and the first through every command."""
UNWRITABLE = Path("/sys/hermes-home")
"""A HERMES_HOME nobody can create, root included (sysfs refuses new folders)."""


def clear(ran: Ran) -> Ran:
    assert "Traceback" not in ran.output, ran.output
    assert "unexpected" not in ran.output, ran.output
    assert ran.output.count("error:") == 1, ran.output
    return ran


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    return folder


@pytest.mark.parametrize(("command", "bootstrap", "says"), CASES)
def test_a_bad_bootstrap_flag_is_exit_2_naming_the_flag(
    tmp_path: Path, elsewhere: Path, command: tuple[str, ...], bootstrap: str, says: str
) -> None:
    env = clean_env(tmp_path / "home")
    ran = clear(hermesbus(*command, "--bootstrap", bootstrap, env=env, cwd=elsewhere))
    assert ran.code == 2, ran.output
    assert f"error: invalid --bootstrap {bootstrap!r}: {says}" in ran.err
    assert "use HOST:PORT, several separated by commas" in ran.err


@pytest.mark.parametrize(("command", "bootstrap", "says"), CASES)
def test_a_bad_bootstrap_variable_is_exit_2_naming_the_variable(
    tmp_path: Path, elsewhere: Path, command: tuple[str, ...], bootstrap: str, says: str
) -> None:
    env = clean_env(tmp_path / "home", HERMES_KAFKA_BOOTSTRAP=bootstrap)
    ran = clear(hermesbus(*command, env=env, cwd=elsewhere))
    assert ran.code == 2, ran.output
    assert f"HERMES_KAFKA_BOOTSTRAP: {says}" in ran.err
    assert "invalid setting" in ran.err


def test_a_good_bootstrap_is_kept_entry_by_entry() -> None:
    assert KafkaConfig(bootstrap=" a:1 , [::1]:9092").bootstrap == "a:1,[::1]:9092"


def test_a_bad_bootstrap_given_to_the_client_is_one_line() -> None:
    with pytest.raises(ConfigError) as info:
        Client(bootstrap="127.0.0.1:99999", keys=Keyring({}))
    assert str(info.value) == (
        "invalid Kafka settings: bootstrap: port '99999' is not a number in 1..65535; use "
        "HOST:PORT, several separated by commas (e.g. 127.0.0.1:9092)"
    )


# -- a state folder that cannot be written: one line, the same everywhere, exit 2 -------


def _a_file_above(tmp_path: Path) -> tuple[Path, str]:
    afile = tmp_path / "afile"
    afile.write_text("")
    return afile / "home", f"{afile} is a file, not a folder"


HOME_COMMANDS = [
    ("up", "--once"),
    ("up", "--demo", "--once"),
    ("broker",),
    ("tools", "register", "--demo"),
    ("keys", "init"),
]


@pytest.mark.parametrize("command", HOME_COMMANDS)
@pytest.mark.parametrize("case", ["unwritable", "under a file"])
def test_an_unusable_hermes_home_is_said_as_doctor_says_it(
    tmp_path: Path, elsewhere: Path, command: tuple[str, ...], case: str
) -> None:
    if case == "unwritable":
        home, why = UNWRITABLE, "is not writable: "
    else:
        home, why = _a_file_above(tmp_path)
    keys = {"HERMES_KEYS_FILE": os.environ["HERMES_KEYS_FILE"]} if command[0] == "up" else {}
    ran = clear(hermesbus(*command, env=clean_env(home, **keys), cwd=elsewhere, timeout=60))
    assert ran.code == 2, ran.output
    assert f"error: state {home} is not writable: " in ran.err
    assert why in ran.err
    assert "fix: set HERMES_HOME to a folder you can write" in ran.err
    assert not home.exists()


@pytest.mark.parametrize("case", ["unwritable", "under a file"])
def test_doctor_fails_a_hermes_home_that_cannot_be_made(
    tmp_path: Path, elsewhere: Path, case: str
) -> None:
    """It said ``ok, not created yet`` of a home under a file, which ``up`` then refused."""
    if case == "unwritable":
        home, why = UNWRITABLE, "/sys is not writable ("
    else:
        home, why = _a_file_above(tmp_path)
    ran = hermesbus("doctor", env=clean_env(home), cwd=elsewhere, timeout=120)
    assert ran.code == 1, ran.output
    state = next(line for line in ran.out.splitlines() if "state" in line and str(home) in line)
    assert "FAIL" in state and f"{home} cannot be created: {why}" in state, ran.out
    assert "Traceback" not in ran.output and not home.exists()


# -- where the address came from (item 6) ---------------------------------------------


def test_an_unreachable_bootstrap_from_the_variable_says_so_and_how_up_embeds(
    tmp_path: Path, elsewhere: Path
) -> None:
    """The README's `export HERMES_KAFKA_BOOTSTRAP=...`, that bus stopped, then `up`."""
    address = f"127.0.0.1:{free_port()}"
    env = clean_env(
        tmp_path / "home",
        HERMES_KAFKA_BOOTSTRAP=address,
        HERMES_KEYS_FILE=os.environ["HERMES_KEYS_FILE"],
    )
    ran = clear(hermesbus("up", "--demo", "--once", env=env, cwd=elsewhere, timeout=60))
    assert ran.code == 1, ran.output
    assert (
        f"cannot reach Kafka at {address} (from HERMES_KAFKA_BOOTSTRAP; unset it and "
        "`hermesbus up` starts the embedded broker)"
    ) in ran.err


def test_an_unreachable_bootstrap_from_the_flag_names_the_flag(
    tmp_path: Path, elsewhere: Path
) -> None:
    address = f"127.0.0.1:{free_port()}"
    env = clean_env(tmp_path / "home", HERMES_KAFKA_BOOTSTRAP="127.0.0.1:1")
    ran = clear(hermesbus("tail", "--bootstrap", address, env=env, cwd=elsewhere, timeout=60))
    assert ran.code == 1, ran.output
    assert f"cannot reach Kafka at {address} (from --bootstrap)" in ran.err


def test_the_clients_missing_key_points_at_the_bus_keyring_not_keys_init() -> None:
    with pytest.raises(ConfigError) as info:
        Client(bootstrap="127.0.0.1:1", keys=Keyring({}, source="/x/keys.json"))
    said = str(info.value)
    assert "no signing key for identity 'app' in /x/keys.json" in said
    assert "set HERMES_KEYS_FILE to it, or HERMES_HOME to the bus's state folder" in said
    assert "or set HERMES_KEY_APP" in said
    assert "Not `hermesbus keys init`" in said
    assert "dead-letters what they sign" in said
    assert "or run `hermesbus keys init`" not in said

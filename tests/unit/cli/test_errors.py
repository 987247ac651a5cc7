"""Every bad input gets a clear answer, run as a user runs it (a subprocess).

No test here needs a broker: "broker down" is a loopback port nobody listens on. Each
asserts the exit code, that the message names the problem, and that no traceback is
printed (``HERMES_DEBUG=1`` is the one way to get one).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hermesbus.base.config import HermesSettings, default_home
from hermesbus.compose.broker import free_port
from hermesbus.schemas import SCHEMAS_DIR
from tests.cli_process import Ran, clean_env, hermesbus


def no_traceback(ran: Ran) -> Ran:
    assert "Traceback" not in ran.output, ran.output
    return ran


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A state folder that does not exist yet."""
    return tmp_path / "home"


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """The folder commands run in: not the state folder, and it must stay empty."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    return folder


A_FILE = str(Path(__file__).resolve())
"""A HERMES_HOME that is a file, not a folder."""


# -- no traceback for any expected failure of any command --------------------------


@pytest.mark.parametrize(
    ("args", "extra", "expected"),
    [
        (("topics", "apply"), {}, (1, "no Kafka bootstrap: set HERMES_KAFKA_BOOTSTRAP")),
        (("trace", "t1", "--from-log"), {}, (1, "no Kafka bootstrap: set HERMES_KAFKA_BOOTSTRAP")),
        (("trace", "t1"), {}, (1, "no trace index at ")),
        (("session", "s1"), {}, (1, "no trace index at ")),
        (("search", "--since", "yesterday"), {}, (2, "--since 'yesterday' is not a time")),
        (("trace", " "), {}, (2, "no trace id: pass the trace_id of an envelope")),
        (("topics", "list", "--catalog", "missing.yaml"), {}, (1, "cannot read the catalog")),
        (("topics", "apply", "--partitions", "0"), {}, (2, "Invalid value for '--partitions'")),
        (("broker", "--port", "0"), {}, (2, "Invalid value for '--port'")),
        (("schemas", "check", "--schemas", "nowhere"), {}, (1, "nowhere does not exist")),
        (("schemas", "check", "--level", "BOGUS"), {}, (2, "Invalid value for '--level'")),
        (("schemas", "fingerprint", "hermes.mcp.Nope"), {}, (1, "no schema named hermes.mcp.Nope")),
        (("tools", "register", "missing.yaml"), {}, (2, "'missing.yaml' does not exist")),
        (("keys", "rotate", "root"), {}, (2, "unknown identity 'root'")),
        (("keys", "rotate", "app"), {}, (2, "run `hermesbus keys init` first")),
        (
            ("topics", "apply", "--bootstrap", "127.0.0.1:9"),
            {"HERMES_KAFKA_SECURITY_PROTOCOL": "BOGUS"},
            (2, "HERMES_KAFKA_SECURITY_PROTOCOL: Input should be 'PLAINTEXT'"),
        ),
        (
            ("up", "--once"),
            {"HERMES_RUNTIME_SESSION_TIMEOUT_MS": "abc"},
            (2, "HERMES_RUNTIME_SESSION_TIMEOUT_MS: Input should be a valid integer"),
        ),
        (("up", "--once"), {"HERMES_HOME": A_FILE}, (2, f"HERMES_HOME: {A_FILE} is a file")),
        (("tools", "list"), {"HERMES_HOME": A_FILE}, (2, "is a file, not a folder")),
        (
            ("keys", "init"),
            {"HERMES_KEYS_FILE": "/proc/no-such-folder/keys.json"},
            (1, "cannot write the keyring /proc/no-such-folder/keys.json"),
        ),
    ],
)
def test_an_expected_failure_is_one_clear_message(
    home: Path,
    elsewhere: Path,
    args: tuple[str, ...],
    extra: dict[str, str],
    expected: tuple[int, str],
) -> None:
    code, says = expected
    ran = no_traceback(hermesbus(*args, env=clean_env(home, **extra), cwd=elsewhere))
    assert ran.code == code, ran.output
    assert says in ran.output
    assert "errors.pydantic.dev" not in ran.output


def test_hermes_debug_shows_the_traceback(home: Path, elsewhere: Path) -> None:
    env = clean_env(home, HERMES_KEYS_FILE="/proc/no-such-folder/keys.json")
    quiet = hermesbus("keys", "init", env=env, cwd=elsewhere)
    loud = hermesbus("keys", "init", env={**env, "HERMES_DEBUG": "1"}, cwd=elsewhere)
    assert "Traceback" not in quiet.output
    assert loud.code == quiet.code == 1
    assert "Traceback" in loud.err and "cannot write the keyring" in loud.err


# -- a broker that is down, said once, with what to check ------------------------


@pytest.mark.parametrize("command", [("topics", "apply"), ("trace", "t1", "--from-log")])
def test_broker_down_names_the_address_and_what_to_check(
    home: Path, elsewhere: Path, command: tuple[str, ...]
) -> None:
    address = f"127.0.0.1:{free_port()}"
    ran = no_traceback(
        hermesbus(*command, "--bootstrap", address, env=clean_env(home), cwd=elsewhere)
    )
    assert ran.code == 1
    reach = f"cannot reach Kafka at {address} (from --bootstrap): KafkaConnectionError: Unable to"
    assert reach in ran.err
    assert ran.err.count("KafkaConnectionError") == 1
    assert "is the broker running, and is the address right?" in ran.err
    assert "HERMES_KAFKA_BOOTSTRAP" in ran.err and "--bootstrap" in ran.err
    assert not home.exists()  # neither command keeps state


def test_up_on_a_broker_that_is_down_says_so_once(home: Path, elsewhere: Path) -> None:
    """The start fails: no "the processors wait for it" report of the broker watch as well."""
    address = f"127.0.0.1:{free_port()}"
    env = clean_env(home, HERMES_KEYS_FILE=os.environ["HERMES_KEYS_FILE"])
    ran = no_traceback(hermesbus("up", "--once", "--bootstrap", address, env=env, cwd=elsewhere))
    assert ran.code == 1
    assert f"cannot reach Kafka at {address}" in ran.err
    assert "unreachable" not in ran.err and "wait" not in ran.err
    assert ran.err.count("error:") == 1


def test_schemas_check_against_an_unknown_revision_is_a_bad_argument(elsewhere: Path) -> None:
    ran = no_traceback(
        hermesbus("schemas", "check", "--against", "nonexistent-ref", env=clean_env(None),
                  cwd=elsewhere)
    )  # fmt: skip
    assert ran.code == 2  # 1 means a compatibility break; nothing was checked here
    assert "--against 'nonexistent-ref' is neither a folder nor a git revision" in ran.err
    assert "fatal:" not in ran.output  # git's own words are not the answer


def test_schemas_check_against_a_folder_is_still_a_check(elsewhere: Path) -> None:
    """A folder is checked as ever: the exit code of a real result is 0 or 1, never 2."""
    ran = no_traceback(
        hermesbus("schemas", "check", "--against", str(SCHEMAS_DIR), env=clean_env(None),
                  cwd=elsewhere)
    )  # fmt: skip
    assert ran.code == 0, ran.output
    assert "every schema is BACKWARD compatible" in ran.out


# -- tools register says what is missing and how to pass it ----------------------


def test_tools_register_without_arguments_says_how_to_give_a_tool(
    home: Path, elsewhere: Path
) -> None:
    ran = no_traceback(hermesbus("tools", "register", env=clean_env(home), cwd=elsewhere))
    assert ran.code == 2
    assert "nothing to register" in ran.err
    assert "spec.yaml" in ran.err and "--name" in ran.err and "--python" in ran.err
    assert "--demo" in ran.err
    assert "pydantic" not in ran.output
    assert not home.exists()


def test_tools_register_names_each_missing_field_and_its_flag(home: Path, elsewhere: Path) -> None:
    ran = no_traceback(
        hermesbus("tools", "register", "--name", "ocr_x", env=clean_env(home), cwd=elsewhere)
    )
    assert ran.code == 1
    assert "kind: missing; pass --python MODULE:FUNCTION or --url URL" in ran.err
    assert "target: missing" in ran.err
    assert "pydantic" not in ran.output and "validation error" not in ran.output


def test_an_invalid_spec_file_names_each_field_and_the_problem(home: Path, elsewhere: Path) -> None:
    spec = elsewhere / "spec.yaml"
    spec.write_text("name: ocr_x\nkind: carrier-pigeon\ntarget: a:b\ntimeout_s: -1\nnmae: 3\n")
    ran = no_traceback(hermesbus("tools", "register", str(spec), env=clean_env(home),
                                 cwd=elsewhere))  # fmt: skip
    assert ran.code == 1
    assert "kind: Input should be 'python', 'http' or 'mcp' (got 'carrier-pigeon')" in ran.err
    assert "timeout_s: Input should be greater than 0 (got -1)" in ran.err
    assert "nmae: unknown field" in ran.err
    assert "errors.pydantic.dev" not in ran.output


def test_a_spec_file_that_is_not_a_mapping_is_refused_plainly(home: Path, elsewhere: Path) -> None:
    spec = elsewhere / "spec.yaml"
    spec.write_text("- ocr_x\n- python\n")
    ran = no_traceback(hermesbus("tools", "register", str(spec), env=clean_env(home),
                                 cwd=elsewhere))  # fmt: skip
    assert ran.code == 1
    assert f"{spec}: a tool spec is a mapping (name:, kind:, ...), not a list" in ran.err


# -- where state lives, and reading it creates nothing ---------------------------


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (("tools", "list"), 0, "no state yet at {home}: no tools are registered"),
        (("tools", "health"), 1, "no state yet at {home}: no tools are registered"),
        (("keys", "list"), 0, "no keys yet: no keyring at {home}/keys.json"),
    ],
)
def test_a_read_only_command_on_no_state_says_where_it_looked_and_creates_nothing(
    home: Path, elsewhere: Path, args: tuple[str, ...], code: int, says: str
) -> None:
    ran = no_traceback(hermesbus(*args, env=clean_env(home), cwd=elsewhere))
    assert ran.code == code, ran.output
    assert says.format(home=home) in ran.output
    assert not home.exists()
    assert list(elsewhere.iterdir()) == []  # no ./.hermes where the command ran


def test_topics_list_creates_no_state(home: Path, elsewhere: Path) -> None:
    ran = no_traceback(hermesbus("topics", "list", env=clean_env(home), cwd=elsewhere))
    assert ran.code == 0 and "hermes.conversation.in" in ran.out
    assert not home.exists() and list(elsewhere.iterdir()) == []


def test_without_hermes_home_state_is_per_user_not_per_folder(tmp_path: Path) -> None:
    """Registered from one folder, listed from another: the same tools, no ./.hermes."""
    data = tmp_path / "xdg-data"  # platformdirs' per-user data folder on Linux
    env = clean_env(None, XDG_DATA_HOME=str(data))
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    registered = no_traceback(hermesbus("tools", "register", "--demo", env=env, cwd=here))
    assert registered.code == 0, registered.output
    listed = no_traceback(hermesbus("tools", "list", env=env, cwd=there))
    assert listed.code == 0, listed.output
    assert "ocr_tool" in listed.out
    assert str(data / "hermesbus" / "tools.sqlite3") in listed.out  # it says where it read
    assert list(here.iterdir()) == [] and list(there.iterdir()) == []


def test_state_home_is_hermes_home_made_absolute_else_the_user_data_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HERMES_HOME", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert HermesSettings().home == default_home() == tmp_path / "data" / "hermesbus"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HERMES_HOME", "relative/home")
    assert HermesSettings().home == tmp_path / "relative" / "home"
    assert not (tmp_path / "relative").exists()  # looking creates nothing

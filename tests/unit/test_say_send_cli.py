"""``hermesbus say`` and ``send`` without a broker: every line of send's input checked, a bad
one named and nothing sent; no key, no bootstrap, no broker, an unknown identity or no text
is one plain line.

tests/integration/test_say_send.py talks to a running stack and reads the records back.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import hermesbus as h
from hermesbus.cli import app
from hermesbus.cli._send import BAD_INPUT, Line, check_lines, parse_lines
from hermesbus.client import Client
from hermesbus.compose.broker import free_port
from hermesbus.connectors.kafka import UNREACHABLE_HINT
from hermesbus.demo.expense import DEMO_START
from hermesbus.identity import APP, KEYS_FILE_ENV
from hermesbus.processors.protocol import IDENTITIES
from tests.builders import reply_to

runner = CliRunner()


def hermesbus(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``python -m hermesbus.cli ARGS``, as a shell runs it, in this process's environment."""
    return subprocess.run(
        [sys.executable, "-m", "hermesbus.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _client(identity: str = APP) -> Client:
    """A client that is never started: checking lines needs no broker."""
    return Client(bootstrap=f"127.0.0.1:{free_port()}", name="cli", identity=identity)


def _turn(text: str = "我要报上个月去深圳的差旅费", **update: str) -> h.Envelope:
    return _client().turn("s-1", "u_xyz789", text).model_copy(update=update)


def test_each_non_blank_line_is_an_envelope_numbered_as_in_the_file() -> None:
    first, second = _turn(), _turn("不用，就这三张")
    lines = [first.model_dump_json(), "", "   ", second.model_dump_json()]
    good, bad = parse_lines(lines)
    assert bad == []
    assert good == [Line(1, first), Line(4, second)]


def test_named_bodies_and_millisecond_timestamps_are_read_as_the_models_read_them() -> None:
    line = (
        '{"message_id": "m-1", "timestamp": 1717376400000, "source": "app:cli",'
        ' "target": "conversation:in", "session_id": "s-1", "user_id": "u", "trace_id": "t",'
        ' "payload": {"body": {"hermes.mcp.UserTurn": {"text": "hi"}}}}'
    )
    (read,), bad = parse_lines([line])
    assert bad == []
    assert read.number == 1
    assert read.envelope.payload.body == h.UserTurn(text="hi")
    assert read.envelope.timestamp == DEMO_START  # 1717376400000 ms


def test_every_bad_line_is_named_with_what_is_wrong() -> None:
    good = _turn()
    unnamed = good.model_dump(mode="json")
    unnamed["payload"]["body"] = {"text": "no name"}
    lines = [
        good.model_dump_json(),
        "not json",
        json.dumps(unnamed | {"message_id": "m-2"}),
        "[1, 2]",
        '{"message_id": "m-3"}',
        good.model_dump_json(),  # the same message id again
    ]
    got, bad = parse_lines(lines)
    assert [line.number for line in got] == [1]
    assert [problem.number for problem in bad] == [2, 3, 4, 5, 6]
    said = {problem.number: problem.reason for problem in bad}
    assert said[2].startswith("Invalid JSON")
    assert "payload.body" in said[3] and "unknown body type 'text'" in said[3]
    assert said[4] == "Input should be an object"
    assert said[5].startswith("timestamp: Field required; source: Field required")
    assert said[5].endswith("more")  # the rest of the missing fields only counted
    assert said[6] == f"message_id {good.message_id!r} is on line 1 too"
    assert str(bad[0]) == f"line 2: {said[2]}"


def test_lines_the_identity_may_not_send_are_named_before_anything_is_sent() -> None:
    turn = _turn()
    answer = reply_to(turn, "好的")
    lines = [
        Line(1, turn),
        Line(2, answer),  # the conversation's reply: not an app's to send
        Line(3, turn.model_copy(update={"target": "nowhere:x", "message_id": "m-x"})),
    ]
    bad = check_lines(_client(), lines)
    assert [problem.number for problem in bad] == [2, 3]
    assert bad[0].reason.startswith("identity.forbidden: an app sends only user turns")
    assert bad[1].reason.startswith("no topic for target 'nowhere:x'")
    as_conversation = check_lines(_client(identity="conversation"), lines[1:2])
    assert as_conversation == []


def test_a_file_with_a_bad_line_exits_2_naming_it_and_sends_nothing(tmp_path: Path) -> None:
    """Nothing listens on the bootstrap: exit 2, not 1, shows no connection was tried."""
    path = tmp_path / "turns.jsonl"
    path.write_text(_turn().model_dump_json() + "\n" + '{"message_id": ""}\n', encoding="utf-8")
    result = runner.invoke(app, ["send", str(path), "--bootstrap", f"127.0.0.1:{free_port()}"])
    assert result.exit_code == BAD_INPUT, result.output
    assert "line 2: message_id: String should have at least 1 character" in result.output
    assert "1 of 2 lines are bad; nothing was sent" in result.output
    assert "line 1" not in result.output
    assert "reachable" not in result.output


def test_an_app_refused_line_hints_at_identity(tmp_path: Path) -> None:
    path = tmp_path / "replies.jsonl"
    path.write_text(reply_to(_turn(), "好的").model_dump_json() + "\n", encoding="utf-8")
    result = runner.invoke(app, ["send", str(path), "--bootstrap", f"127.0.0.1:{free_port()}"])
    assert result.exit_code == BAD_INPUT
    assert "line 1: identity.forbidden" in result.output
    assert "--identity COMPONENT" in result.output


def test_a_missing_file_is_one_line() -> None:
    result = runner.invoke(app, ["send", "/nonexistent/turns.jsonl", "--bootstrap", "h:1"])
    assert result.exit_code == 1
    assert "cannot read /nonexistent/turns.jsonl: No such file or directory" in result.output


@pytest.mark.parametrize("command", ["send", "say"])
def test_no_broker_is_said_plainly_without_a_traceback(command: str, tmp_path: Path) -> None:
    """The same words as every other command that finds no broker."""
    port = free_port()
    path = tmp_path / "turn.jsonl"
    path.write_text(_turn().model_dump_json() + "\n", encoding="utf-8")
    args = [str(path)] if command == "send" else ["s-1", "hello"]
    result = hermesbus(command, *args, "--bootstrap", f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert (
        f"error: cannot reach Kafka at 127.0.0.1:{port} (from --bootstrap): KafkaConnectionError"
        in result.stderr
    )
    assert result.stderr.rstrip().endswith(UNREACHABLE_HINT)
    assert "Traceback" not in result.stderr
    assert result.stdout == ""  # no message id: nothing was sent


@pytest.mark.parametrize("command", [["say", "s-1", "hello"], ["send", "-"]])
def test_without_a_key_or_a_bootstrap_nothing_is_sent_and_the_fix_is_named(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key must be the bus's: its HERMES_HOME or keyring file, not a new one."""
    line = _turn().model_dump_json()  # made while the test keyring is there
    monkeypatch.setenv(KEYS_FILE_ENV, str(tmp_path / "absent.json"))
    monkeypatch.delenv("HERMES_KEY_APP", raising=False)
    keyless = hermesbus(*command, "--bootstrap", "127.0.0.1:1", stdin=line)
    assert keyless.returncode == 1
    said = keyless.stderr
    assert f"no signing key for identity 'app' in {tmp_path / 'absent.json'} (absent)" in said
    assert "it must be the key the bus verifies with" in said
    assert "use the same HERMES_HOME (its keys.json" in said
    assert f"or set {KEYS_FILE_ENV} to that file" in said
    assert "`hermesbus keys init` makes new keys: only for a new cluster" in said
    assert "cannot reach Kafka" not in said  # refused before any connection
    assert "Traceback" not in said
    assert keyless.stdout == ""
    monkeypatch.delenv("HERMES_KAFKA_BOOTSTRAP", raising=False)
    nowhere = runner.invoke(app, command, input=line)
    assert nowhere.exit_code == 1
    assert "no Kafka broker given: pass --bootstrap HOST:PORT" in nowhere.output


def test_a_bad_turn_names_the_field_and_exits_2() -> None:
    result = hermesbus("say", "", "hello", "--bootstrap", f"127.0.0.1:{free_port()}")
    assert result.returncode == 2
    said = "error: invalid turn: invalid session_id '' (0 characters): a session id is 1 to 128"
    assert said in result.stderr
    assert "cannot reach Kafka" not in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("text", ["", "   ", " \n\t "])
def test_say_refuses_an_empty_turn_before_connecting(text: str) -> None:
    result = hermesbus("say", "s-1", text, "--bootstrap", f"127.0.0.1:{free_port()}")
    assert result.returncode == 2
    assert result.stderr.startswith("error: nothing to say: TEXT is empty or blank")
    assert "cannot reach Kafka" not in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_send_refuses_an_unknown_identity_naming_the_known_ones() -> None:
    line = _turn().model_dump_json()
    result = hermesbus(
        "send", "--identity", "bogus", "--bootstrap", f"127.0.0.1:{free_port()}", stdin=line
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: unknown identity 'bogus': the bus's identities are ")
    assert ", ".join(IDENTITIES) in result.stderr
    assert "no signing key" not in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_send_of_blank_input_needs_no_broker() -> None:
    result = hermesbus("send", "-", "--bootstrap", f"127.0.0.1:{free_port()}", stdin="\n  \n")
    assert result.returncode == 0, result.stderr
    assert "sent 0 envelopes: the input has no envelope" in result.stderr
    assert "cannot reach Kafka" not in result.stderr


def test_say_refuses_a_wait_of_no_time() -> None:
    result = hermesbus("say", "s-1", "hello", "--timeout", "0", "--bootstrap", "127.0.0.1:9")
    assert result.returncode == 2
    assert "--timeout" in result.stderr
    assert "Traceback" not in result.stderr

"""The smaller rough edges of #24 (item 11), run as a user runs them where it is the CLI."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from hermesbus.cli._when import parse_time, tail_position
from hermesbus.trace.tail import Position
from tests.cli_process import clean_env, hermesbus

NOW = 1_764_669_600_000


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("1764669000000", 1_764_669_000_000),
        ("@1764669000000", 1_764_669_000_000),
        ("-15m", NOW - 15 * 60_000),
        ("15m", NOW - 15 * 60_000),
        ("-30s", NOW - 30_000),
        ("-2h", NOW - 2 * 3_600_000),
        ("-1d", NOW - 86_400_000),
        ("-500ms", NOW - 500),
        ("2025-12-02T10:00:00Z", int(datetime(2025, 12, 2, 10, tzinfo=UTC).timestamp() * 1000)),
    ],
)
def test_one_time_syntax_for_tail_search_and_replay(text: str, ms: int) -> None:
    assert parse_time(text, NOW) == ms
    assert tail_position(text, NOW) == Position("time", ms)


@pytest.mark.parametrize(
    ("text", "position"),
    [
        ("beginning", Position("beginning")),
        ("end", Position("end")),
        ("42", Position("offset", 42)),
        ("999999999999", Position("offset", 999_999_999_999)),  # 12 digits: an offset
    ],
)
def test_tail_keeps_its_positions(text: str, position: Position) -> None:
    assert tail_position(text, NOW) == position


@pytest.mark.parametrize("text", ["yesterday", "@12x", "--5m", ""])
def test_a_bad_time_names_every_form(text: str) -> None:
    with pytest.raises(ValueError, match=r"epoch ms \(1764669600000 or @1764669600000\)"):
        parse_time(text, NOW)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("search", "--component", "tools"), "--component 'tools': use one of app, "
         "conversation, dispatcher, tool, memory"),
        (("tail", "--component", "tools"), "--component 'tools': use one of app,"),
        (("search", "--since", "yesterday"), "--since 'yesterday' is not a time: use -15m"),
        (("replay", "--shadow", "--session", "s", "--from", "soon"), "--from 'soon' is not a time"),
        (("tail", "--from", "soon"), "'soon' is not a position: use beginning, end, an offset"),
        (("replay", "--shadow", "--redrive", "--session", "s"),
         "--shadow and --redrive/--fork are two ways to replay, one at a time"),
        (("replay", "--shadow", "--fork", "m1", "--session", "s"),
         "--shadow and --redrive/--fork are two ways to replay, one at a time"),
    ],
)  # fmt: skip
def test_bad_arguments_are_exit_2_and_say_what_fits(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    ran = hermesbus(*args, env=clean_env(tmp_path / "home"), cwd=tmp_path)
    assert ran.code == 2, ran.output
    assert says in ran.err
    assert "Traceback" not in ran.output and "unexpected" not in ran.output


@pytest.mark.parametrize(
    "args", [("search",), ("trace", "t1"), ("session", "s1"), ("replay", "--shadow", "--session",
                                                               "s1", "--source", "archive")]
)  # fmt: skip
def test_home_is_an_option_of_the_commands_that_read_state(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """--home says which state folder to read, as HERMES_HOME does (here: one with no index)."""
    home = tmp_path / "bus-home"
    ran = hermesbus(*args, "--home", str(home), env=clean_env(tmp_path / "other"), cwd=tmp_path)
    assert ran.code == 1, ran.output
    assert str(home / "index.sqlite3") in ran.err, ran.output
    assert str(tmp_path / "other") not in ran.output


def test_search_shows_a_dash_as_the_trace_of_an_undecodable_record() -> None:
    """It showed ``None``: a record that did not decode and carried no trace_id header."""
    from hermesbus.cli import _common, _index
    from hermesbus.codec import default_codec
    from hermesbus.trace.index import ArchivedRecord, DocumentSettings, decode, document

    record = ArchivedRecord(
        topic="hermes.conversation.in", partition=0, offset=7, timestamp_ms=1_717_405_200_000,
        key=b"s1", value=b"\x00garbage", headers=(),
    )  # fmt: skip
    doc = document(record, decode(record, default_codec()), DocumentSettings())
    with _common.console.capture() as shown:
        _index._table([doc])
    row = next(line for line in shown.get().splitlines() if "undecodable" in line)
    assert "None" not in row and " - " in row, row


def test_a_kibana_link_only_for_the_elasticsearch_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kibana shows Elasticsearch's documents: over the SQLite index a link led nowhere."""
    from hermesbus.cli import _index
    from hermesbus.compose.settings import Settings

    docs = [{"hermes": {"kafka": {"timestamp_ms": 1_717_405_200_000}}}]
    monkeypatch.setenv("HERMES_KIBANA_URL", "http://kibana.example:5601")
    monkeypatch.delenv("HERMES_ELASTICSEARCH_URL", raising=False)
    assert _index._kibana(Settings.from_environment(), 'trace.id:"t1"', docs) is None  # SQLite
    monkeypatch.setenv("HERMES_ELASTICSEARCH_URL", "http://127.0.0.1:1")  # never contacted
    link = _index._kibana(Settings.from_environment(), 'trace.id:"t1"', docs)
    assert link is not None and link.startswith("http://kibana.example:5601/app/discover#/?")
    assert "t1" in link


def test_home_is_an_option_of_up_doctor_keys_export_and_broker_too(tmp_path: Path) -> None:
    """Every command that reads or writes the state folder takes --home (some did not)."""
    home = tmp_path / "bus-home"
    env = clean_env(tmp_path / "other")
    made = hermesbus("keys", "init", "--home", str(home), env=env, cwd=tmp_path)
    assert made.code == 0, made.output
    assert (home / "keys.json").exists() and not (tmp_path / "other").exists()
    listed = hermesbus("keys", "list", "--home", str(home), env=env, cwd=tmp_path)
    assert listed.code == 0 and "conversation" in listed.out, listed.output
    checked = hermesbus("doctor", "--home", str(home), env=env, cwd=tmp_path, timeout=120)
    state = next(line for line in checked.out.splitlines() if " state " in line)
    assert str(home) in state and str(tmp_path / "other") not in checked.output
    for command in (("up",), ("export",), ("broker",)):
        shown = hermesbus(*command, "--help", env=env, cwd=tmp_path)
        assert "--home" in shown.out, (command, shown.output)

"""Control characters from the log (``ESC [2J``, OSC sequences in keys, trace ids, tasks)
reach no terminal: every human output shows them escaped; JSON output stays valid JSON."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from hermesbus import Payload, Reply, UserTurn
from hermesbus.base.printable import json_safe, printable
from hermesbus.codec import default_codec
from hermesbus.connectors.sqlite.index import SqliteTraceIndex
from hermesbus.trace.index import ArchivedRecord, DocumentSettings, decode, document
from hermesbus.trace.spans import Span, waterfall
from tests.builders import reply_to, turn
from tests.cli_process import clean_env, hermesbus

CLEAR = "\x1b[2J"
TITLE = "\x1b]0;owned\x07"
LINK = "\x1b]8;;http://evil.example\x07"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")
"""What must never be printed as it is."""
TRACE = f"t{TITLE}1"


def _clean(text: str) -> None:
    for char in RAW:
        assert char not in text, f"{char!r} printed raw in: {text!r}"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (CLEAR, "\\x1b[2J"),
        (TITLE, "\\x1b]0;owned\\x07"),
        ("a\x9b2Jb", "a\\x9b2Jb"),
        ("left\u202etxt.exe", "left\\u202etxt.exe"),
        ("one\ntwo\tthree\r", "one\\ntwo\\tthree\\r"),
        ("\x00\x7f\u2028", "\\x00\\x7f\\u2028"),
        ("报销单 EXP-1 👨‍👩‍👧 é", "报销单 EXP-1 👨‍👩‍👧 é"),  # text, emoji joiners: as they are
    ],
)
def test_printable_escapes_every_control_character_and_nothing_else(raw: str, shown: str) -> None:
    assert printable(raw) == shown
    assert printable(shown) == shown  # once is enough: escaping again changes nothing


def test_json_safe_escapes_what_encoders_leave_raw_and_stays_the_same_json() -> None:
    value = {"k": f"a\x9b\u202e{CLEAR}\u2028b", "报": "销"}
    text = json_safe(json.dumps(value, ensure_ascii=False))
    _clean(text)
    assert "\u2028" not in text
    assert json.loads(text) == value


def test_the_waterfall_escapes_states_and_tasks_from_the_log() -> None:
    spans = [
        Span("tool", f"S2{CLEAR}", f"ToolCall org{TITLE}", 0, 10, "ok"),
        Span("dispatcher", "S2", "ToolResults", 10, 20, "answered"),
    ]
    lines = waterfall(spans)
    for line in lines:
        _clean(line)
    assert "S2\\x1b[2J" in lines[1]
    assert "ToolCall org\\x1b]0;owned\\x07" in lines[1]
    widths = {len(line.split("|")[0]) for line in lines[1:3]}
    assert len(widths) == 1  # columns still line up: measured after escaping


def _index(home: Path) -> None:
    """A trace index whose records carry control characters in a task, a trace id, a reply,
    a key and a header (the last record does not decode: its key and header are shown)."""
    codec = default_codec()
    asked = turn(
        session_id="s1",
        trace_id=TRACE,
        payload=Payload(task=f"check{CLEAR}", body=UserTurn(text=f"hi{LINK}")),
    )
    answer = reply_to(asked, "done")
    answer = answer.model_copy(update={"payload": Payload(body=Reply(text=f"done{LINK}"))})
    records = [
        ArchivedRecord(
            "hermes.conversation.in", 0, 0, 1_717_405_200_000, b"s1", codec.encode(asked)
        ),
        ArchivedRecord(
            "hermes.conversation.out", 0, 0, 1_717_405_200_050, b"s1", codec.encode(answer)
        ),
        ArchivedRecord(
            "hermes.conversation.in", 0, 2, 1_717_405_200_100, f"s1{CLEAR}".encode(),
            b"\x00not an envelope", (("trace_id", LINK.encode()),),
        ),
    ]  # fmt: skip
    docs = [document(r, decode(r, codec), DocumentSettings()) for r in records]

    async def write() -> None:
        async with SqliteTraceIndex(home / "index.sqlite3") as index:
            await index.write(docs)

    asyncio.run(write())


@pytest.mark.parametrize(
    "args",
    [
        ("search",),
        ("search", "--json"),
        ("search", "--session", "s1"),
        ("session", "s1"),
        ("session", "s1", "--json"),
        ("trace", TRACE),
        ("trace", TRACE, "--json"),
    ],
)
def test_search_session_and_trace_print_no_control_character(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    _index(home)
    ran = hermesbus(*args, env=clean_env(home, COLUMNS="400"), cwd=tmp_path)
    assert ran.code == 0, ran.output
    _clean(ran.output)
    if "--json" in args:
        json.loads(ran.out)  # still JSON, the data whole
        assert "\\u001b" in ran.out
    else:
        assert "\\x1b" in ran.out


def test_an_error_quoting_the_log_is_escaped_too(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    _index(home)
    ran = hermesbus("trace", f"none{TITLE}", env=clean_env(home), cwd=tmp_path)
    assert ran.code == 1
    _clean(ran.output)
    assert "no envelope of trace 'none\\x1b]0;owned\\x07'" in ran.err


def test_say_shows_a_reply_with_its_control_characters_escaped() -> None:
    """``say --wait`` prints replies: text another process wrote to the log."""
    from hermesbus.cli import _common, _say

    answer = reply_to(turn(), f"已提交{CLEAR}{TITLE}")
    with _common.console.capture() as captured:
        _say._show(answer)
    printed = captured.get()
    _clean(printed)
    assert "已提交\\x1b[2J\\x1b]0;owned\\x07" in printed


def test_tail_lines_show_keys_trace_ids_and_errors_escaped() -> None:
    from hermesbus.cli import _tail
    from hermesbus.trace.tail import Tailed

    envelope = turn(trace_id=TRACE, payload=Payload(task=f"t{CLEAR}", body=UserTurn(text="x")))
    decoded = Tailed("hermes.conversation.in", 0, 3, 1_717_405_200_000, b"s1", (), envelope)
    line = _tail._line(decoded)
    _clean(line)
    assert f"trace {printable(TRACE)}" in line and "t\\x1b[2J" in line
    broken = Tailed(
        "hermes.conversation.in", 0, 4, 1_717_405_200_000, f"k{CLEAR}".encode(),
        (("trace_id", LINK.encode()),), None, error=f"bad bytes {LINK}",
    )  # fmt: skip
    line = _tail._line(broken)
    _clean(line)
    assert "bad bytes \\x1b]8;;http://evil.example\\x07" in line

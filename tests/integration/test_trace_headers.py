"""``trace --from-log`` goes by the envelope's own trace id, never a ``trace_id`` header:
an extra header on a signed turn dropped the root span; a header claiming the trace does
not pull another trace's record in. And ``tail`` shows what the log holds escaped: ids
with ESC and OSC sequences reach no terminal, in lines or JSON."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from hermesbus.client import Client
from hermesbus.codec import Codec
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.contract.headers import TRACE_ID
from hermesbus.identity import KEYS_FILE_ENV
from hermesbus.trace.spans import collect, spans
from tests.builders import reply_to, turn
from tests.cli_process import clean_env, hermesbus
from tests.integration.runtime.support import provision

pytestmark = pytest.mark.kafka

CODEC = Codec()


async def _log(broker: str, prefix: str) -> tuple[str, str]:
    """A turn signed with a second trace_id header naming another trace, its reply, and a
    turn of another trace whose extra header names the first: the two message ids."""
    asked = turn(message_id="root", session_id="s1", trace_id="t-real", source="app:tests")
    decoy = turn(message_id="decoy", session_id="s1", trace_id="t-other", source="app:tests")
    async with Client(bootstrap=broker, topic_prefix=prefix, codec=CODEC, name="tests") as app:
        await app.send(asked, headers=[(TRACE_ID, b"t-forged")])
        await app.send(decoy, headers=[(TRACE_ID, b"t-real")])
    async with Client(
        bootstrap=broker, topic_prefix=prefix, codec=CODEC, identity="conversation"
    ) as conversation:
        await conversation.send(reply_to(asked, "收到"))
    return asked.message_id, reply_to(asked, "收到").message_id


async def test_the_envelopes_trace_id_decides_not_the_headers(
    broker: str, unique: str, tmp_path: Path
) -> None:
    prefix = f"th{unique}."
    await provision(broker, prefix)
    root, answer = await _log(broker, prefix)
    kafka = KafkaConfig(bootstrap=broker)
    for session in ("s1", None):
        hops = await collect(kafka, "t-real", session_id=session, prefix=prefix, codec=CODEC)
        assert [hop.envelope.message_id for hop in hops] == [root, answer]
        (span,) = spans(hops)  # the root: the conversation handled the turn, and replied
        assert (span.component, span.outcome) == ("conversation", "ok")
    assert await collect(kafka, "t-forged", prefix=prefix, codec=CODEC) == []

    env = clean_env(tmp_path / "home", **{KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV]})
    args = ("trace", "t-real", "--from-log", "--bootstrap", broker, "--prefix", prefix)
    ran = await asyncio.to_thread(hermesbus, *args, env=env, cwd=tmp_path, timeout=120)
    assert ran.code == 0, ran.output
    assert "conversation" in ran.out and "UserTurn" in ran.out
    assert "1 spans: conversation 1" in ran.out


async def test_tail_prints_the_logs_control_characters_escaped(
    broker: str, unique: str, tmp_path: Path
) -> None:
    prefix = f"te{unique}."
    await provision(broker, prefix)
    trace = "t\x1b]0;owned\x07"
    asked = turn(message_id="m\x1b[2J", session_id="s1", trace_id=trace, source="app:tests")
    async with Client(bootstrap=broker, topic_prefix=prefix, codec=CODEC, name="tests") as app:
        await app.send(asked, headers=[("note", "\x1b[31m\u202e".encode())])
    env = clean_env(tmp_path / "home", **{KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV]})
    options = ("--session", "s1", "--bootstrap", broker, "--prefix", prefix)
    for extra in ((), ("--json",)):
        ran = await asyncio.to_thread(
            hermesbus, "tail", *options, *extra, env=env, cwd=tmp_path, timeout=120
        )
        assert ran.code == 0, ran.output
        for raw in ("\x1b", "\x07", "\u202e"):
            assert raw not in ran.output
        if extra:
            (line,) = ran.out.splitlines()
            assert json.loads(line)["envelope"]["trace_id"] == trace  # the data whole
        else:
            assert "trace t\\x1b]0;owned\\x07 id m\\x1b[2J" in ran.out

"""``trace --from-log`` goes by the envelope's own trace id, never a ``trace_id`` header:
an extra header on a signed turn dropped the root span; a header claiming the trace does
not pull another trace's record in."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from hermesbus.client import Client
from hermesbus.codec import Codec
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.headers import TRACE_ID
from hermesbus.identity import KEYS_FILE_ENV
from hermesbus.trace import collect, spans
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

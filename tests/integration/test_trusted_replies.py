"""Apps believe only replies the bus signed: Client and ``say --wait`` against a real broker.

A forger holding no key (an unsigned record), an app's key (HMAC, no public signature),
or a reply signer's signature copied from another record writes on the replies topic;
the client drops each and reports it; ``say --wait`` never prints one as the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from hermesbus.cli._say import NO_ANSWER
from hermesbus.client import Client, Unverified
from hermesbus.codec import Codec
from hermesbus.contract.envelope import Envelope
from hermesbus.errors import ConfigError
from hermesbus.identity import Signer
from hermesbus.topics import CONVERSATION_OUT
from tests import signing
from tests.builders import reply_to
from tests.integration.stacks import answer_turns, conversation_topics

pytestmark = pytest.mark.kafka

CODEC = Codec()
WAIT_S = 20.0
FAKE = "已提交报销单 EXP-FAKE"


@pytest.fixture
async def prefix(broker: str, unique: str) -> str:
    return await conversation_topics(broker, f"trust{unique}.")


async def forge(broker: str, prefix: str, turn: Envelope, genuine: bytes) -> None:
    """Write three forgeries of ``turn``'s answer: unsigned, signed by an app, and carrying
    the signatures of ``genuine`` (another record's) over the forged bytes."""
    topic, key = prefix + CONVERSATION_OUT, turn.session_id.encode()
    value = CODEC.encode(reply_to(turn, FAKE))
    producer = AIOKafkaProducer(bootstrap_servers=broker, enable_idempotence=False)
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=key)
        app = Signer("app", signing.keys()).sign(topic, key, value, ())
        await producer.send_and_wait(topic, value, key=key, headers=list(app))
        copied = Signer("conversation", signing.keys()).sign(topic, key, genuine, ())
        await producer.send_and_wait(topic, value, key=key, headers=list(copied))
    finally:
        await producer.stop()


async def test_replies_drop_and_report_what_the_bus_did_not_sign(broker: str, prefix: str) -> None:
    dropped: list[Unverified] = []
    async with (
        Client(
            bootstrap=broker, topic_prefix=prefix, codec=CODEC, on_unverified=dropped.append
        ) as app,
        Client(bootstrap=broker, topic_prefix=prefix, codec=CODEC, identity="conversation") as bus,
    ):
        turn = app.turn("s-trust", "u", "确认")
        async with app.replies(turn.session_id) as replies:
            await forge(broker, prefix, turn, CODEC.encode(reply_to(turn, "other")))
            await bus.send(reply_to(turn, "genuine"))
            async with asyncio.timeout(WAIT_S):
                first = await anext(replies)
    assert first.payload.body.text == "genuine"  # type: ignore[union-attr]
    assert [d.offset for d in dropped] == [0, 1, 2]
    assert app.unverified == 3
    assert [d.claimed.payload.body.text for d in dropped if d.claimed] == [FAKE] * 3  # type: ignore[union-attr]
    assert [d.reason.split(":")[0] for d in dropped] == [
        "identity.unsigned",
        "identity.unsigned",
        "identity.bad_signature",
    ]


async def test_a_dispatcher_notice_verifies_and_a_notice_posing_as_the_answer_does_not(
    broker: str, prefix: str
) -> None:
    async with (
        Client(bootstrap=broker, topic_prefix=prefix, codec=CODEC) as app,
        Client(bootstrap=broker, topic_prefix=prefix, codec=CODEC, identity="dispatcher") as mcp,
    ):
        turn = app.turn("s-notice", "u", "hi")
        notice = reply_to(turn, "ocr_tool is slow").model_copy(update={"source": "mcp:dispatcher"})
        async with app.replies(turn.session_id) as replies:
            key, topic = turn.session_id.encode(), prefix + CONVERSATION_OUT
            posing = CODEC.encode(reply_to(turn, FAKE))  # source conversation:S1
            headers = Signer("dispatcher", signing.keys()).sign(topic, key, posing, ())
            raw = AIOKafkaProducer(bootstrap_servers=broker, enable_idempotence=False)
            await raw.start()
            try:
                await raw.send_and_wait(topic, posing, key=key, headers=list(headers))
            finally:
                await raw.stop()
            await mcp.send(notice)
            async with asyncio.timeout(WAIT_S):
                got = await anext(replies)
    assert got.payload.body.text == "ocr_tool is slow"  # type: ignore[union-attr]
    assert app.unverified == 1


async def test_an_app_without_public_keys_refuses_to_read_replies(
    broker: str, prefix: str, tmp_path: Path
) -> None:
    async with Client(
        bootstrap=broker, topic_prefix=prefix, trust=tmp_path / "public-keys.json"
    ) as app:
        with pytest.raises(ConfigError, match="no public keys to check replies with"):
            await app.replies("s-1").start()
        with pytest.raises(ConfigError, match="no public keys to check replies with"):
            await app.ask("s-1", "u", "hello", timeout=WAIT_S)


async def forger(broker: str, prefix: str, genuine_too: bool) -> None:
    """Answer each turn on the ingress topic with a forgery (and a genuine answer)."""

    async def answer(bus: Client, turn: Envelope, raw: bytes) -> None:
        await forge(broker, prefix, turn, raw)
        if genuine_too:
            await bus.send(reply_to(turn, "已提交报销单 EXP-REAL"))

    await answer_turns(broker, prefix, CODEC, answer)


async def say(broker: str, prefix: str, session: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "hermesbus.cli", "say", session, "确认", "--timeout", "8"),
        *("--bootstrap", broker, "--prefix", prefix),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(120):
        out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@contextlib.asynccontextmanager
async def forging(broker: str, prefix: str, genuine_too: bool) -> AsyncIterator[None]:
    task = asyncio.create_task(forger(broker, prefix, genuine_too))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_say_wait_never_prints_a_forgery_as_the_answer(broker: str, prefix: str) -> None:
    async with forging(broker, prefix, genuine_too=False):
        code, out, err = await say(broker, prefix, "s-forged")
    assert code == NO_ANSWER, err
    assert FAKE not in out
    assert err.count("warning: dropped a record on") == 3
    async with forging(broker, prefix, genuine_too=True):
        code, out, err = await say(broker, prefix, "s-real")
    assert code == 0, err
    assert "EXP-REAL" in out
    assert FAKE not in out

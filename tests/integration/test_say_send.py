"""``hermesbus say`` and ``hermesbus send`` as a user runs them, against the embedded broker.

``say --wait`` talks to the stack ``hermesbus up --demo`` runs (in this process, so the
command runs as a subprocess beside it); ``send`` writes to fresh topics that are then
read back with a plain consumer.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from hermesbus.cli._say import NO_ANSWER
from hermesbus.cli._send import BAD_INPUT, RESEND_NOTE
from hermesbus.client import Client, partition_for_key
from hermesbus.codec import decode
from hermesbus.compose.stack import Stack
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.contract.headers import DLQ_ERROR_MESSAGE
from hermesbus.demo.expense import DEMO_USER
from hermesbus.identity import KEYS_FILE_ENV, SIGNATURE, Keyring, Verifier
from hermesbus.processors.protocol import IDENTITIES
from hermesbus.processors.tool.demo.fixtures import DEMO_BUDGET_REMAINING, DEMO_DEPT
from hermesbus.topics import CONVERSATION_IN, CONVERSATION_OUT, DLQ, Catalog
from tests.builders import reply_to
from tests.integration.stacks import conversation_topics, demo_stack
from tests.signing import keys

pytestmark = pytest.mark.kafka

PARTITIONS = 6
READ_S = 20.0


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


async def hermesbus(
    *args: str, stdin: str | None = None, timeout: float = 120, env: dict[str, str] | None = None
) -> Ran:
    """``python -m hermesbus.cli ARGS`` without blocking the loop the stack runs in; ``env``
    over this process's environment."""
    env = {k: v for k, v in os.environ.items() if k not in _OURS} | (env or {})
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hermesbus.cli",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    async with asyncio.timeout(timeout):
        out, err = await process.communicate(None if stdin is None else stdin.encode())
    assert process.returncode is not None
    return Ran(process.returncode, out.decode(), err.decode())


_OURS = {"HERMES_KAFKA_BOOTSTRAP", "HERMES_TOPIC_PREFIX"}  # the tests pass them as flags


@pytest.fixture
async def running(
    embedded_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Stack]:
    home = tmp_path / "home"
    async with demo_stack(embedded_bootstrap, f"say-{unique}.", home, monkeypatch) as running:
        yield running


@pytest.fixture
async def prefix(embedded_bootstrap: str, unique: str) -> str:
    """Fresh conversation topics, as the catalog declares them, and no processor."""
    return await conversation_topics(embedded_bootstrap, f"send-{unique}.")


async def records(bootstrap: str, topic: str, count: int) -> list[Any]:
    """The first ``count`` records of ``topic``, every partition, with a plain consumer."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        found: list[Any] = []
        async with asyncio.timeout(READ_S):
            while len(found) < count:
                for batch in (await consumer.getmany(timeout_ms=200)).values():
                    found.extend(batch)
        return found
    finally:
        await consumer.stop()


async def exists(bootstrap: str, *topics: str) -> list[str]:
    """Those of ``topics`` on the cluster, as its full topic list has them."""
    async with KafkaAdmin(KafkaConfig(bootstrap=bootstrap)) as admin:
        listed = set(await admin.client.list_topics())
    return [topic for topic in topics if topic in listed]


async def ends(bootstrap: str, topic: str) -> list[int]:
    """The end offset of each partition of ``topic``: all 0 when nothing was written."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        return list((await consumer.end_offsets(partitions)).values())
    finally:
        await consumer.stop()


def app_client(bootstrap: str, prefix: str) -> Client:
    """Builds the envelopes the tests write into files (it is never started)."""
    return Client(bootstrap=bootstrap, topic_prefix=prefix, name="cli")


# -- say ------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_say_wait_prints_the_demos_first_answer_as_it_arrives(
    running: Stack, unique: str
) -> None:
    ran = await hermesbus(
        "say",
        f"sess-{unique}",
        "我要报上个月去深圳的差旅费",
        "--user",
        DEMO_USER,
        "--timeout",
        "60",
        "--bootstrap",
        running.bootstrap,
        "--prefix",
        running.prefix,
    )
    assert ran.code == 0, ran.err
    (answer,) = ran.out.splitlines()  # S2 answers; no notice on the first turn
    assert answer.startswith("hermes  好的，已为您发起")
    assert f"您所在部门：{DEMO_DEPT}" in answer
    assert f"{DEMO_BUDGET_REMAINING:,} CNY" in answer
    assert answer.endswith("  (conversation:S2)")
    assert f"from app:cli to {running.prefix}{CONVERSATION_IN} (session sess-{unique}" in ran.err
    assert "Traceback" not in ran.err


async def test_say_without_wait_prints_the_id_of_the_turn_it_put_on_the_topic(
    embedded_bootstrap: str, prefix: str
) -> None:
    ran = await hermesbus(
        "say", "s-say", "hello", "--bootstrap", embedded_bootstrap, "--prefix", prefix
    )
    assert ran.code == 0, ran.err
    message_id = ran.out.strip()
    (record,) = await records(embedded_bootstrap, prefix + CONVERSATION_IN, 1)
    turn = decode(record.value)
    assert (turn.message_id, turn.source, turn.session_id, turn.user_id) == (
        message_id,
        "app:cli",
        "s-say",
        DEMO_USER,
    )
    assert dict(record.headers)[SIGNATURE].startswith(b"v1:app:")


async def test_say_wait_without_processors_exits_3_naming_the_trace(
    embedded_bootstrap: str, prefix: str
) -> None:
    ran = await hermesbus(
        "say", "s-alone", "hello", "--timeout", "1", "--bootstrap", embedded_bootstrap,
        "--prefix", prefix,
    )  # fmt: skip
    assert ran.code == NO_ANSWER
    assert ran.out == ""
    trace_id = ran.err.split("trace ", 1)[1].split(")", 1)[0]  # from the "sent ..." line
    assert f"error: no answer to the turn within 1 s (trace {trace_id}): are the processors" in (
        ran.err
    )
    assert f"it went to {prefix}{DLQ} as identity.unknown_key" in ran.err
    assert f"`hermesbus trace {trace_id} --session s-alone --prefix {prefix}`" in ran.err
    assert "Traceback" not in ran.err


@pytest.mark.slow
async def test_say_signed_with_a_new_keyring_is_refused_and_the_timeout_says_so(
    running: Stack, unique: str, tmp_path: Path
) -> None:
    """What `hermesbus keys init` in another HERMES_HOME leads to: the bus does not know the
    key, dead-letters the turn, and say's timeout names that cause and the trace."""
    other = tmp_path / "other-keys.json"
    Keyring.ensure(IDENTITIES, other)
    ran = await hermesbus(
        "say", f"sess-{unique}", "hello", "--timeout", "5", "--bootstrap", running.bootstrap,
        "--prefix", running.prefix, env={KEYS_FILE_ENV: str(other)},
    )  # fmt: skip
    assert ran.code == NO_ANSWER, ran.err
    trace_id = ran.err.split("trace ", 1)[1].split(")", 1)[0]
    assert f"(trace {trace_id}): are the processors running? Or the bus refused" in ran.err
    assert f"it does not know (not its keyring), it went to {running.prefix}{DLQ}" in ran.err
    assert "Traceback" not in ran.err
    (letter,) = await records(running.bootstrap, running.prefix + DLQ, 1)
    assert decode(letter.value).trace_id == trace_id
    assert dict(letter.headers)[DLQ_ERROR_MESSAGE].startswith(b"identity.unknown_key")


async def test_say_to_a_prefix_without_topics_sends_nothing_and_creates_nothing(
    embedded_bootstrap: str, unique: str
) -> None:
    """The broker would auto-create the topic, with its default partition count."""
    wrong = f"nope-{unique}."
    topic = wrong + CONVERSATION_IN
    ran = await hermesbus(
        "say", "sess_p", "hi", "--bootstrap", embedded_bootstrap, "--prefix", wrong
    )
    assert ran.code == 1
    assert ran.out == ""
    assert f"error: topic {topic} does not exist on {embedded_bootstrap} (prefix {wrong!r})" in (
        ran.err
    )
    assert "nothing was sent" in ran.err
    assert "pass the bus's --prefix (or HERMES_TOPIC_PREFIX)" in ran.err
    assert f"`hermesbus topics apply --bootstrap {embedded_bootstrap} --prefix {wrong}`" in ran.err
    assert "sent " not in ran.err
    assert "Traceback" not in ran.err
    assert await exists(embedded_bootstrap, topic) == []


async def test_say_wait_needs_the_replies_topic_too(embedded_bootstrap: str, unique: str) -> None:
    """Only the ingress topic exists: the turn is not sent, for no reply could be read."""
    half = f"half-{unique}."
    catalog = Catalog.load().with_overrides(prefix=half)
    async with KafkaAdmin(KafkaConfig(bootstrap=embedded_bootstrap)) as admin:
        await admin.create([catalog.get(half + CONVERSATION_IN)])
    ran = await hermesbus(
        "say", "s-half", "hi", "--wait", "--bootstrap", embedded_bootstrap, "--prefix", half
    )
    assert ran.code == 1
    assert f"error: topic {half}{CONVERSATION_OUT} does not exist" in ran.err
    assert "Traceback" not in ran.err
    assert await ends(embedded_bootstrap, half + CONVERSATION_IN) == [0] * PARTITIONS
    assert await exists(embedded_bootstrap, half + CONVERSATION_OUT) == []


# -- send -----------------------------------------------------------------------------------


async def test_send_puts_each_line_on_its_topic_signed_and_keyed_by_session(
    embedded_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    turn = app_client(embedded_bootstrap, prefix).turn("s-send", DEMO_USER, "不用，就这三张")
    path = tmp_path / "turns.jsonl"
    path.write_text(turn.model_dump_json() + "\n\n", encoding="utf-8")
    ran = await hermesbus("send", str(path), "--bootstrap", embedded_bootstrap, "--prefix", prefix)
    assert ran.code == 0, ran.err
    assert ran.out == f"{turn.message_id}\n"
    assert "sent 1 envelope\n" in ran.err
    (record,) = await records(embedded_bootstrap, prefix + CONVERSATION_IN, 1)
    assert record.key == b"s-send"
    assert record.partition == partition_for_key(b"s-send", range(PARTITIONS))
    assert decode(record.value) == turn
    headers = dict(record.headers)
    assert headers["message_id"] == turn.message_id.encode()
    verifier = Verifier(keys())
    assert verifier.signer(record.topic, record.key, record.value, record.headers) == "app"


async def test_send_identity_speaks_as_a_component_from_stdin(
    embedded_bootstrap: str, prefix: str
) -> None:
    turn = app_client(embedded_bootstrap, prefix).turn("s-reply", DEMO_USER, "hi")
    answer = reply_to(turn, "好的")
    ran = await hermesbus(
        "send", "--identity", "conversation", "--bootstrap", embedded_bootstrap,
        "--prefix", prefix, stdin=answer.model_dump_json() + "\n",
    )  # fmt: skip
    assert ran.code == 0, ran.err
    (record,) = await records(embedded_bootstrap, prefix + CONVERSATION_OUT, 1)
    assert decode(record.value) == answer
    assert dict(record.headers)[SIGNATURE].startswith(b"v1:conversation:")


async def test_send_with_a_bad_line_exits_2_naming_it_and_sends_nothing(
    embedded_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    good = app_client(embedded_bootstrap, prefix).turn("s-bad", DEMO_USER, "hello")
    path = tmp_path / "turns.jsonl"
    path.write_text(f"{good.model_dump_json()}\n{{not json\n", encoding="utf-8")
    ran = await hermesbus("send", str(path), "--bootstrap", embedded_bootstrap, "--prefix", prefix)
    assert ran.code == BAD_INPUT
    assert "line 2: Invalid JSON" in ran.err
    assert "1 of 2 lines are bad; nothing was sent" in ran.err
    assert "Traceback" not in ran.err
    assert ran.out == ""
    assert await ends(embedded_bootstrap, prefix + CONVERSATION_IN) == [0] * PARTITIONS


async def test_send_to_a_prefix_without_topics_sends_nothing_and_creates_nothing(
    embedded_bootstrap: str, unique: str, tmp_path: Path
) -> None:
    wrong = f"nope-{unique}."
    answer = reply_to(app_client(embedded_bootstrap, wrong).turn("s-w", DEMO_USER, "hi"), "好的")
    ran = await hermesbus(
        "send", "--identity", "conversation", "--bootstrap", embedded_bootstrap,
        "--prefix", wrong, stdin=answer.model_dump_json() + "\n",
    )  # fmt: skip
    assert ran.code == 1
    assert ran.out == ""
    assert f"error: topic {wrong}{CONVERSATION_OUT} does not exist on {embedded_bootstrap}" in (
        ran.err
    )
    assert f"hermesbus topics apply --bootstrap {embedded_bootstrap} --prefix {wrong}" in ran.err
    assert "Traceback" not in ran.err
    assert await exists(embedded_bootstrap, wrong + CONVERSATION_OUT) == []


async def test_sending_a_file_twice_says_the_processors_skip_the_second(
    embedded_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """The broker takes both copies; only the second send says it will do nothing."""
    turn = app_client(embedded_bootstrap, prefix).turn("s-twice", DEMO_USER, "hello")
    path = tmp_path / "turns.jsonl"
    path.write_text(turn.model_dump_json() + "\n", encoding="utf-8")
    first = await hermesbus(
        "send", str(path), "--bootstrap", embedded_bootstrap, "--prefix", prefix
    )
    again = await hermesbus(
        "send", str(path), "--bootstrap", embedded_bootstrap, "--prefix", prefix
    )
    assert first.code == again.code == 0, first.err + again.err
    assert first.err.splitlines()[-1] == "sent 1 envelope"  # a first send: no note
    assert RESEND_NOTE not in first.err
    assert again.err.splitlines()[-3:] == [
        "sent 1 envelope",
        f"1 of them were sent before from here ({turn.message_id})",
        RESEND_NOTE,
    ]
    copies = await records(embedded_bootstrap, prefix + CONVERSATION_IN, 2)
    assert [decode(record.value).message_id for record in copies] == [turn.message_id] * 2

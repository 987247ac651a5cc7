"""Forged-source attacks against the running stack, on each real broker.

Anyone who can produce to a topic tried to make the bus act on a ``source`` it merely
claimed: a forged submission to the dispatcher, a forged verified edge to memory, a
forged call straight to the tool topic. Each is sent through ``Client.send`` (refused
before it leaves the app) and through a raw producer (unsigned, signed with the app's
own key, signed with a key the cluster does not know). None may run: no tool call, no
memory change; each is in the dead-letter topic with the reason, and alerted.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord

from hermesbus import Client, Envelope, Payload
from hermesbus.codec import decode, encode
from hermesbus.compose.stack import Stack
from hermesbus.contract import headers as h
from hermesbus.contract.envelope import Metadata
from hermesbus.contract.payloads import (
    ErrorReport,
    MemoryTier,
    MemoryWrite,
    ToolCall,
    TrustLevel,
    Verification,
)
from hermesbus.demo.expense import DEMO_USER
from hermesbus.errors import IdentityError
from hermesbus.identity import Keyring, Signer, new_key
from hermesbus.processors.tool import MODEL_GROUP
from hermesbus.topics import ALERTS, DLQ
from tests import signing
from tests.integration.stacks import demo_stack

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

NOW = datetime(2024, 6, 3, 10, 0, tzinfo=UTC)
FORGED_REPORT = "EXP-FORGED-999999"
WAIT_S = 60.0


@pytest.fixture
async def running(
    broker: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Stack]:
    home = tmp_path / "home"
    async with demo_stack(broker, f"id-{unique}.", home, monkeypatch) as running:
        yield running


def submit(key: str) -> ToolCall:
    """finance_tool submitting an expense of any amount, with any approver: what an
    attacker wants run."""
    arguments = {
        "action": "submit",
        "user_id": DEMO_USER,
        "report_id": FORGED_REPORT,
        "amount": 999999,
        "approver": "CEO",
        "invoices": ["inv-001"],
    }
    return ToolCall(tool="finance_tool", arguments_json=json.dumps(arguments), idempotency_key=key)


def forged_edge() -> MemoryWrite:
    fact = {
        "subject": f"expense:{FORGED_REPORT}",
        "relation": "approved_by",
        "object": "person:CEO",
    }
    return MemoryWrite(
        tier=MemoryTier.LONG_TERM,
        key=f"expense:{FORGED_REPORT}|approved_by|person:CEO",
        value_json=json.dumps(fact),
        verified_by=Verification(tool="finance_tool", verified_at=NOW),
        trust_level=TrustLevel.VERIFIED,
    )


def envelope(source: str, target: str, body: Any, *, session: str, **context: Any) -> Envelope:
    return Envelope(
        message_id=f"attack-{uuid.uuid4().hex}",
        timestamp=NOW,
        source=source,
        target=target,
        session_id=session,
        user_id=DEMO_USER,
        trace_id=f"trace-attack-{session}",
        payload=Payload(task="submit_expense", context=context, body=body),
        metadata=Metadata(timeout_ms=5000),
    )


# The three attacks: (topic, build an envelope for an idempotency key)
ATTACKS: dict[str, tuple[str, Callable[[str, str], Envelope]]] = {
    "submission claiming conversation:S4 to the dispatcher": (
        "hermes.dispatcher",
        lambda session, key: envelope(
            "conversation:S4",
            "mcp:dispatcher",
            submit(key),
            session=session,
            cycle=f"cycle-{key}",
            tools=["finance_tool"],
        ),
    ),
    "verified edge claiming mcp:dispatcher to memory": (
        "hermes.memory",
        lambda session, key: envelope(
            "mcp:dispatcher", "memory:long_term", forged_edge(), session=session
        ),
    ),
    "tool call claiming mcp:dispatcher straight to the tool topic": (
        "hermes.tool",
        lambda session, key: envelope(
            "mcp:dispatcher", "tool:finance_tool", submit(key), session=session, cycle="c1"
        ),
    ),
}
STRANGER = Keyring({"dispatcher": [new_key()], "conversation": [new_key()]})


def raw_headers(how: str, topic: str, key: bytes, value: bytes, claimed: str) -> list[Any] | None:
    if how == "unsigned":
        return None
    if how == "app key":  # an app that skips the Client's own check, signing as itself
        return signing.signed(topic, key, value, identity="app")
    identity = "dispatcher" if claimed.startswith("mcp") else "conversation"
    return list(Signer(identity, STRANGER).sign(topic, key, value, ()))  # a key nobody knows


EXPECTED = {
    "unsigned": "identity.unsigned",
    "app key": "identity.impersonation",
    "stranger's key": "identity.unknown_key",
}


async def read_until(
    bootstrap: str, topic: str, done: Callable[[list[ConsumerRecord[bytes, bytes]]], bool]
) -> list[ConsumerRecord[bytes, bytes]]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    records: list[ConsumerRecord[bytes, bytes]] = []
    try:
        deadline = time.monotonic() + WAIT_S
        while not done(records) and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                records.extend(batch)
    finally:
        await consumer.stop()
    return records


async def finance_calls(running: Stack) -> int:
    stats = await running.tools.store.call_stats("finance_tool", 1000)
    return stats.count if stats is not None else 0


async def attack(running: Stack, unique: str) -> dict[str, tuple[str, str]]:
    """Every attack through the Client (refused at once) and three raw producers; returns
    message id -> (the refusal code expected, its idempotency key) of what reached a topic."""
    bootstrap, prefix = running.bootstrap, running.prefix
    async with Client(bootstrap=bootstrap, topic_prefix=prefix, name="attacker") as app:
        for n, (_what, (_topic, build)) in enumerate(ATTACKS.items()):
            forged = build(f"sess-attack-{unique}-{n}", f"forged-{unique}-{n}-client")
            with pytest.raises(IdentityError, match="identity.forbidden"):
                await app.send(forged)  # refused before it leaves the app
    sent: dict[str, tuple[str, str]] = {}
    raw = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False)
    await raw.start()
    try:
        for n, (_what, (topic, build)) in enumerate(ATTACKS.items()):
            for how, code in EXPECTED.items():
                key = f"forged-{unique}-{n}-{how.replace(' ', '_')}"
                forged = build(f"sess-attack-{unique}-{n}", key)
                value, record_key = encode(forged), forged.session_id.encode()
                headers = raw_headers(how, prefix + topic, record_key, value, forged.source)
                await raw.send_and_wait(prefix + topic, value, key=record_key, headers=headers)
                sent[forged.message_id] = (code, key)
    finally:
        await raw.stop()
    return sent


async def assert_dead_lettered_and_alerted(
    running: Stack, sent: dict[str, tuple[str, str]]
) -> None:
    bootstrap, prefix = running.bootstrap, running.prefix

    def dead_lettered(records: list[ConsumerRecord[bytes, bytes]]) -> bool:
        return {decode(r.value or b"").message_id for r in records} >= set(sent)

    letters = await read_until(bootstrap, prefix + DLQ, dead_lettered)
    by_id = {decode(r.value or b"").message_id: r for r in letters}
    for message_id, (code, _key) in sent.items():
        letter = by_id.get(message_id)
        assert letter is not None, f"{message_id} was not dead-lettered"
        found = list(letter.headers)
        assert h.header(found, h.DLQ_ERROR_CLASS) == "hermesbus.errors.IdentityError"
        assert (h.header(found, h.DLQ_ERROR_MESSAGE) or "").startswith(code)
        assert h.header(found, h.DLQ_ORIGIN_TOPIC) in {prefix + t for t, _ in ATTACKS.values()}
    assert sum(decode(r.value or b"").message_id in sent for r in letters) == len(sent)  # once

    def alerted(records: list[ConsumerRecord[bytes, bytes]]) -> bool:
        refused = {decode(r.value or b"").payload.context.get("refused") for r in records}
        return refused >= set(sent)

    alerts = [decode(r.value or b"") for r in await read_until(bootstrap, prefix + ALERTS, alerted)]
    codes = {
        a.payload.context.get("refused"): a.payload.body.code
        for a in alerts
        if isinstance(a.payload.body, ErrorReport)
    }
    assert {m: codes.get(m) for m in sent} == {m: code for m, (code, _) in sent.items()}


async def test_forged_sources_never_run_and_are_dead_lettered_and_alerted(
    running: Stack, unique: str
) -> None:
    calls_before = await finance_calls(running)
    sent = await attack(running, unique)
    await assert_dead_lettered_and_alerted(running, sent)

    # nothing ran: no finance_tool call, no stored result, no forged edge in memory
    assert await finance_calls(running) == calls_before
    for _code, key in sent.values():
        assert await running.tools.store.get_result(key) is None
    assert (
        await running.memory.edge(f"expense:{FORGED_REPORT}", "approved_by", "person:CEO") is None
    )
    assert await running.memory.facts("person:CEO", TrustLevel.RAW) == ()
    refused = {p.name: p.stats.refused for p in running.processors if p.stats.refused}
    each_tool = {f"tool-{name}": 3 for name in running.tool_names}  # counted, not re-dead-lettered
    each_tool[MODEL_GROUP] = 3  # the model rounds' group reads the tool topic too
    assert refused == {"dispatcher": 3, "memory": 3, "tool": 3, **each_tool}

    # the control: the same call, signed by the dispatcher itself, does run
    async with Client(
        bootstrap=running.bootstrap, topic_prefix=running.prefix, identity="dispatcher"
    ) as mcp:
        _topic, build = ATTACKS["tool call claiming mcp:dispatcher straight to the tool topic"]
        await mcp.send(build(f"sess-legit-{unique}", f"legit-{unique}"))
    deadline = time.monotonic() + WAIT_S
    while await finance_calls(running) == calls_before and time.monotonic() < deadline:
        await asyncio.sleep(0.1)  # polling a store: there is no event to wait on
    assert await finance_calls(running) == calls_before + 1

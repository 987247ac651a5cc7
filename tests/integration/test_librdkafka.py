"""A producer in "another language": librdkafka (confluent-kafka), written from the README.

The README's section "The record format, for producers in other languages" is all this
producer knows of hermesbus: it writes the Avro body with fastavro against the newest
frozen envelope schema, computes the CRC-64-AVRO fingerprint, frames, signs (HMAC-SHA256
over the length-prefixed domain, identity, key id, topic, key and value) and picks the
partition (``murmur2_random``) with its own few lines below, never with hermesbus's
codec or signer. It produces one user turn to the demo bus and reads the conversation's
reply with a confluent-kafka consumer, checking the reply's framing and signature the
same way. hermesbus is used only to run the bus and to say which partition the bus
expects, so that the client's choice is checked against it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import io
import json
import os
import struct
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import confluent_kafka
import fastavro
import fastavro.schema
import pytest

from hermesbus.compose.stack import Stack
from hermesbus.connectors.kafka import partition_of
from hermesbus.demo.expense import DEMO_USER
from hermesbus.topics import CONVERSATION_IN, CONVERSATION_OUT
from tests.integration.stacks import demo_stack

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

HISTORY = Path(__file__).resolve().parents[2] / "schemas" / "history" / "hermes.mcp.Envelope"
REPLY_WAIT_S = 90.0
"""Generous: the first reply asks memory and two demo tools on a busy 2-core machine."""
CLIENT_TIMEOUT_S = 30.0


# -- the README's specification, in a few lines of plain Python ---------------------------

_CRC64_EMPTY = 0xC15D213AA4D7A795
_CRC64_TABLE = []
for _byte in range(256):
    _fp = _byte
    for _ in range(8):
        _fp = (_fp >> 1) ^ (_CRC64_EMPTY & -(_fp & 1))
    _CRC64_TABLE.append(_fp)


def crc64_avro(data: bytes) -> bytes:
    """The Avro spec's CRC-64-AVRO, in the single-object header's little-endian order."""
    fp = _CRC64_EMPTY
    for byte in data:
        fp = (fp >> 8) ^ _CRC64_TABLE[(fp ^ byte) & 0xFF]
    return fp.to_bytes(8, "little")


def frozen_schemas() -> dict[bytes, Any]:
    """Every frozen envelope schema, parsed, by fingerprint: oldest first, the writer last."""
    found: dict[bytes, Any] = {}
    for path in sorted(HISTORY.glob("v*.avsc"), key=lambda p: int(p.stem[1:])):
        schema = json.loads(path.read_text(encoding="utf-8"))
        canonical = fastavro.schema.to_parsing_canonical_form(schema)
        found[crc64_avro(canonical.encode())] = fastavro.parse_schema(schema)
    return found


def length_prefixed(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def mac(secret: bytes, signer: tuple[str, str], topic: str, key: bytes | None, value: bytes) -> str:
    """``<mac>`` of the hermes.signature header: base64url HMAC-SHA256, no padding.

    ``signer`` is the identity and the key id.
    """
    identity, kid = signer
    signed = b"".join(
        length_prefixed(part)
        for part in (b"hermesbus-record-v1", identity.encode(), kid.encode(), topic.encode())
    )
    signed += b"\xff\xff\xff\xff" if key is None else length_prefixed(key)
    signed += length_prefixed(value)
    digest = hmac.new(secret, signed, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def keyring() -> dict[str, list[dict[str, str]]]:
    """The bus's keyring file (HERMES_KEYS_FILE): identity -> [{kid, secret}], first signs."""
    document = json.loads(Path(os.environ["HERMES_KEYS_FILE"]).read_text(encoding="utf-8"))
    return dict(document["keys"])


def secret_of(entry: dict[str, str]) -> bytes:
    text = entry["secret"]
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def user_turn(session: str, trace: str, text: str) -> dict[str, Any]:
    """The envelope record of a user turn; every other field keeps its schema default."""
    return {
        "message_id": str(uuid.uuid4()),
        "timestamp": int(time.time() * 1000),
        "source": "app:rdkafka",
        "target": "conversation:in",
        "session_id": session,
        "user_id": DEMO_USER,
        "trace_id": trace,
        "payload": {"body": ("hermes.mcp.UserTurn", {"text": text})},
    }


def encode(record: dict[str, Any], schemas: dict[bytes, Any]) -> bytes:
    fingerprint, newest = list(schemas.items())[-1]
    body = io.BytesIO()
    fastavro.schemaless_writer(body, newest, record)
    return b"\xc3\x01" + fingerprint + body.getvalue()


def signed_headers(record: dict[str, Any], topic: str, value: bytes) -> list[tuple[str, bytes]]:
    entry = keyring()["app"][0]
    text = mac(secret_of(entry), ("app", entry["kid"]), topic, record["session_id"].encode(), value)
    return [
        ("trace_id", record["trace_id"].encode()),
        ("message_id", record["message_id"].encode()),
        ("hermes.signature", f"v1:app:{entry['kid']}:{text}".encode()),
    ]


def signer_of(topic: str, key: bytes | None, value: bytes, headers: list[Any]) -> str:
    """Who signed a record, checked as a receiver does; AssertionError if it does not verify."""
    found = [v for k, v in headers if k == "hermes.signature"]
    assert len(found) == 1, headers
    version, identity, kid, text = found[0].decode().split(":")
    assert version == "v1"
    entry = next(e for e in keyring()[identity] if e["kid"] == kid)
    assert hmac.compare_digest(text, mac(secret_of(entry), (identity, kid), topic, key, value))
    return str(identity)


# -- the test ------------------------------------------------------------------------------


@pytest.fixture
async def running(
    broker: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Stack]:
    async with demo_stack(broker, f"rdk-{unique}.", tmp_path / "home", monkeypatch) as running:
        yield running


def header_value(headers: list[Any] | None, name: str) -> bytes | None:
    return next((v for k, v in headers or () if k == name), None)


async def produce(producer: Any, topic: str, key: bytes, value: bytes, headers: list[Any]) -> Any:
    """Produce one record and wait for its delivery report (librdkafka calls are blocking)."""
    delivered: list[tuple[Any, Any]] = []
    producer.produce(
        topic,
        value=value,
        key=key,
        headers=headers,
        on_delivery=lambda error, message: delivered.append((error, message)),
    )
    remaining = await asyncio.to_thread(producer.flush, CLIENT_TIMEOUT_S)
    assert remaining == 0 and len(delivered) == 1, "the record was not delivered"
    error, message = delivered[0]
    assert error is None, error
    return message


async def reply_to(consumer: Any, trace: bytes) -> Any:
    """The first record of ``trace`` the consumer reads (polling; a generous deadline)."""
    deadline = time.monotonic() + REPLY_WAIT_S
    while time.monotonic() < deadline:
        message = await asyncio.to_thread(consumer.poll, 0.5)
        if message is None:
            continue
        assert message.error() is None, message.error()
        if header_value(message.headers(), "trace_id") == trace:
            return message
    pytest.fail(f"no reply of trace {trace.decode()} within {REPLY_WAIT_S:g} s")


async def test_a_librdkafka_producer_written_from_the_readme_gets_the_demo_reply(
    running: Stack, unique: str
) -> None:
    schemas = frozen_schemas()
    topic_in = running.prefix + CONVERSATION_IN
    topic_out = running.prefix + CONVERSATION_OUT
    session, trace = f"sess_rdk_{unique}", uuid.uuid4().hex
    key = session.encode()
    common = {"bootstrap.servers": running.bootstrap, "socket.timeout.ms": 30_000}
    producer = confluent_kafka.Producer(
        {**common, "partitioner": "murmur2_random", "acks": "all", "enable.idempotence": False}
    )
    consumer = confluent_kafka.Consumer(
        {**common, "group.id": f"rdk-{unique}", "enable.auto.commit": False}
    )
    try:
        metadata = await asyncio.to_thread(producer.list_topics, topic_out, CLIENT_TIMEOUT_S)
        count = len(metadata.topics[topic_out].partitions)
        where = confluent_kafka.TopicPartition(topic_out, partition_of(key, count))
        _, end = await asyncio.to_thread(consumer.get_watermark_offsets, where, CLIENT_TIMEOUT_S)
        where.offset = end
        consumer.assign([where])  # the session's partition of the replies, from now on

        record = user_turn(session, trace, "我要报上个月去深圳的差旅费")
        value = encode(record, schemas)
        sent = await produce(
            producer, topic_in, key, value, signed_headers(record, topic_in, value)
        )
        assert sent.partition() == partition_of(key, count)  # librdkafka's murmur2 = the bus's

        reply = await reply_to(consumer, trace.encode())
    finally:
        await asyncio.to_thread(consumer.close)
    data = reply.value()
    assert reply.key() == key
    assert data[:2] == b"\xc3\x01" and data[2:10] in schemas
    assert signer_of(topic_out, reply.key(), data, reply.headers()) == "conversation"
    read = fastavro.schemaless_reader(
        io.BytesIO(data[10:]), schemas[data[2:10]], return_record_name=True
    )
    envelope = cast(dict[str, Any], read)
    name, body = envelope["payload"]["body"]
    assert (envelope["source"], envelope["session_id"]) == ("conversation:S2", session)
    assert name == "hermes.mcp.Reply"
    assert body["text"].startswith("好的，已为您发起"), body["text"]

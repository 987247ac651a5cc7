"""The indexer marks what its signature does not prove: a forged success is not a success.

On a real broker, into each trace index (SQLite, Elasticsearch): a genuine reply, an
unsigned forgery of it, and a reply signed by an app's key but claiming the conversation.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaProducer

from hermesbus.client import Client
from hermesbus.codec import default_codec
from hermesbus.identity import Signer
from hermesbus.topics import CONVERSATION_OUT
from hermesbus.trace.index import Search, TraceIndex
from tests import signing
from tests.builders import reply_to, turn
from tests.integration.stacks import catalog_topics, indexer_on

from .conftest import searchable

pytestmark = pytest.mark.kafka


async def test_unsigned_and_impersonating_records_are_marked_unverified(
    broker: str, trace_index: TraceIndex, unique: str
) -> None:
    prefix = f"unv-{unique}."
    kafka = await catalog_topics(broker, prefix)
    asked = turn(session_id="s-unv", trace_id="t-unv")
    codec, topic, key = default_codec(), prefix + CONVERSATION_OUT, b"s-unv"
    async with Client(kafka, topic_prefix=prefix, identity="conversation") as bus:
        await bus.send(reply_to(asked, "genuine"))
    forged = codec.encode(reply_to(asked, "已提交报销单 EXP-FAKE"))
    producer = AIOKafkaProducer(bootstrap_servers=broker, enable_idempotence=False)
    await producer.start()
    try:
        await producer.send_and_wait(topic, forged, key=key)
        app = Signer("app", signing.keys()).sign(topic, key, forged, ())
        await producer.send_and_wait(topic, forged, key=key, headers=list(app))
    finally:
        await producer.stop()
    indexer = indexer_on(trace_index, broker, prefix)
    async with indexer:
        async with asyncio.timeout(60):
            while indexer.stats.indexed < 3:
                await asyncio.sleep(0.1)
    assert indexer.stats.unverified == 2
    await searchable(trace_index)
    docs = sorted(
        await trace_index.search(Search(session_id="s-unv", limit=10)),
        key=lambda d: d["messaging"]["kafka"]["message"]["offset"],
    )
    assert [d["hermes"]["signature"]["verified"] for d in docs] == [True, False, False]
    assert [d["service"]["name"] for d in docs] == ["conversation", "unverified", "unverified"]
    assert [d["event"]["outcome"] for d in docs] == ["success", "unknown", "unknown"]
    assert [d["hermes"]["signature"]["signer"] for d in docs] == ["conversation", None, "app"]
    assert docs[1]["hermes"]["signature"]["error"].startswith("identity.unsigned")
    assert docs[2]["hermes"]["signature"]["error"].startswith("identity.impersonation")
    assert docs[1]["message"].startswith("unverified")
    believed = await trace_index.search(Search(component="conversation", session_id="s-unv"))
    assert len(believed) == 1

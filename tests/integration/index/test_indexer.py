"""The indexer on a real broker and a real Elasticsearch: what cannot be indexed is not lost.

Bytes that do not decode are indexed with their error; a document Elasticsearch refuses
(here: a 40 KB key, an immense keyword term) is dead-lettered with the reason and kept
as a stripped copy; its dead letter, refused too, is not dead-lettered again.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from hermesbus.codec import default_codec
from hermesbus.connectors.elasticsearch import ElasticsearchTraceIndex
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.headers import DLQ_ERROR_MESSAGE, DLQ_ORIGIN_TOPIC, envelope_headers, header
from hermesbus.index import Indexer, Search, archived
from hermesbus.runtime import RuntimeSettings
from hermesbus.topics import CONVERSATION_IN, DLQ, Catalog
from tests.builders import turn

from .conftest import es_config

pytestmark = [pytest.mark.kafka, pytest.mark.elasticsearch]

HUGE_KEY = b"k" * 40_000


async def _send(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=4_000_000)
    await producer.start()
    try:
        for key, value in records:
            env = turn(message_id=f"m-{uuid.uuid4().hex[:6]}", trace_id="t-refused")
            await producer.send_and_wait(topic, value, key=key, headers=envelope_headers(env))
    finally:
        await producer.stop()


async def test_undecodable_and_refused_records_are_kept_and_dead_lettered(
    broker: str, elasticsearch_url: str, unique: str
) -> None:
    prefix = f"ix-{unique}."
    kafka = KafkaConfig(bootstrap=broker)
    async with KafkaAdmin(kafka) as admin:
        await admin.create(list(Catalog.load().with_overrides(prefix=prefix)))
    good = default_codec().encode(turn(session_id="s1"))
    records = [(b"s1", good), (b"s1", b"\x00junk"), (HUGE_KEY, good)]
    await _send(broker, prefix + CONVERSATION_IN, records)
    settings = RuntimeSettings()
    if broker == os.environ.get("HERMES_TEST_EMBEDDED_BOOTSTRAP"):
        settings = settings.for_embedded_broker()
    index = ElasticsearchTraceIndex(es_config(elasticsearch_url, unique))
    indexer = Indexer(index, kafka=kafka, prefix=prefix, settings=settings, group_id=prefix)
    async with index, indexer:
        async with asyncio.timeout(60):
            while indexer.stats.refused < 2 or indexer.stats.indexed < 4:
                await asyncio.sleep(0.1)
        assert indexer.stats.undecodable == 1
    async with ElasticsearchTraceIndex(es_config(elasticsearch_url, unique), install=False) as es:
        await es.refresh()
        docs = await es.search(Search(limit=100))
    by_action: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        by_action.setdefault(doc["event"]["action"], []).append(doc)
    assert len(by_action["UserTurn"]) == 1
    (junk,) = by_action["undecodable"]
    assert archived(junk).value == b"\x00junk"
    refused = by_action["index_refused"]  # the record and its dead letter: both kept
    assert sorted(archived(d).topic for d in refused) == [prefix + CONVERSATION_IN, prefix + DLQ]
    assert all(archived(d).key == HUGE_KEY and archived(d).value == good for d in refused)
    letter = next(d for d in refused if archived(d).topic == prefix + DLQ)
    headers = list(archived(letter).headers)
    assert header(headers, DLQ_ORIGIN_TOPIC) == prefix + CONVERSATION_IN
    assert "the trace index refused the document" in (header(headers, DLQ_ERROR_MESSAGE) or "")

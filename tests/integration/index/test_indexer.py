"""The indexer on a real broker and a real Elasticsearch: what cannot be indexed is not lost.

Bytes that do not decode are indexed with their error; a document Elasticsearch refuses
(here: a 40 KB key, an immense keyword term) is dead-lettered with the reason and kept
as a stripped copy; its dead letter, refused too, is not dead-lettered again.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiokafka import AIOKafkaProducer

from hermesbus.codec import default_codec
from hermesbus.connectors.elasticsearch import ElasticsearchTraceIndex
from hermesbus.contract.headers import DLQ_ERROR_MESSAGE, DLQ_ORIGIN_TOPIC, envelope_headers, header
from hermesbus.errors import TraceIndexError
from hermesbus.topics import CONVERSATION_IN, DLQ
from hermesbus.trace.index import (
    Search,
    archived,
)
from tests.builders import turn
from tests.integration.stacks import catalog_topics, indexer_on

from .conftest import documents_of, es_config, record_of
from .proxy import Relay

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
    await catalog_topics(broker, prefix)
    good = default_codec().encode(turn(session_id="s1"))
    records = [(b"s1", good), (b"s1", b"\x00junk"), (HUGE_KEY, good)]
    await _send(broker, prefix + CONVERSATION_IN, records)
    index = ElasticsearchTraceIndex(es_config(elasticsearch_url, unique))
    indexer = indexer_on(index, broker, prefix)
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


async def test_an_elasticsearch_away_at_start_gets_its_templates_before_the_first_write(
    elasticsearch_url: str, unique: str
) -> None:
    """``up`` starts while Elasticsearch is away; the data stream is made with our mappings."""
    target = urlsplit(elasticsearch_url)
    relay = Relay(target.hostname or "127.0.0.1", target.port or 9200)
    await relay.start()
    url = relay.url
    await relay.stop()  # away
    index = ElasticsearchTraceIndex(es_config(url, unique))
    async with index:  # starts anyway: the indexer will wait for it
        doc = documents_of([record_of(turn(), "hermes.conversation.in", 0, 1_700_000_000_000)])[0]
        with pytest.raises(TraceIndexError) as refused:
            await index.write([doc])
        assert refused.value.retriable
        await relay.start()  # back, on the same port
        try:
            assert (await index.write([doc])).stored == [doc["_id"]]
            mapping = await index.client.indices.get_mapping(index=index.stream)
        finally:
            await relay.stop()
    (backing,) = mapping.body.values()
    assert backing["mappings"]["dynamic"] == "false"  # the template's, not the built-in logs one
    assert backing["mappings"]["properties"]["trace"]["properties"]["id"]["type"] == "keyword"

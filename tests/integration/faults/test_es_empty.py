"""Elasticsearch that comes back empty under a running indexer, and doctor on a stream
mapped without the template.

A second Elasticsearch takes a minute and a gigabyte to start, so the shared one plays
both parts: the indexer reaches it through a relay that is taken down (the outage), and
meanwhile the test deletes what a server that lost its data lacks: the templates. Each
test has a dataset of its own (``logs-f<unique>-default``), so its templates
(``hermes-envelopes-f<unique>``) are its own too and no other test's are touched; the
lifecycle policy, the same for every dataset, is left in place. The test server has no
data stream module (no GET or DELETE ``_data_stream``, no built-in ``logs`` template), so
the stream cannot be deleted: it is one nothing was written to before the outage, and
a write into it without the template makes a plain, dynamically mapped index, as the
review saw.
"""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from aiokafka import AIOKafkaProducer

from hermesbus.codec import default_codec
from hermesbus.connectors.elasticsearch import ElasticsearchConfig, ElasticsearchTraceIndex
from hermesbus.connectors.elasticsearch import index as es_index
from hermesbus.connectors.elasticsearch.templates import (
    rollup_template_name,
    template_name,
    wrongly_mapped,
)
from hermesbus.contract.headers import envelope_headers
from hermesbus.topics import CONVERSATION_IN
from hermesbus.trace.index import Indexer
from tests.builders import turn
from tests.cli_process import Ran, clean_env, hermesbus
from tests.integration.index.conftest import documents_of, record_of
from tests.integration.index.proxy import Relay
from tests.integration.stacks import catalog_topics, indexer_on

pytestmark = pytest.mark.elasticsearch

INDEXED_S = 120.0
"""How long the indexer may take to index what was sent (a slow, busy machine)."""
POLL_S = 0.1


async def _send(bootstrap: str, topic: str, session: str, count: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for _ in range(count):
            envelope = turn(session_id=session, message_id=f"m-{uuid.uuid4().hex[:8]}")
            value = default_codec().encode(envelope)
            headers = envelope_headers(envelope)
            await producer.send_and_wait(topic, value, key=session.encode(), headers=headers)
    finally:
        await producer.stop()


async def _emptied(index: ElasticsearchTraceIndex) -> None:
    """What Elasticsearch back without its data lacks: the templates (and the stream)."""
    client = index.client
    await client.indices.delete_index_template(name=index.template)
    await client.indices.delete_index_template(name=rollup_template_name(index.template))
    for suffix in ("@mappings", "@settings"):
        await client.cluster.delete_component_template(name=index.template + suffix)


async def _indexed(indexer: Indexer, count: int) -> None:
    async with asyncio.timeout(INDEXED_S):
        while indexer.stats.indexed < count:
            await asyncio.sleep(POLL_S)


@pytest.mark.kafka
async def test_the_indexer_puts_its_templates_back_before_writing_after_an_outage(
    broker: str, elasticsearch_url: str, unique: str
) -> None:
    prefix = f"ese-{unique}."
    await catalog_topics(broker, prefix)
    target = urlsplit(elasticsearch_url)
    relay = Relay(target.hostname or "127.0.0.1", target.port or 9200)
    await relay.start()
    config = ElasticsearchConfig(url=relay.url, data_stream=f"logs-f{unique}-default")
    direct = ElasticsearchConfig(url=elasticsearch_url, data_stream=config.data_stream)
    topic = prefix + CONVERSATION_IN
    index = ElasticsearchTraceIndex(config)
    indexer = indexer_on(index, broker, prefix)
    try:
        async with index, indexer, ElasticsearchTraceIndex(direct, install=False) as es:
            await relay.stop()  # away ...
            await _emptied(es)  # ... and back without its data
            await _send(broker, topic, "after", 4)
            while indexer.stats.outages == 0:  # it tried, and found it away
                await asyncio.sleep(POLL_S)
            await relay.start()  # back, on the same port
            await _indexed(indexer, 4)
            await es.refresh()
            mapping = await es.client.indices.get_mapping(index=es.stream)
            after = await es.by_session("after")
            state = await es.state()
    finally:
        await relay.stop()
    assert indexer.stats.refused == 0
    (backing,) = mapping.body.values()  # one new backing index, made from the template
    assert wrongly_mapped(backing["mappings"]) == []
    assert len(after) == 4  # searchable: no 400 search_phase_execution_exception
    assert state.templates[0] == (template_name(f"f{unique}"), 250)
    assert state.wrong == ()


@pytest.mark.kafka
async def test_templates_gone_without_an_outage_seen_are_put_back_before_a_write(
    broker: str, elasticsearch_url: str, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restart quicker than the indexer's writes: no write failed, yet the templates are
    checked (every TEMPLATE_CHECK_S; here before every write) and put back."""
    monkeypatch.setattr(es_index, "TEMPLATE_CHECK_S", 0.0)
    prefix = f"esq-{unique}."
    await catalog_topics(broker, prefix)
    config = ElasticsearchConfig(url=elasticsearch_url, data_stream=f"logs-q{unique}-default")
    index = ElasticsearchTraceIndex(config)
    indexer = indexer_on(index, broker, prefix)
    async with index, indexer:
        await _emptied(index)
        await _send(broker, prefix + CONVERSATION_IN, "quick", 2)
        await _indexed(indexer, 2)
        await index.refresh()
        state = await index.state()
        found = await index.by_session("quick")
    assert indexer.stats.refused == 0 and indexer.stats.outages == 0
    assert state.wrong == () and len(found) == 2


def _doctor(config: ElasticsearchConfig, tmp_path: Path) -> tuple[str, str, Ran]:
    """doctor's trace index line: its status, and the line with its fix."""
    env = clean_env(
        tmp_path / "home",
        HERMES_ELASTICSEARCH_URL=str(config.url),
        HERMES_ELASTICSEARCH_DATA_STREAM=config.data_stream,
    )
    ran = hermesbus("doctor", env=env, cwd=tmp_path, timeout=120)
    lines = ran.out.splitlines()
    for n, line in enumerate(lines):
        status, _, rest = line.partition("  ")
        if rest.strip().startswith("trace index  "):
            fix = lines[n + 1] if n + 1 < len(lines) and "fix:" in lines[n + 1] else ""
            return status.strip(), rest.strip() + " " + fix.strip(), ran
    raise AssertionError(f"no trace index line in:\n{ran.out}")


def _commands(said: str) -> list[list[str]]:
    """The curl commands of doctor's fix, as argument lists."""
    fix = said.partition("fix:")[2].partition(" (the deleted")[0]
    steps = [step.strip() for step in fix.split("; then ")]
    return [shlex.split(step) for step in steps if step.startswith("curl ")]


async def _run(command: list[str]) -> None:
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr
    assert b'"acknowledged":true' in done.stdout, done.stdout


@pytest.mark.usefixtures("broker_binary")
async def test_doctor_fails_a_plain_index_in_the_streams_place_and_its_fix_repairs_it(
    elasticsearch_url: str, unique: str, tmp_path: Path
) -> None:
    """A write before the template, on a server with no data stream template of its own,
    makes a plain index with dynamic mappings under the stream's name: doctor fails it,
    and the command it gives (delete it) leaves the name to the template's stream."""
    config = ElasticsearchConfig(url=elasticsearch_url, data_stream=f"logs-p{unique}-default")
    (doc,) = documents_of([record_of(turn(session_id="p1"), "hermes.tool", 0, 1_700_000_000_000)])
    async with ElasticsearchTraceIndex(config, install=False) as raw:
        source = {k: v for k, v in doc.items() if k != "_id"}
        await raw.client.create(index=raw.stream, id=str(doc["_id"]), document=source)
    async with ElasticsearchTraceIndex(config) as index:  # what up does: the template
        (wrong,) = (await index.state()).wrong
    assert (wrong.name, wrong.write_index, wrong.data_stream) == (config.data_stream, True, False)
    assert "dynamic mapping on" in wrong.differences[1]
    status, said, ran = await asyncio.to_thread(_doctor, config, tmp_path)
    assert status == "FAIL", ran.out
    assert f"mapped without the index template hermes-envelopes-p{unique}" in said
    assert f"{config.data_stream} (a plain index, not a data stream; dynamic mapping" in said
    assert "400 search_phase_execution_exception" in said and "_rollover" not in said
    (delete,) = _commands(said)
    assert delete == [
        "curl",
        "-X",
        "DELETE",
        f"{elasticsearch_url.rstrip('/')}/{config.data_stream}",
    ]
    await _run(delete)
    async with ElasticsearchTraceIndex(config) as index:
        await index.write([doc])
        assert (await index.state()).wrong == ()
    status, said, ran = await asyncio.to_thread(_doctor, config, tmp_path)
    assert status == "ok", ran.out


@pytest.mark.usefixtures("broker_binary")
async def test_doctor_fails_a_stream_mapped_without_the_template_and_its_fix_repairs_it(
    elasticsearch_url: str, unique: str, tmp_path: Path
) -> None:
    """A data stream made by another template (a built-in ``logs`` one, on a server back
    empty) before ours: doctor fails it with the roll-over and delete commands; ``up``
    (the template back) rolls it over itself; the delete doctor gives then repairs it."""
    config = ElasticsearchConfig(url=elasticsearch_url, data_stream=f"logs-w{unique}-default")
    (doc,) = documents_of([record_of(turn(session_id="w1"), "hermes.tool", 0, 1_700_000_000_000)])
    other = f"other-{unique}"
    async with ElasticsearchTraceIndex(config, install=False) as raw:
        await raw.client.indices.put_index_template(  # below ours: it makes the stream
            name=other, index_patterns=[config.data_stream], priority=200, data_stream={}
        )  # only while ours is not there (ES keeps it while the stream is its)
        source = {k: v for k, v in doc.items() if k != "_id"}
        await raw.client.create(index=raw.stream, id=str(doc["_id"]), document=source)
        (wrong,) = (await raw.state()).wrong
    assert wrong.write_index and wrong.data_stream and wrong.name.startswith(".ds-")
    status, said, ran = await asyncio.to_thread(_doctor, config, tmp_path)
    assert status == "FAIL", ran.out
    assert f"backing indices mapped without the index template hermes-envelopes-w{unique}" in said
    assert wrong.name in said and "400 search_phase_execution_exception" in said
    url = elasticsearch_url.rstrip("/")
    assert f"curl -X POST '{url}/{config.data_stream}/_rollover'" in said
    assert f"curl -X DELETE '{url}/{wrong.name}'" in said
    assert ran.code == 1

    async with ElasticsearchTraceIndex(config) as index:  # what up does: template, roll-over
        (still,) = (await index.state()).wrong
    assert still.name == wrong.name and not still.write_index
    status, said, _ = await asyncio.to_thread(_doctor, config, tmp_path)
    assert status == "FAIL" and "_rollover" not in said
    (delete,) = _commands(said)
    await _run(delete)
    status, said, ran = await asyncio.to_thread(_doctor, config, tmp_path)
    assert status == "ok", ran.out
    assert f"index template hermes-envelopes-w{unique} (priority 250)" in said
    async with ElasticsearchTraceIndex(config, install=False) as raw:
        await raw.client.indices.delete_index_template(name=other)  # ours makes it now

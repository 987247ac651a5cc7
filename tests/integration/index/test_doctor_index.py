"""``hermesbus doctor`` on the trace index: the real Elasticsearch and its template, and how
far the indexer group is behind the topics of a real broker."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from hermesbus.compose.broker import free_port
from hermesbus.connectors.elasticsearch import ElasticsearchConfig, ElasticsearchTraceIndex
from hermesbus.connectors.sqlite.index import SqliteTraceIndex
from hermesbus.identity import KEYS_FILE_ENV
from hermesbus.runtime import RuntimeSettings
from hermesbus.trace.index import INDEXER_GROUP, Indexer
from tests import signing
from tests.builders import turn
from tests.cli_process import Ran, clean_env, hermesbus
from tests.integration.stacks import catalog_topics

from .conftest import documents_of, es_config, record_of

TOPIC = "hermes.tool"


def _doctor(*args: str, env: dict[str, str], cwd: Path) -> Ran:
    return hermesbus("doctor", *args, env=env, cwd=cwd, timeout=120)


def _line(out: str, name: str) -> tuple[str, str]:
    """The status of check ``name`` and the rest of its line (with its fix line, if any)."""
    lines = out.splitlines()
    for n, line in enumerate(lines):
        status, _, rest = line.partition("  ")
        if rest.strip().startswith(name + "  "):
            fix = lines[n + 1] if n + 1 < len(lines) and "fix:" in lines[n + 1] else ""
            return status.strip(), rest.strip() + " " + fix.strip()
    raise AssertionError(f"no {name} line in:\n{out}")


def _es_env(tmp_path: Path, config: ElasticsearchConfig) -> dict[str, str]:
    return clean_env(
        tmp_path / "home",
        HERMES_ELASTICSEARCH_URL=str(config.url),
        HERMES_ELASTICSEARCH_DATA_STREAM=config.data_stream,
    )


@pytest.mark.elasticsearch
async def test_the_elasticsearch_index_its_documents_and_template_are_reported(
    broker_binary: str, elasticsearch_url: str, unique: str, tmp_path: Path
) -> None:
    config = es_config(elasticsearch_url, unique)
    records = [record_of(turn(session_id="s1"), "hermes.conversation.in", n, 1_000 + n)
               for n in range(3)]  # fmt: skip
    async with ElasticsearchTraceIndex(config) as index:
        await index.write(documents_of(records))
        await index.refresh()
    result = await asyncio.to_thread(_doctor, env=_es_env(tmp_path, config), cwd=tmp_path)
    status, said = _line(result.out, "trace index")
    assert status == "ok", result.out
    assert f"Elasticsearch at {elasticsearch_url} ({config.data_stream}): 3 envelopes" in said
    assert "index template hermes-envelopes (priority 250)" in said
    assert result.code == 0, result.out + result.err


@pytest.mark.elasticsearch
async def test_a_template_that_wins_over_ours_fails_naming_it(
    broker_binary: str, elasticsearch_url: str, unique: str, tmp_path: Path
) -> None:
    config = es_config(elasticsearch_url, unique)
    rival = f"rival-{unique}"
    async with ElasticsearchTraceIndex(config) as index:  # ours installed, then a rival
        await index.client.indices.put_index_template(
            name=rival, index_patterns=[config.data_stream], priority=900, data_stream={}
        )
        try:
            result = await asyncio.to_thread(_doctor, env=_es_env(tmp_path, config), cwd=tmp_path)
        finally:
            await index.client.indices.delete_index_template(name=rival)
    status, said = _line(result.out, "trace index")
    assert status == "FAIL", result.out
    assert f"the index template {rival} (priority 900) wins over hermes-envelopes" in said
    assert f"fix: give {rival} a priority below 250" in said
    assert result.code == 1


@pytest.mark.elasticsearch
def test_a_stream_no_template_covers_yet_is_a_warning(
    broker_binary: str, elasticsearch_url: str, unique: str, tmp_path: Path
) -> None:
    """A dataset of its own: nothing of ours matches it until ``up`` installs the template
    (doctor installs nothing)."""
    config = ElasticsearchConfig(url=elasticsearch_url, data_stream=f"logs-doc{unique}-default")
    result = _doctor(env=_es_env(tmp_path, config), cwd=tmp_path)
    status, said = _line(result.out, "trace index")
    assert status == "warn", result.out
    assert f"the index template hermes-envelopes-doc{unique} is not installed yet" in said
    assert "`hermesbus up` installs it before the first write" in said


def test_an_unreachable_elasticsearch_fails_without_printing_its_password(
    broker_binary: str, tmp_path: Path
) -> None:
    url = f"http://hermes:s3cret-pw@127.0.0.1:{free_port()}"
    env = clean_env(tmp_path / "home", HERMES_ELASTICSEARCH_URL=url)
    result = _doctor(env=env, cwd=tmp_path)
    status, said = _line(result.out, "trace index")
    assert status == "FAIL", result.out
    assert "cannot reach Elasticsearch at http://127.0.0.1:" in said
    assert "fix: start it, or fix HERMES_ELASTICSEARCH_URL" in said
    assert "s3cret-pw" not in result.out + result.err
    assert "Traceback" not in result.out + result.err
    assert result.code == 1


async def _produce(bootstrap: str, topic: str, count: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for n in range(count):
            await producer.send_and_wait(topic, f"not an envelope {n}".encode(), key=b"s1")
    finally:
        await producer.stop()


@pytest.mark.kafka
async def test_the_indexing_check_counts_what_the_indexer_has_not_committed(
    broker: str, unique: str, tmp_path: Path
) -> None:
    """Five records nobody indexed: a warning naming them; after the indexer ran (its own
    group, the prefix's, as ``up`` runs it): every record indexed."""
    prefix = f"docix-{unique}."
    kafka = await catalog_topics(broker, prefix)
    await _produce(broker, prefix + TOPIC, 5)
    env = clean_env(tmp_path / "home", **{KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV]})
    options = ("--bootstrap", broker, "--prefix", prefix)
    before = await asyncio.to_thread(_doctor, *options, env=env, cwd=tmp_path)
    status, said = _line(before.out, "indexing")
    assert status == "warn", before.out
    assert f"(group {prefix}{INDEXER_GROUP}) has indexed nothing yet: 5 records wait" in said
    assert f"{prefix}{TOPIC} 5" in said
    settings = RuntimeSettings(session_timeout_ms=6_000, heartbeat_interval_ms=1_000)
    async with SqliteTraceIndex(tmp_path / "index.sqlite3") as index:
        indexer = Indexer(
            index,
            kafka=kafka,
            prefix=prefix,
            settings=settings,
            keyring=signing.keys,
            group_id=prefix + INDEXER_GROUP,
        )
        async with indexer:
            async with asyncio.timeout(60):
                while indexer.stats.indexed < 5:
                    await asyncio.sleep(0.05)
        assert indexer.stats.undecodable == 5
    after = await asyncio.to_thread(_doctor, *options, env=env, cwd=tmp_path)
    status, said = _line(after.out, "indexing")
    assert status == "ok", after.out
    assert "has indexed every record of the 9 topics" in said

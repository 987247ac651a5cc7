"""``/metrics``: what a processor and the indexer count, in Prometheus's text format, over
HTTP. (That the figures move with traffic on a real bus: tests/integration/test_telemetry.py.)"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hermesbus.compose import metrics
from hermesbus.compose.metrics import MetricsSettings, serve_metrics
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.connectors.sqlite.index import SqliteTraceIndex
from hermesbus.errors import ConfigError
from hermesbus.runtime import HandlerInput, Outcome, Processor, RuntimeSettings
from hermesbus.trace.index import Indexer
from tests import signing

KAFKA = KafkaConfig.model_construct(bootstrap="127.0.0.1:9")
SETTINGS = RuntimeSettings.model_construct()


async def nothing(_inp: HandlerInput) -> Outcome:
    return Outcome()


def _parts(tmp_path: Path) -> list[Processor | Indexer]:
    store = SqliteStateStore(tmp_path / "state.sqlite3")
    keys = signing.keys()
    conversation = Processor(
        "conversation", nothing, ["in"], store=store, kafka=KAFKA, settings=SETTINGS, keys=keys
    )
    index = SqliteTraceIndex(tmp_path / "index.sqlite3")
    indexer = Indexer(index, kafka=KAFKA, settings=SETTINGS, keys=keys)
    return [conversation, indexer]


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def _get(url: str, path: str = "/metrics", method: str = "GET") -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.request(method, url.removesuffix("/metrics") + path)


async def test_a_processors_counters_are_served_by_component_topic_and_partition(
    tmp_path: Path,
) -> None:
    parts = _parts(tmp_path)
    conversation = parts[0]
    assert isinstance(conversation, Processor)
    conversation.stats.processed_by[("hermes.conversation.in", 3)] = 5
    conversation.stats.processed = 5
    conversation.stats.dead_letters = 2
    for ms in (4.0, 40.0, 400.0):
        conversation.stats.handler_ms.observe(ms)

    async with serve_metrics(MetricsSettings(), lambda: parts) as served:
        assert served is not None and served.url.startswith("http://127.0.0.1:")
        answer = await _get(served.url)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=")
    got = _samples(answer.text)
    component = ("component", "conversation")
    where = (component, ("partition", "3"), ("topic", "hermes.conversation.in"))
    assert got[("hermesbus_records_processed_total", where)] == 5
    assert got[("hermesbus_dead_letters_total", (component,))] == 2
    assert got[("hermesbus_retries_total", (component,))] == 0
    assert got[("hermesbus_handler_duration_seconds_count", (component,))] == 3
    assert got[("hermesbus_handler_duration_seconds_sum", (component,))] == pytest.approx(0.444)
    assert got[("hermesbus_handler_duration_seconds_bucket", (component, ("le", "0.05")))] == 2
    assert got[("hermesbus_handler_duration_seconds_bucket", (component, ("le", "+Inf")))] == 3
    assert got[("hermesbus_records_in_flight", (component,))] == 0
    indexer = (("component", "indexer"), ("outcome", "indexed"))
    assert got[("hermesbus_indexer_documents_total", indexer)] == 0
    assert any(name == "process_resident_memory_bytes" for name, _ in got)


async def test_only_get_metrics_is_answered(tmp_path: Path) -> None:
    async with serve_metrics(MetricsSettings(), list) as served:
        assert served is not None
        assert (await _get(served.url, "/")).status_code == 404
        assert (await _get(served.url, "/metrics", "POST")).status_code == 405
        got = await _get(served.url)
        head = await _get(served.url, "/metrics?x=1", "HEAD")
        assert (head.status_code, head.content) == (200, b"")
        # a HEAD says the length a GET's body has (process figures move a little between)
        assert abs(int(head.headers["content-length"]) - len(got.content)) < 200


async def test_a_failing_read_is_a_500_and_the_endpoint_goes_on(tmp_path: Path) -> None:
    def broken() -> list[Processor | Indexer]:
        raise RuntimeError("a figure could not be read")

    async with serve_metrics(MetricsSettings(), broken) as served:
        assert served is not None
        assert (await _get(served.url)).status_code == 500
        assert (await _get(served.url, "/")).status_code == 404


async def test_a_scraper_that_never_finishes_its_request_is_hung_up_on_and_holds_no_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics, "_EXCHANGE_TIMEOUT_S", 0.5)
    async with serve_metrics(MetricsSettings(), list) as served:
        assert served is not None
        reader, writer = await asyncio.open_connection(served.host, served.port)
        writer.write(b"GET /metrics HTTP/1.1\r\n")  # and nothing more
        await writer.drain()
        assert (await _get(served.url)).status_code == 200
        async with asyncio.timeout(30):  # not about timing: it is closed, eventually
            assert await reader.read() == b""
        writer.close()


async def test_connections_past_the_cap_are_closed_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics, "_MAX_CONNECTIONS", 2)
    async with serve_metrics(MetricsSettings(), list) as served:
        assert served is not None
        held = [await asyncio.open_connection(served.host, served.port) for _ in range(2)]
        await asyncio.sleep(0.2)  # both are being served (waiting for their requests)
        reader, writer = await asyncio.open_connection(served.host, served.port)
        async with asyncio.timeout(30):
            assert await reader.read() == b""  # the third: closed without an answer
        writer.close()
        for _, w in held:
            w.close()
        async with asyncio.timeout(30):  # the held ones gone, it serves again
            while True:
                try:
                    if (await _get(served.url)).status_code == 200:
                        break
                except httpx.HTTPError:
                    await asyncio.sleep(0.1)


async def test_a_port_in_use_is_refused_naming_it_and_disabled_serves_nothing() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"metrics: cannot listen on 127.0.0.1:{port}"):
            async with serve_metrics(MetricsSettings(port=port), list):
                pass
    async with serve_metrics(MetricsSettings(enabled=False), list) as served:
        assert served is None


def test_the_settings_read_their_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_METRICS_PORT", "9464")
    monkeypatch.setenv("HERMES_METRICS_HOST", "::1")
    read = MetricsSettings()
    assert (read.port, read.host, read.enabled) == (9464, "::1", True)
    monkeypatch.setenv("HERMES_METRICS_HOST", "")  # asyncio would listen on every interface
    with pytest.raises(ValueError, match="at least 1 character"):
        MetricsSettings()
    monkeypatch.setenv("HERMES_METRICS_HOST", "127.0.0.1")
    monkeypatch.setenv("HERMES_METRICS_PORT", "70000")
    with pytest.raises(ValueError, match="65535"):
        MetricsSettings()

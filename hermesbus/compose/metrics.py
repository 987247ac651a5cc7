"""Prometheus metrics: what a running bus's processors and indexer count, served at
``/metrics`` for a scraper.

Every process that runs a stack (``hermesbus up``, a redrive's sandbox) serves them, on the
loopback interface and a free port unless ``HERMES_METRICS_PORT``/``HERMES_METRICS_HOST``
say otherwise (``HERMES_METRICS_ENABLED=false``: none); the address is said at the start.
The values are read from the processors' own counters when a scrape asks, on the event
loop the processors run on, so a scrape sees one moment and costs the bus nothing between
scrapes. Names follow Prometheus's conventions (``_total`` counters, ``_seconds``
durations) and carry the labels ``component`` (the processor's consumer group), ``topic``
and ``partition`` where the figure is per partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.process_collector import ProcessCollector
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from hermesbus.errors import ConfigError
from hermesbus.runtime import Processor
from hermesbus.trace.index import Indexer

__all__ = ["BusCollector", "MetricsServer", "MetricsSettings", "serve_metrics"]

log = logging.getLogger(__name__)

_EXCHANGE_TIMEOUT_S = 5.0
"""A scraper that has not sent its request and read the answer in this long is hung up on."""
_MAX_CONNECTIONS = 16
"""Connections served at once; one past them is closed at once (a scraper asks one at a
time: more is a client that holds connections open)."""
_MAX_REQUEST = 8192
"""Bytes of request line and headers read at most; a longer request is refused."""

_COUNTERS: dict[str, tuple[str, str]] = {
    "retries": ("hermesbus_retries", "Handler failures retried (sent again with backoff)."),
    "dead_letters": ("hermesbus_dead_letters", "Records sent to the dead-letter topic."),
    "refused": (
        "hermesbus_refused",
        "Records whose signature or signer was refused (dead-lettered, never run).",
    ),
    "misrouted": ("hermesbus_misrouted", "Records on another partition than their key's."),
    "fenced": (
        "hermesbus_fenced_writes",
        "State writes that lost the compare-and-set to another worker (a zombie fenced).",
    ),
    "duplicates": ("hermesbus_duplicates", "Records skipped as already applied."),
    "held": ("hermesbus_outage_holds", "Records a backend outage held in place a while."),
    "undecodable": ("hermesbus_undecodable", "Records that did not decode."),
    "timers_fired": ("hermesbus_timers_fired", "Durable timers fired."),
    "aborted": ("hermesbus_transactions_aborted", "Transactions aborted (exactly-once mode)."),
}
"""ProcessorStats counter -> (metric name without ``_total``, help); ``processed`` is served
per partition, apart."""
_INDEXED: tuple[str, ...] = ("indexed", "existing", "undecodable", "unverified", "refused")
"""IndexerStats counters served as ``hermesbus_indexer_documents_total{outcome=...}``."""


class MetricsSettings(BaseSettings):
    """Where a process serves ``/metrics`` (``HERMES_METRICS_*``)."""

    model_config = SettingsConfigDict(env_prefix="HERMES_METRICS_", frozen=True, extra="ignore")

    enabled: bool = True
    """``HERMES_METRICS_ENABLED=false``: no endpoint."""
    host: str = Field(default="127.0.0.1", min_length=1)
    """The interface to listen on: loopback by default (set ``0.0.0.0`` for a scraper on
    another machine; the figures name topics and groups, nothing secret)."""
    port: int = Field(default=0, ge=0, le=65535)
    """The port; 0 (the default) takes a free one, said at the start (several buses on one
    machine never collide). A fleet sets one per process for its scrape config."""


class BusCollector:
    """The figures of the processors and indexer ``parts()`` gives, read at each scrape."""

    def __init__(self, parts: Callable[[], Iterable[Processor | Indexer]]) -> None:
        self._parts = parts

    def describe(self) -> list[Metric]:
        return []  # read at scrape time only (registered with auto_describe off)

    def collect(self) -> Iterator[Metric]:
        processors = [p for p in self._parts() if isinstance(p, Processor)]
        indexers = [p for p in self._parts() if isinstance(p, Indexer)]
        yield from _processor_metrics(processors)
        yield from _indexer_metrics(indexers)


def _processor_metrics(processors: list[Processor]) -> Iterator[Metric]:
    processed = CounterMetricFamily(
        "hermesbus_records_processed",
        "Records a processor's handler ran to a saved state change.",
        labels=["component", "topic", "partition"],
    )
    latency = HistogramMetricFamily(
        "hermesbus_handler_duration_seconds",
        "How long a processor's handler took per record (failures too).",
        labels=["component"],
    )
    in_flight = GaugeMetricFamily(
        "hermesbus_records_in_flight", "Records a worker is running now.", labels=["component"]
    )
    waiting = GaugeMetricFamily(
        "hermesbus_records_waiting",
        "Records fetched and not yet started (the backlog inside the process).",
        labels=["component"],
    )
    due = GaugeMetricFamily(
        "hermesbus_timers_due",
        "Timers found due at the timer loop's last pass (up to 500 a pass).",
        labels=["component"],
    )
    lag = GaugeMetricFamily(
        "hermesbus_commit_lag_records",
        "Records past a partition's commit point (its end as last fetched, less the "
        "offset committed).",
        labels=["component", "topic", "partition"],
    )
    counters = {
        field: CounterMetricFamily(name, text, labels=["component"])
        for field, (name, text) in _COUNTERS.items()
    }
    for p in processors:
        stats = p.stats
        for (topic, partition), n in sorted(stats.processed_by.items()):
            processed.add_metric([p.name, topic, str(partition)], n)
        buckets = [(_le(bound / 1000), n) for bound, n in stats.handler_ms.cumulative()]
        latency.add_metric([p.name], buckets, stats.handler_ms.sum / 1000)
        in_flight.add_metric([p.name], p.in_flight)
        waiting.add_metric([p.name], p.waiting)
        due.add_metric([p.name], stats.timers_due)
        for tp, behind in sorted(p.commit_lag().items()):
            lag.add_metric([p.name, tp.topic, str(tp.partition)], behind)
        for field, family in counters.items():
            family.add_metric([p.name], getattr(stats, field))
    yield from (processed, latency, in_flight, waiting, due, lag, *counters.values())


def _indexer_metrics(indexers: list[Indexer]) -> Iterator[Metric]:
    documents = CounterMetricFamily(
        "hermesbus_indexer_documents",
        "Records the trace indexer handled, by outcome.",
        labels=["component", "outcome"],
    )
    outages = CounterMetricFamily(
        "hermesbus_indexer_outages",
        "Times a write to the trace index failed and was retried in place.",
        labels=["component"],
    )
    lag = GaugeMetricFamily(
        "hermesbus_indexer_lag_records",
        "Records past the last one stored in the trace index, per partition.",
        labels=["component", "topic", "partition"],
    )
    for ix in indexers:
        for outcome in _INDEXED:
            documents.add_metric([ix.name, outcome], getattr(ix.stats, outcome))
        outages.add_metric([ix.name], ix.stats.outages)
        for tp, behind in sorted(ix.lag().items()):
            lag.add_metric([ix.name, tp.topic, str(tp.partition)], behind)
    yield from (documents, outages, lag)


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else format(bound, "g")


@dataclass(frozen=True)
class MetricsServer:
    """A ``/metrics`` endpoint serving: where it listens."""

    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"


@contextlib.asynccontextmanager
async def serve_metrics(
    settings: MetricsSettings, parts: Callable[[], Iterable[Processor | Indexer]]
) -> AsyncIterator[MetricsServer | None]:
    """Serve ``/metrics`` for ``parts()`` (with the process's CPU and memory) until the
    block ends; None when metrics are disabled. A port that cannot be had is a
    :class:`~hermesbus.errors.ConfigError` naming it."""
    if not settings.enabled:
        yield None
        return
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BusCollector(parts))
    ProcessCollector(registry=registry)

    open_now = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal open_now
        open_now += 1
        try:
            if open_now > _MAX_CONNECTIONS:
                return  # hung up on at once: scrapers ask one at a time
            async with asyncio.timeout(_EXCHANGE_TIMEOUT_S):  # the whole exchange
                status, body, kind, length = await _answer(reader, registry)
                head = (
                    f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\n"
                    f"Content-Length: {length}\r\nConnection: close\r\n\r\n"
                )
                writer.write(head.encode("ascii") + body)
                await writer.drain()
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass  # the scraper went away, never asked or never read: nothing to answer
        finally:
            open_now -= 1
            writer.close()
            with contextlib.suppress(ConnectionError, TimeoutError):
                async with asyncio.timeout(1.0):
                    await writer.wait_closed()

    try:
        server = await asyncio.start_server(handle, settings.host, settings.port)
    except OSError as exc:
        raise ConfigError(
            f"metrics: cannot listen on {settings.host}:{settings.port} ({exc.strerror}); set "
            "HERMES_METRICS_PORT to a free port (0 takes any) or HERMES_METRICS_ENABLED=false"
        ) from None
    bound = server.sockets[0].getsockname()
    try:
        yield MetricsServer(str(bound[0]), int(bound[1]))
    finally:
        server.close()
        await server.wait_closed()


async def _answer(
    reader: asyncio.StreamReader, registry: CollectorRegistry
) -> tuple[str, bytes, str, int]:
    """The status, body, content type and the body's length (a HEAD's says the GET's and
    sends none) for the request ``reader`` holds."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        head = b""
    if not head or len(head) > _MAX_REQUEST:
        return _plain("431 Request Header Fields Too Large", b"request too large\n")
    method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
    path = rest.split(" ", 1)[0].split("?", 1)[0]
    if method not in ("GET", "HEAD"):
        return _plain("405 Method Not Allowed", b"GET /metrics\n")
    if path != "/metrics":
        return _plain("404 Not Found", b"hermesbus serves GET /metrics\n")
    try:
        body = generate_latest(registry)
    except Exception:
        log.exception("metrics: a scrape failed")
        return _plain("500 Internal Server Error", b"the figures could not be read; see the log\n")
    return "200 OK", (body if method == "GET" else b""), CONTENT_TYPE_LATEST, len(body)


def _plain(status: str, text: bytes) -> tuple[str, bytes, str, int]:
    return status, text, "text/plain; charset=utf-8", len(text)

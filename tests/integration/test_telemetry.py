"""What a running bus tells an operator, moving with its traffic: ``/metrics`` scraped over
HTTP before and after the demo's conversations, and the spans it exported over OTLP/HTTP
to a receiver this test runs, decoded with ``opentelemetry-proto``.

One run of the stack ``hermesbus up --demo`` runs (both expense conversations) serves
both tests."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from prometheus_client.parser import text_string_to_metric_families

from hermesbus.compose.stack import Stack
from hermesbus.contract.headers import w3c_ids
from hermesbus.demo.expense import Said, missing, run
from tests.integration.stacks import demo_stack

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


@dataclass
class Received:
    """What the OTLP/HTTP receiver was sent: each span with its resource's attributes."""

    spans: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


@pytest.fixture(scope="module")
def receiver() -> Iterator[tuple[str, Received]]:
    """An OTLP/HTTP trace receiver on a free loopback port: its root URL, what it got."""
    got = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path != "/v1/traces":
                self.send_response(404)
                self.end_headers()
                return
            request = ExportTraceServiceRequest.FromString(body)
            with got.lock:
                got.requests += 1
                for resource_spans in request.resource_spans:
                    resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                    for scope_spans in resource_spans.scope_spans:
                        for span in scope_spans.spans:
                            got.spans.append({
                                "name": span.name,
                                "trace": span.trace_id.hex(),
                                "span": span.span_id.hex(),
                                "parent": span.parent_span_id.hex(),
                                "start": span.start_time_unix_nano,
                                "end": span.end_time_unix_nano,
                                "status": span.status.code,
                                "resource": resource,
                                "attributes": {a.key: _value(a.value) for a in span.attributes},
                            })  # fmt: skip
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *_args: object) -> None:
            """Quiet: the test reads what arrived."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", got
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Run:
    prefix: str
    said: list[Said]
    before: Samples
    after: Samples


async def _scrape(running: Stack) -> Samples:
    assert running.metrics is not None
    async with httpx.AsyncClient() as http:
        answer = await http.get(running.metrics.url, timeout=30)
    assert answer.status_code == 200
    found: Samples = defaultdict(dict)
    for family in text_string_to_metric_families(answer.text):
        for s in family.samples:
            found[s.name][tuple(sorted(s.labels.items()))] = s.value
    return found


def _quiet(kind: str, item: object) -> None:
    """The demo's printer, silenced."""


@pytest.fixture(scope="module")
async def ran(
    embedded_bootstrap: str,
    receiver: tuple[str, Received],
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Run]:
    """Both demo conversations through a stack exporting spans to ``receiver``; /metrics
    scraped before and after (the indexer having indexed something)."""
    prefix = f"telemetry-{uuid.uuid4().hex[:12]}."
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HERMES_OTEL_ENDPOINT", receiver[0])
        home = tmp_path_factory.mktemp("telemetry")
        async with demo_stack(embedded_bootstrap, prefix, home, env) as running:
            before = await _scrape(running)
            submitted, held = await run(running.bootstrap, running.prefix, _quiet)
            assert missing(submitted, "已提交") == [] == missing(held, "未完成报销流程")
            after = await _scrape(running)
            deadline = time.monotonic() + 120  # not about timing: the bus comes to rest
            while _by(after, "hermesbus_indexer_documents_total", "outcome").get(
                "indexed"
            ) == 0 or any(after["hermesbus_commit_lag_records"].values()):
                assert time.monotonic() < deadline, ("never at rest", dict(after))
                await asyncio.sleep(0.5)  # the index catches up, every commit is made
                after = await _scrape(running)
    yield Run(prefix, [submitted, held], before, after)  # the stack stopped: spans flushed


def _by(samples: Samples, name: str, label: str) -> dict[str, float]:
    """``name``'s values summed per value of ``label``."""
    summed: dict[str, float] = defaultdict(float)
    for labels, value in samples.get(name, {}).items():
        summed[dict(labels)[label]] += value
    return summed


async def test_the_metrics_move_with_the_demos_traffic(ran: Run) -> None:
    before, after, prefix = ran.before, ran.after, ran.prefix
    assert _by(before, "hermesbus_records_processed_total", "component") == {}
    processed = _by(after, "hermesbus_records_processed_total", "component")
    for component in ("conversation", "dispatcher", "memory"):
        assert processed[component] > 0, processed
    assert sum(n for c, n in processed.items() if c.startswith("tool")) > 0, processed
    in_topic = _by(after, "hermesbus_records_processed_total", "topic")
    assert in_topic[f"{prefix}hermes.conversation.in"] >= 8  # 4 user turns each
    handled = _by(after, "hermesbus_handler_duration_seconds_count", "component")
    assert 0 < handled["conversation"] <= processed["conversation"]
    assert _by(after, "hermesbus_handler_duration_seconds_sum", "component")["dispatcher"] > 0
    lag = after["hermesbus_commit_lag_records"]
    owned = {dict(labels)["topic"] for labels in lag}
    assert f"{prefix}hermes.dispatcher" in owned  # one gauge per partition fetched
    assert set(lag.values()) == {0}  # at rest every partition is committed to its end
    assert _by(after, "hermesbus_dead_letters_total", "component")["conversation"] == 0
    assert after["hermesbus_indexer_lag_records"]  # partitions the indexer stored from


async def test_each_handled_envelope_is_a_span_of_its_trace_with_genai_names(
    ran: Run, receiver: tuple[str, Received]
) -> None:
    got = receiver[1]
    with got.lock:
        spans = list(got.spans)
    sessions = {said.conversation.session_id for said in ran.said}
    ours = [s for s in spans if s["attributes"]["gen_ai.conversation.id"] in sessions]
    assert ours, f"no span of the demo's sessions among {len(spans)} received"
    tools = [s for s in ours if s["attributes"].get("gen_ai.operation.name") == "execute_tool"]
    assert {s["attributes"]["gen_ai.tool.name"] for s in tools} >= {"ocr_tool", "finance_tool"}
    assert all(s["name"] == f"execute_tool {s['attributes']['gen_ai.tool.name']}" for s in tools)
    assert {s["resource"]["service.name"] for s in tools} == {"hermesbus-tool"}
    agents = [s for s in ours if s["attributes"].get("gen_ai.operation.name") == "invoke_agent"]
    assert agents and {s["resource"]["service.name"] for s in agents} == {"hermesbus-conversation"}
    services = {s["resource"]["service.name"] for s in ours}
    assert services == {f"hermesbus-{k}" for k in ("conversation", "dispatcher", "tool", "memory")}
    # the ids are the envelopes' own, as their traceparent headers say
    for said in ran.said:
        for _turn, reply in said.replies:
            trace, _span, parent = w3c_ids(reply)
            emitter = [s for s in ours if s["span"] == parent]
            assert len(emitter) == 1, (reply.source, parent)  # the span that emitted the reply
            assert emitter[0]["trace"] == trace
    by_id = {s["span"]: s for s in ours}
    assert len(by_id) == len(ours)  # one span per handled envelope, none twice
    for tool in tools:  # a tool call hangs under the dispatcher's span that sent it
        sender = by_id[tool["parent"]]
        assert sender["resource"]["service.name"] == "hermesbus-dispatcher"
        assert sender["trace"] == tool["trace"]
    assert all(s["start"] <= s["end"] for s in ours)
    kafka = tools[0]["attributes"]
    assert kafka["messaging.system"] == "kafka"
    assert kafka["messaging.destination.name"] == f"{ran.prefix}hermes.tool"

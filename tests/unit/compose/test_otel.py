"""Where spans go: the endpoint and headers are checked at the start, secrets never leave
over plain http to another host, and no endpoint means no exporter. (Spans really
exported and decoded: tests/integration/test_telemetry.py.)"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from hermesbus import Envelope, ModelRequest, Reply, ToolCall, UserTurn
from hermesbus.compose._spans import SpanExport
from hermesbus.compose.otel import OtelSettings, exporting
from hermesbus.compose.settings import Settings
from hermesbus.runtime import HandlerRun
from tests import builders


def test_the_endpoint_is_an_http_url_without_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_OTEL_ENDPOINT", "http://127.0.0.1:4318/")
    assert OtelSettings().endpoint == "http://127.0.0.1:4318"
    for bad, said in (
        ("ftp://collector:4318", "not an http"),
        ("collector:4318", "not an http"),
        ("https://user:pw@collector:4318", "no credentials"),
    ):
        monkeypatch.setenv("HERMES_OTEL_ENDPOINT", bad)
        with pytest.raises(ValueError, match=said):
            OtelSettings()


def test_headers_are_a_secret_sent_only_over_https_or_to_loopback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HERMES_OTEL_HEADERS", "Authorization=Basic%20c2VjcmV0, x-team = bus")
    for endpoint in (
        "https://collector.example:4318",
        "http://127.0.0.1:4318",
        "http://[::1]:4318",
    ):
        monkeypatch.setenv("HERMES_OTEL_ENDPOINT", endpoint)
        read = OtelSettings()
        assert read.header_map() == {"Authorization": "Basic c2VjcmV0", "x-team": "bus"}
        assert "c2VjcmV0" not in repr(read)
    monkeypatch.setenv("HERMES_OTEL_ENDPOINT", "http://collector.example:4318")
    with pytest.raises(ValueError, match=r"only over https or to a loopback collector"):
        OtelSettings()  # refused where the settings are read: the program's start
    monkeypatch.setenv("HERMES_OTEL_ENDPOINT", "https://collector.example:4318")
    monkeypatch.setenv("HERMES_OTEL_HEADERS", "no-equals-sign")
    with pytest.raises(ValueError, match=r"HERMES_OTEL_HEADERS: write name=value"):
        OtelSettings()
    monkeypatch.delenv("HERMES_OTEL_ENDPOINT")
    monkeypatch.setenv("HERMES_OTEL_HEADERS", "a=b")
    with pytest.raises(ValueError, match=r"without HERMES_OTEL_ENDPOINT"):
        OtelSettings()


def test_opentelemetrys_own_header_variables_are_held_to_the_same_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "api-key=s3cret")
    monkeypatch.setenv("HERMES_OTEL_ENDPOINT", "http://collector.example:4318")
    with pytest.raises(ValueError, match=r"OTEL_EXPORTER_OTLP_HEADERS\) are sent only"):
        OtelSettings()
    monkeypatch.setenv("HERMES_OTEL_ENDPOINT", "https://collector.example:4318/v1/traces")
    read = OtelSettings()
    assert read.endpoint == "https://collector.example:4318"  # the root, also given whole
    assert read.header_map() == {"api-key": "s3cret"}


async def test_no_endpoint_no_exporter() -> None:
    async with exporting(OtelSettings()) as spans:
        assert spans is None


def test_a_redrives_sandbox_exports_no_spans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "bus"))
    monkeypatch.setenv("HERMES_OTEL_ENDPOINT", "http://127.0.0.1:4318")
    bus = Settings.from_environment()
    assert bus.otel.endpoint == "http://127.0.0.1:4318"
    assert bus.sandbox(tmp_path / "sandbox").otel.endpoint is None


def _run(envelope: Envelope, processor: str, error: BaseException | None = None) -> HandlerRun:
    return HandlerRun(processor, envelope, "hermes.tool", 2, 41, 1_000, 5_000, error)


def test_a_run_is_the_envelopes_span_and_a_failed_attempt_a_sibling_of_its_own() -> None:
    exporter = InMemorySpanExporter()
    spans = SpanExport(exporter, "hermesbus")
    call = builders.turn(
        ToolCall(tool="ocr_tool", arguments_json="{}", idempotency_key="k1"),
        source="mcp:dispatcher",
        target="tool:ocr_tool",
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
        span_id="00f067aa0ba902b7",
        parent_span_id="a3ce929d0e0e4736",
    )
    spans(_run(call, "tool-ocr_tool", ValueError("flaky")))
    spans(_run(call, "tool-ocr_tool"))
    assert spans.close(10)
    failed, took = exporter.get_finished_spans()
    assert (took.name, took.kind) == ("execute_tool ocr_tool", SpanKind.INTERNAL)
    assert format(took.context.trace_id, "032x") == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert format(took.context.span_id, "016x") == "00f067aa0ba902b7"
    assert took.parent is not None and format(took.parent.span_id, "016x") == "a3ce929d0e0e4736"
    assert took.attributes is not None and took.attributes["gen_ai.tool.name"] == "ocr_tool"
    assert took.resource.attributes["service.name"] == "hermesbus-tool"
    assert failed.context.span_id != took.context.span_id  # never one id twice
    assert failed.parent == took.parent  # beside it, under the span that sent the call
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.attributes is not None and failed.attributes["error.type"] == "ValueError"


def test_genai_names_are_given_where_the_step_is_one() -> None:
    exporter = InMemorySpanExporter()
    spans = SpanExport(exporter, "bus")
    turn = builders.turn(UserTurn(text="hi", flow="expense"))
    spans(_run(turn, "conversation"))
    ask = builders.turn(
        ModelRequest(agent="budget", tools=[], messages_json="[]", max_tokens=100, round=1),
        source="mcp:dispatcher",
        target="model:chat",
    )
    spans(_run(ask, "tool-model-3achat"))
    result = builders.turn(Reply(text="ok"), source="tool:ocr_tool", target="mcp:dispatcher")
    spans(_run(result, "conversation"))  # not a turn: the conversation's step, no agent's
    spans(_run(result, "some-new-group"))  # a processor of no known kind: still a span
    assert spans.close(10)
    agent, chat, step, other = exporter.get_finished_spans()
    assert agent.name == "invoke_agent expense"
    assert agent.resource.attributes["service.name"] == "bus-conversation"
    assert (chat.name, chat.kind) == ("chat", SpanKind.CLIENT)
    assert chat.attributes is not None and chat.attributes["gen_ai.agent.name"] == "budget"
    assert step.attributes is not None and "gen_ai.operation.name" not in step.attributes
    assert (step.name, step.kind) == ("conversation Reply", SpanKind.CONSUMER)
    assert step.attributes["gen_ai.conversation.id"] == "s1"
    assert other.resource.attributes["service.name"] == "bus-some"


def test_closing_is_bounded_when_the_collector_does_not_answer() -> None:
    release = threading.Event()

    class Stuck(InMemorySpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            release.wait(30)  # a collector that never answers, until told to stop
            return SpanExportResult.FAILURE

        def shutdown(self) -> None:
            release.set()  # what OTLPSpanExporter.shutdown does: its retries end
            super().shutdown()

    spans = SpanExport(Stuck(), "hermesbus")
    spans(_run(builders.turn(), "conversation"))
    assert spans.close(0.5) is False  # it returned while the export still hung
    assert release.is_set()  # and told the exporter to stop retrying: nothing left waiting

"""The span exporter behind :mod:`hermesbus.compose.otel`, apart because it imports
OpenTelemetry's SDK (the ``otel`` extra) at its top: only a program with an endpoint set
imports it."""

from __future__ import annotations

from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from hermesbus.contract.headers import w3c_ids
from hermesbus.contract.payloads import ModelRequest, ToolCall
from hermesbus.runtime import Handled

__all__ = ["SpanExport"]

_KINDS = ("conversation", "dispatcher", "memory", "tool")
_EXPORT_TIMEOUT_S = 10
_BATCH_DELAY_MS = 1000
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


class SpanExport:
    """The :data:`~hermesbus.runtime.Observer` that turns each handler run into a span and
    hands it to OpenTelemetry's batch processor, which posts OTLP/HTTP protobuf to ``url``
    from a thread of its own."""

    def __init__(self, url: str, headers: dict[str, str], service_name: str) -> None:
        exporter = OTLPSpanExporter(endpoint=url, headers=headers, timeout=_EXPORT_TIMEOUT_S)
        self._batch = BatchSpanProcessor(exporter, schedule_delay_millis=_BATCH_DELAY_MS)
        self._scope = InstrumentationScope("hermesbus")
        self._resources = {
            kind: Resource.create(
                {"service.name": f"{service_name}-{kind}", "service.namespace": service_name}
            )
            for kind in _KINDS
        }

    def __call__(self, handled: Handled) -> None:
        envelope = handled.envelope
        trace, span, parent = w3c_ids(envelope)
        name, attributes, gen_ai = _named(handled)
        failed = handled.error
        self._batch.on_end(
            ReadableSpan(
                name,
                context=SpanContext(int(trace, 16), int(span, 16), False, _SAMPLED),
                parent=(
                    SpanContext(int(trace, 16), int(parent, 16), True, _SAMPLED) if parent else None
                ),
                resource=self._resources[_kind(handled.processor)],
                attributes=attributes,
                kind=SpanKind.INTERNAL if gen_ai else SpanKind.CONSUMER,
                status=(
                    Status(StatusCode.ERROR, type(failed).__name__)
                    if failed is not None
                    else Status(StatusCode.UNSET)
                ),
                start_time=handled.began_ns,
                end_time=max(handled.ended_ns, handled.began_ns),
                instrumentation_scope=self._scope,
            )
        )

    def close(self) -> None:
        """Send what is queued (bounded by the exporter's timeout) and stop the thread."""
        self._batch.shutdown()  # type: ignore[no-untyped-call]


def _kind(processor: str) -> str:
    """The component a processor (its consumer group's name) is one of."""
    for kind in _KINDS:
        if processor == kind or processor.startswith(f"{kind}-"):
            return kind
    return "tool" if "tool" in processor else processor.split("-", 1)[0]


def _named(handled: Handled) -> tuple[str, dict[str, Any], bool]:
    """The span's name, attributes, and whether it is a GenAI operation."""
    envelope = handled.envelope
    body = envelope.payload.body
    kind = _kind(handled.processor)
    attributes: dict[str, Any] = {
        "gen_ai.conversation.id": envelope.session_id,
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.destination.name": handled.topic,
        "messaging.destination.partition.id": str(handled.partition),
        "messaging.kafka.offset": handled.offset,
        "messaging.kafka.message.key": envelope.session_id,
        "messaging.message.id": envelope.message_id,
        "hermesbus.component": handled.processor,
        "hermesbus.source": envelope.source,
        "hermesbus.target": envelope.target,
        "hermesbus.task": envelope.payload.task,
    }
    if handled.error is not None:
        attributes["error.type"] = type(handled.error).__name__
    if kind == "tool" and isinstance(body, ToolCall):
        attributes |= {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": body.tool,
            "gen_ai.tool.call.id": envelope.message_id,
        }
        return f"execute_tool {body.tool}", attributes, True
    if kind == "tool" and isinstance(body, ModelRequest):
        attributes |= {
            "gen_ai.operation.name": "chat",
            "gen_ai.agent.name": body.agent,
            "gen_ai.request.max_tokens": body.max_tokens,
        }
        return "chat", attributes, True
    if kind == "conversation":
        attributes |= {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": kind}
        return "invoke_agent conversation", attributes, True
    what = type(body).__name__ if body is not None else envelope.payload.task or "envelope"
    return f"{kind} {what}", attributes, False

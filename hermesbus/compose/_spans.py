"""The span exporter behind :mod:`hermesbus.compose.otel`, apart because it imports
OpenTelemetry's SDK (the ``otel`` extra) at its top: only a program with an endpoint set
imports it."""

from __future__ import annotations

import hashlib
import threading
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from hermesbus.contract.headers import w3c_ids
from hermesbus.contract.payloads import ModelRequest, ToolCall, UserTurn
from hermesbus.runtime import HandlerRun

__all__ = ["SpanExport"]

_KINDS = ("conversation", "dispatcher", "memory", "tool")
_EXPORT_TIMEOUT_S = 10
_BATCH_DELAY_MS = 1000
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


class SpanExport:
    """The :data:`~hermesbus.runtime.Observer` that turns each handler run into a span and
    hands it to OpenTelemetry's batch processor, which gives it to ``exporter`` (OTLP/HTTP
    protobuf: :meth:`otlp`) from a thread of its own.

    The run that took effect is the envelope's span (its own ids); a failed attempt is a
    span of its own beside it (an id derived from the envelope's span, the group and the
    attempt's start, the same parent), marked ``ERROR``: a retried envelope is one span
    with its failed attempts as siblings, never one id exported twice."""

    def __init__(self, exporter: SpanExporter, service_name: str) -> None:
        self._exporter = exporter
        self._batch = BatchSpanProcessor(exporter, schedule_delay_millis=_BATCH_DELAY_MS)
        self._service = service_name
        self._scope = InstrumentationScope("hermesbus")
        self._resources: dict[str, Resource] = {}

    @classmethod
    def otlp(cls, url: str, headers: dict[str, str], service_name: str) -> SpanExport:
        """Exporting OTLP/HTTP protobuf to ``url`` (``.../v1/traces``) with ``headers``."""
        exporter = OTLPSpanExporter(endpoint=url, headers=headers, timeout=_EXPORT_TIMEOUT_S)
        return cls(exporter, service_name)

    def _resource(self, kind: str) -> Resource:
        found = self._resources.get(kind)
        if found is None:
            found = self._resources[kind] = Resource.create(
                {"service.name": f"{self._service}-{kind}", "service.namespace": self._service}
            )
        return found

    def __call__(self, handled: HandlerRun) -> None:
        trace, span, parent = w3c_ids(handled.envelope)
        name, attributes, kind = _named(handled)
        failed = handled.error
        if failed is not None:  # an attempt beside the run that will take effect
            span = hashlib.sha256(
                f"{span}|{handled.processor}|{handled.began_ns}".encode()
            ).hexdigest()[:16]
            attributes |= {"error.type": type(failed).__name__, "hermesbus.failed_attempt": True}
        self._batch.on_end(
            ReadableSpan(
                name,
                context=SpanContext(int(trace, 16), int(span, 16), False, _SAMPLED),
                parent=(
                    SpanContext(int(trace, 16), int(parent, 16), True, _SAMPLED) if parent else None
                ),
                resource=self._resource(_kind(handled.processor)),
                attributes=attributes,
                kind=kind,
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

    def close(self, within_s: float) -> bool:
        """Send what is queued and stop, within ``within_s`` (a collector that is away
        would hold the exporter's retries longer): whether it finished in time. Past the
        bound the exporter is told to stop retrying and the rest is dropped."""
        closing = threading.Thread(target=self._close, name="hermesbus-spans-close", daemon=True)
        closing.start()
        closing.join(within_s)
        if closing.is_alive():
            self._exporter.shutdown()  # ends its retries: the thread returns soon after
            return False
        return True

    def _close(self) -> None:
        self._batch.shutdown()  # type: ignore[no-untyped-call]


def _kind(processor: str) -> str:
    """The component a processor (its consumer group's name) is one of."""
    for kind in _KINDS:
        if processor == kind or processor.startswith(f"{kind}-"):
            return kind
    return processor.split("-", 1)[0] or "unknown"


def _named(handled: HandlerRun) -> tuple[str, dict[str, Any], SpanKind]:
    """The span's name, attributes and kind."""
    envelope = handled.envelope
    body = envelope.payload.body
    kind = _kind(handled.processor)
    attributes: dict[str, Any] = {
        "gen_ai.conversation.id": envelope.session_id,
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.destination.name": handled.topic,
        "messaging.destination.partition.id": str(handled.partition),
        "messaging.consumer.group.name": handled.processor,
        "messaging.kafka.offset": handled.offset,
        "messaging.kafka.message.key": envelope.session_id,
        "messaging.message.id": envelope.message_id,
        "hermesbus.source": envelope.source,
        "hermesbus.target": envelope.target,
        "hermesbus.task": envelope.payload.task,
        "hermesbus.attempt": envelope.metadata.attempt,
    }
    if kind == "tool" and isinstance(body, ToolCall):
        attributes |= {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": body.tool,
            "gen_ai.tool.call.id": envelope.message_id,
            "gen_ai.tool.type": "function",
        }
        return f"execute_tool {body.tool}", attributes, SpanKind.INTERNAL
    if kind == "tool" and isinstance(body, ModelRequest):
        attributes |= {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",  # the API the model endpoint speaks
            "gen_ai.agent.name": body.agent,
            "gen_ai.request.max_tokens": body.max_tokens,
        }
        return "chat", attributes, SpanKind.CLIENT
    if kind == "conversation" and isinstance(body, UserTurn):
        agent = body.flow or "conversation"
        attributes |= {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent}
        return f"invoke_agent {agent}", attributes, SpanKind.INTERNAL
    what = type(body).__name__ if body is not None else envelope.payload.task or "envelope"
    return f"{kind} {what}", attributes, SpanKind.CONSUMER

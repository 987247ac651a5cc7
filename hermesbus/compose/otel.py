"""OpenTelemetry: a span per handled envelope, exported over OTLP/HTTP, so a trace of the bus
also opens in Jaeger, Tempo, Langfuse or Phoenix.

Set ``HERMES_OTEL_ENDPOINT`` (the collector's OTLP/HTTP root, ``http://127.0.0.1:4318``;
spans go to ``/v1/traces``) and every processor of the stack exports one span per envelope
its handler ran. The span *is* the envelope's: its trace and span ids are the envelope's
``trace_id`` and ``span_id`` as W3C Trace Context hex (what the ``traceparent`` header of
every record already says), its parent the envelope's ``parent_span_id``, so the outputs'
spans hang under the span that emitted them with no context carried on the side, and the
tree is the one ``hermesbus trace`` draws. Its time is the handler's run (the wall clock).

Names follow the GenAI semantic conventions where the step is one: a tool call run by the
tool processor is ``execute_tool <tool>`` (``gen_ai.tool.name``, ``gen_ai.tool.call.id``),
an agent state's model round is ``chat``, what the conversation runs is ``invoke_agent
conversation``; every span carries ``gen_ai.conversation.id`` (the session) and the Kafka
messaging attributes of its record. Each component is a service of its own
(``service.name`` ``hermesbus-conversation``, ``-dispatcher``, ``-tool``, ``-memory``).

Spans are batched and sent from a thread of their own: a collector that is slow or away
costs the bus nothing (a full queue drops spans, which the exporter logs). Exported
spans are observation, never inputs: replay does not read them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Self
from urllib.parse import unquote, urlsplit

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from hermesbus.base.config import is_loopback
from hermesbus.errors import ConfigError
from hermesbus.runtime import Observer

__all__ = ["OtelSettings", "exporting"]

log = logging.getLogger(__name__)

_SHUTDOWN_S = 15.0
"""How long the last spans get to leave when the stack stops."""


class OtelSettings(BaseSettings):
    """Where spans go (``HERMES_OTEL_*``); no endpoint: none are made."""

    model_config = SettingsConfigDict(env_prefix="HERMES_OTEL_", frozen=True, extra="ignore")

    endpoint: str | None = None
    """The collector's OTLP/HTTP root (``http://127.0.0.1:4318``): spans are posted to
    ``<endpoint>/v1/traces``."""
    headers: SecretStr | None = None
    """``name=value[,name=value]`` sent with every export (a vendor's ``Authorization``;
    values percent-encoded as OpenTelemetry's variables write them): a secret, never
    printed, and sent only over https or to a loopback collector."""
    service_name: str = "hermesbus"
    """Put before each component's name in ``service.name`` (``hermesbus-tool``)."""
    sdk_headers: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices(
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"
        ),
    )
    """OpenTelemetry's own header variables, which its exporter adds by itself: read here
    so they are held to the same rule as ``HERMES_OTEL_HEADERS``."""

    @field_validator("endpoint")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if not value:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"HERMES_OTEL_ENDPOINT {value!r} is not an http(s) URL")
        if parts.username or parts.password:
            raise ValueError("HERMES_OTEL_ENDPOINT carries no credentials: use HERMES_OTEL_HEADERS")
        return value.rstrip("/").removesuffix("/v1/traces")  # the root, also when given whole

    @model_validator(mode="after")
    def _headers_go_safely(self) -> Self:
        if self.headers is not None and self.endpoint is None:
            raise ValueError("HERMES_OTEL_HEADERS is set without HERMES_OTEL_ENDPOINT")
        self.header_map()  # malformed, or bound for plain http: refused at the start
        return self

    def header_map(self) -> dict[str, str]:
        """Every export header, OpenTelemetry's variables' and then ours; a malformed one,
        or any at all over plain http to a host other than loopback, is a ValueError."""
        pairs: dict[str, str] = {}
        for secret, where in ((self.sdk_headers, "OTEL_EXPORTER_OTLP_HEADERS"),
                              (self.headers, "HERMES_OTEL_HEADERS")):  # fmt: skip
            if secret is None or not secret.get_secret_value().strip():
                continue
            for item in secret.get_secret_value().split(","):
                name, eq, value = item.partition("=")
                if not eq or not name.strip():
                    raise ValueError(f"{where}: write name=value[,name=value]")
                pairs[unquote(name.strip())] = unquote(value.strip())
        reached = urlsplit(self.endpoint or "")
        if pairs and reached.scheme == "http" and not is_loopback(reached.hostname or ""):
            raise ValueError(
                "export headers (HERMES_OTEL_HEADERS, OTEL_EXPORTER_OTLP_HEADERS) are sent only "
                f"over https or to a loopback collector: {reached.hostname} is reached over "
                "plain http"
            )
        return pairs


@contextlib.asynccontextmanager
async def exporting(settings: OtelSettings) -> AsyncIterator[Observer | None]:
    """The span exporter the settings ask for, shut down (its last spans sent, bounded)
    when the block ends; None without an endpoint. OpenTelemetry's SDK is an extra
    (``pip install 'hermesbus[otel]'``): an endpoint without it is a ConfigError."""
    if settings.endpoint is None:
        yield None
        return
    headers = settings.header_map()  # checked at the start already
    try:
        from hermesbus.compose import _spans  # noqa: PLC0415 - an optional extra
    except ImportError:
        raise ConfigError(
            "HERMES_OTEL_ENDPOINT is set and OpenTelemetry's SDK is not installed: "
            "pip install 'hermesbus[otel]'"
        ) from None
    export = _spans.SpanExport.otlp(
        f"{settings.endpoint}/v1/traces", headers, settings.service_name
    )
    try:
        yield export
    finally:
        if not await asyncio.to_thread(export.close, _SHUTDOWN_S):
            log.warning("otel: the last spans did not leave within %g s: dropped", _SHUTDOWN_S)

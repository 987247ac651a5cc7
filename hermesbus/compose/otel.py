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
import ipaddress
import logging
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

from pydantic import SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

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
    """``name=value[,name=value]`` sent with every export (a vendor's ``Authorization``):
    a secret, never printed, and sent only over https or to a loopback collector."""
    service_name: str = "hermesbus"
    """Put before each component's name in ``service.name`` (``hermesbus-tool``)."""

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
        return value.rstrip("/")

    def header_map(self) -> dict[str, str]:
        """The export headers; a malformed one, or any over http to another host, is a
        :class:`~hermesbus.errors.ConfigError`."""
        if self.headers is None:
            return {}
        pairs: dict[str, str] = {}
        for item in self.headers.get_secret_value().split(","):
            name, eq, value = item.partition("=")
            if not eq or not name.strip():
                raise ConfigError("HERMES_OTEL_HEADERS: write name=value[,name=value]")
            pairs[name.strip()] = value.strip()
        where = urlsplit(self.endpoint or "")
        if pairs and where.scheme == "http" and not _loopback(where.hostname or ""):
            raise ConfigError(
                "HERMES_OTEL_HEADERS are sent only over https or to a loopback collector: "
                f"{where.hostname} is reached over plain http"
            )
        return pairs


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@contextlib.asynccontextmanager
async def exporting(settings: OtelSettings) -> AsyncIterator[Observer | None]:
    """The span exporter the settings ask for, shut down (its last spans sent, bounded)
    when the block ends; None without an endpoint. OpenTelemetry's SDK is an extra
    (``pip install 'hermesbus[otel]'``): an endpoint without it is a ConfigError."""
    if settings.endpoint is None:
        yield None
        return
    headers = settings.header_map()
    try:
        from hermesbus.compose import _spans  # noqa: PLC0415 - an optional extra
    except ImportError:
        raise ConfigError(
            "HERMES_OTEL_ENDPOINT is set and OpenTelemetry's SDK is not installed: "
            "pip install 'hermesbus[otel]'"
        ) from None
    export = _spans.SpanExport(f"{settings.endpoint}/v1/traces", headers, settings.service_name)
    try:
        yield export
    finally:
        try:
            await asyncio.wait_for(asyncio.to_thread(export.close), _SHUTDOWN_S)
        except TimeoutError:
            log.warning("otel: the last spans did not leave within %g s", _SHUTDOWN_S)

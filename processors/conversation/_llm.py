"""An OpenAI-compatible chat-completions endpoint as the intent port (``HERMES_LLM_URL``).

``POST {base_url}/chat/completions`` where ``base_url`` is the API root including its
version, as OpenAI clients take it (``https://api.openai.com/v1``,
``http://localhost:8080/v1``). :meth:`HttpIntentParser.classify` asks which of a flow's
intents (by their labels and descriptions) a message expresses when the flow's own rules
read nothing in it. The answer must be one JSON object naming an intent of the list or
none; any failure (network, status, JSON, validation, the whole request taking longer than
``timeout_s``) raises :class:`IntentError`, and the rules' reading stands, so the endpoint
is never required. The URL must be ``https://`` unless its host is loopback; logs and
errors name it without userinfo or query (where keys often hide).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
from collections.abc import Sequence
from datetime import datetime, tzinfo
from typing import Any, Final
from zoneinfo import ZoneInfo

import httpx
from pydantic import SecretStr

from hermesbus.base.lifecycle import Service
from hermesbus.errors import ConfigError, IntentError
from hermesbus.processors.conversation._intent import DEFAULT_TIMEZONE
from hermesbus.processors.flow import Intent as FlowIntent

__all__ = ["HttpIntentParser", "redact_url"]

URL_SETTING: Final = "HERMES_LLM_URL"
_LOOPBACK_NAMES: Final = frozenset({"localhost", "localhost."})

log = logging.getLogger(__name__)


def redact_url(url: str | httpx.URL) -> str:
    """``url`` as logs may show it: scheme, host, port and path; no userinfo, no query."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return "<invalid url>"
    host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
    port = f":{parsed.port}" if parsed.port is not None else ""
    hidden = "?<redacted>" if parsed.query else ""
    return f"{parsed.scheme}://{host}{port}{parsed.path}{hidden}"


class _RedactEndpoints(logging.Filter):
    """On httpx's logger: its request lines show our endpoints redacted (httpx logs the
    full URL, userinfo and query included). Other URLs pass unchanged."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and self.urls:
            record.args = tuple(
                redact_url(arg) if isinstance(arg, httpx.URL) and str(arg) in self.urls else arg
                for arg in record.args
            )
        return True


_REDACTION: Final = _RedactEndpoints()
logging.getLogger("httpx").addFilter(_REDACTION)


def _is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _endpoint(base_url: str) -> httpx.URL:
    """``{base_url}/chat/completions`` (query kept); only https, or http to loopback."""
    try:
        base = httpx.URL(base_url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise ConfigError(f"{URL_SETTING} is not a URL: {redact_url(base_url)}") from exc
    if base.scheme == "https" and base.host:
        return base.copy_with(path=base.path.rstrip("/") + "/chat/completions")
    if base.scheme == "http" and _is_loopback(base.host):
        return base.copy_with(path=base.path.rstrip("/") + "/chat/completions")
    raise ConfigError(
        f"{URL_SETTING} = {redact_url(base_url)}: must be https:// "
        "(plain http:// only to a loopback host: localhost, 127.0.0.0/8, ::1)"
    )


class HttpIntentParser(Service):
    """Asks the endpoint for a JSON intent and validates it; never logs the API key."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        api_key: SecretStr | None = None,
        timeout_s: float = 3.0,
        zone: tzinfo | None = None,
    ) -> None:
        endpoint = _endpoint(base_url)
        self.url = str(endpoint)
        self.safe_url = redact_url(endpoint)
        """The endpoint as logs and errors name it (no userinfo, no query)."""
        if endpoint.userinfo or endpoint.query:
            _REDACTION.urls.add(self.url)
        self.zone: tzinfo = zone if zone is not None else ZoneInfo(DEFAULT_TIMEZONE)
        self.model = model
        self._api_key = api_key
        self._timeout = timeout_s
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._timeout)

    async def stop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def classify(
        self, text: str, *, now: datetime, flow: str, state: str, intents: Sequence[FlowIntent]
    ) -> tuple[str | None, dict[str, str]]:
        """Which of a flow's ``intents`` ``text`` expresses, with its entities: the model's
        answer is data, checked here (an intent of the list or none; only the entities that
        intent declares, as short texts); anything else is an IntentError."""
        today = now.astimezone(self.zone).date().isoformat()
        listed = "\n".join(_described(intent) for intent in intents)
        system = _FLOW_SYSTEM % (flow, state, today, listed)
        request = {
            "model": self.model,
            "temperature": 0,
            "response_format": {"type": "json_object"},
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": text},
            ],
        }
        return _classified(await self._post(request), intents)

    async def _post(self, request: dict[str, Any]) -> Any:
        """The endpoint's JSON answer; the whole exchange is bounded by ``timeout_s``."""
        headers = {"Content-Type": "application/json"}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key.get_secret_value()}"
        try:
            async with asyncio.timeout(self._timeout):
                if self._client is not None:
                    return await self._exchange(self._client, request, headers)
                async with httpx.AsyncClient(timeout=self._timeout) as client:
                    return await self._exchange(client, request, headers)
        except TimeoutError as exc:
            log.warning("intent endpoint %s took over %s s", self.safe_url, self._timeout)
            raise IntentError(
                f"intent endpoint {self.safe_url} failed: no answer within {self._timeout} s"
            ) from exc
        except (httpx.HTTPError, ValueError) as exc:
            detail = _detail(exc)
            log.warning("intent endpoint %s failed: %s", self.safe_url, detail)
            raise IntentError(f"intent endpoint {self.safe_url} failed: {detail}") from exc

    async def _exchange(
        self, client: httpx.AsyncClient, request: dict[str, Any], headers: dict[str, str]
    ) -> Any:
        response = await client.post(self.url, json=request, headers=headers)
        response.raise_for_status()
        return response.json()


_FLOW_SYSTEM: Final = (
    "You classify one message of a user talking to an assistant that runs the flow %s, now "
    "in state %s; today is %s. Answer with ONE JSON object and nothing else: "
    '{"intent": <one of the intent names below, or null when none fits>, '
    '"entities": {<entity name>: <the text the message gives for it>}} '
    "with only the entities the chosen intent lists. The intents:\n%s"
)
_ENTITY_CHARS: Final = 200


def _described(intent: FlowIntent) -> str:
    about = " - ".join(part for part in (intent.label, intent.description) if part)
    names = ", ".join(entity.name for entity in intent.entities) or "none"
    return f"- {intent.name}: {about or intent.name} (entities: {names})"


def _fields(answer: Any) -> dict[str, Any]:
    """The JSON object a chat-completions answer's content holds; else an IntentError."""
    content = _content(answer)
    try:
        fields = json.loads(content)
    except ValueError as exc:
        raise IntentError(f"intent endpoint answered non-JSON: {content[:80]!r}") from exc
    if not isinstance(fields, dict):
        raise IntentError("intent endpoint answered JSON that is not an object")
    return fields


def _classified(answer: Any, intents: Sequence[FlowIntent]) -> tuple[str | None, dict[str, str]]:
    fields = _fields(answer)
    name = fields.get("intent")
    if name is None:
        return None, {}
    chosen = next((intent for intent in intents if intent.name == name), None)
    if chosen is None:
        raise IntentError(f"intent endpoint answered intent {str(name)[:40]!r}: not one listed")
    given = fields.get("entities") or {}
    if not isinstance(given, dict):
        raise IntentError("intent endpoint answered entities that are not an object")
    declared = {entity.name for entity in chosen.entities}
    entities = {
        key: value.strip()
        for key, value in given.items()
        if key in declared and isinstance(value, str) and 0 < len(value.strip()) <= _ENTITY_CHARS
    }
    return chosen.name, entities


def _detail(exc: Exception) -> str:
    """What went wrong, without the URL httpx puts in some messages."""
    if isinstance(exc, httpx.HTTPStatusError):
        return f"status {exc.response.status_code}"
    if isinstance(exc, httpx.HTTPError):
        return type(exc).__name__
    return "the answer is not JSON"


def _content(answer: Any) -> str:
    try:
        content = answer["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise IntentError("intent endpoint answer has no choices[0].message.content") from exc
    if not isinstance(content, str):
        raise IntentError("intent endpoint answer content is not text")
    return content

"""An OpenAI-compatible chat-completions endpoint (``HERMES_LLM_URL``), one request at a time.

``POST {base_url}/chat/completions`` where ``base_url`` is the API root including its
version, as OpenAI clients take it (``https://api.openai.com/v1``,
``http://localhost:8080/v1``). The URL must be ``https://`` unless its host is loopback;
logs and errors name it without userinfo or query (where keys often hide), and the API
key is never logged. Any failure (network, status, JSON, the whole request taking longer
than ``timeout_s``) is an :class:`IntentError` naming what went wrong. What the model says
is data for its caller to check: nothing here reads it. Shared by the conversation's
intent parser and the tool processor's model for agent states.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Final

import httpx
from pydantic import SecretStr

from hermesbus.base.config import is_loopback
from hermesbus.base.lifecycle import Service
from hermesbus.errors import ConfigError, IntentError

__all__ = [
    "MAX_ANSWER_BYTES",
    "TIMED_OUT",
    "URL_SETTING",
    "ChatEndpoint",
    "content_of",
    "redact_url",
]

URL_SETTING: Final = "HERMES_LLM_URL"
TIMED_OUT: Final = "no answer within"
"""What the error of an exchange that ran out of time says (its callers tell it apart)."""
MAX_ANSWER_BYTES: Final = 1024 * 1024
"""The largest answer read from the endpoint (a chat completion is far smaller)."""

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


def _endpoint(base_url: str) -> httpx.URL:
    """``{base_url}/chat/completions`` (query kept); only https, or http to loopback."""
    try:
        base = httpx.URL(base_url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise ConfigError(f"{URL_SETTING} is not a URL: {redact_url(base_url)}") from exc
    if base.scheme == "https" and base.host:
        return base.copy_with(path=base.path.rstrip("/") + "/chat/completions")
    if base.scheme == "http" and is_loopback(base.host):
        return base.copy_with(path=base.path.rstrip("/") + "/chat/completions")
    raise ConfigError(
        f"{URL_SETTING} = {redact_url(base_url)}: must be https:// "
        "(plain http:// only to a loopback host: localhost, 127.0.0.0/8, ::1)"
    )


class ChatEndpoint(Service):
    """Posts chat-completions requests and returns the JSON answer, unread."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        api_key: SecretStr | None = None,
        timeout_s: float = 3.0,
        what: str = "model endpoint",
    ) -> None:
        endpoint = _endpoint(base_url)
        self.url = str(endpoint)
        self.safe_url = redact_url(endpoint)
        """The endpoint as logs and errors name it (no userinfo, no query)."""
        if endpoint.userinfo or endpoint.query:
            _REDACTION.urls.add(self.url)
        self.model = model
        self.timeout_s = timeout_s
        self._what = what
        self._api_key = api_key
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout_s)

    async def stop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def post(self, request: dict[str, Any], *, within_s: float | None = None) -> Any:
        """The endpoint's JSON answer to ``request`` (``model`` filled in); the whole
        exchange is bounded by ``timeout_s`` (``within_s`` when that is shorter)."""
        request = {"model": self.model, **request}
        headers = {"Content-Type": "application/json"}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key.get_secret_value()}"
        bound = min(self.timeout_s, within_s) if within_s is not None else self.timeout_s
        try:
            async with asyncio.timeout(bound):
                if self._client is not None:
                    return await self._exchange(self._client, request, headers)
                async with httpx.AsyncClient(timeout=self.timeout_s) as client:
                    return await self._exchange(client, request, headers)
        except TimeoutError as exc:
            log.warning("%s %s took over %s s", self._what, self.safe_url, bound)
            raise IntentError(
                f"{self._what} {self.safe_url} failed: {TIMED_OUT} {bound:g} s"
            ) from exc
        except (httpx.HTTPError, ValueError) as exc:
            detail = _detail(exc)
            log.warning("%s %s failed: %s", self._what, self.safe_url, detail)
            raise IntentError(f"{self._what} {self.safe_url} failed: {detail}") from exc

    async def _exchange(
        self, client: httpx.AsyncClient, request: dict[str, Any], headers: dict[str, str]
    ) -> Any:
        async with client.stream("POST", self.url, json=request, headers=headers) as response:
            response.raise_for_status()
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_ANSWER_BYTES:  # read no further than that
                    raise IntentError(
                        f"{self._what} {self.safe_url} answered more than {MAX_ANSWER_BYTES} bytes"
                    )
        return json.loads(body)


def _detail(exc: Exception) -> str:
    """What went wrong, without the URL httpx puts in some messages."""
    if isinstance(exc, httpx.HTTPStatusError):
        return f"status {exc.response.status_code}"
    if isinstance(exc, httpx.HTTPError):
        return type(exc).__name__
    return "the answer is not JSON"


def content_of(answer: Any, what: str = "model endpoint") -> dict[str, Any]:
    """``choices[0].message`` of a chat-completions answer; else an IntentError."""
    try:
        message = answer["choices"][0]["message"]
    except (KeyError, IndexError, TypeError) as exc:
        raise IntentError(f"{what} answer has no choices[0].message") from exc
    if not isinstance(message, dict):
        raise IntentError(f"{what} answer's message is not an object")
    return message

"""An OpenAI-compatible chat-completions endpoint as the intent port (``HERMES_LLM_URL``).

``POST {base_url}/chat/completions`` where ``base_url`` is the API root including its
version, as OpenAI clients take it (``https://api.openai.com/v1``,
``http://localhost:8080/v1``). The answer must be one JSON object naming an intent; any
failure (network, status, JSON, validation) raises :class:`IntentError`, and the handler
falls back to the rule parser, so the endpoint is never required.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import datetime, tzinfo
from typing import Any, Final
from zoneinfo import ZoneInfo

import httpx
from pydantic import SecretStr, ValidationError

from hermesbus.errors import IntentError
from hermesbus.lifecycle import Service

from ._intent import DEFAULT_TIMEZONE, Intent, IntentName, normalise_city

__all__ = ["HttpIntentParser"]

log = logging.getLogger(__name__)

_SYSTEM: Final = (
    "You classify one message of a user talking to an expense-report assistant. Answer with "
    "ONE JSON object and nothing else: "
    '{"intent": <one of %s>, "city": <city or null>, "category": <"差旅" or null>, '
    '"period_start": <"YYYY-MM-DD" or null>, "period_end": <"YYYY-MM-DD" or null>, '
    '"hold": <true when the user only pauses, e.g. "wait, don\'t submit yet">}. '
    "Relative dates count from today, %s; last month is the whole calendar month before it. "
    "The conversation is in state %s."
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
        self.url = base_url.rstrip("/") + "/chat/completions"
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

    async def parse(self, text: str, *, now: datetime, context: Mapping[str, Any]) -> Intent:
        answer = await self._post(self._request(text, now, context))
        return _intent(answer)

    def _request(self, text: str, now: datetime, context: Mapping[str, Any]) -> dict[str, Any]:
        names = ", ".join(f'"{name.value}"' for name in IntentName)
        today = now.astimezone(self.zone).date().isoformat()  # the users' calendar day
        system = _SYSTEM % (names, today, context.get("state") or "S1")
        return {
            "model": self.model,
            "temperature": 0,
            "response_format": {"type": "json_object"},
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": text},
            ],
        }

    async def _post(self, request: dict[str, Any]) -> Any:
        headers = {"Content-Type": "application/json"}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key.get_secret_value()}"
        try:
            if self._client is not None:
                response = await self._client.post(self.url, json=request, headers=headers)
            else:
                async with httpx.AsyncClient(timeout=self._timeout) as client:
                    response = await client.post(self.url, json=request, headers=headers)
            response.raise_for_status()
            return response.json()
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("intent endpoint %s failed: %s", self.url, type(exc).__name__)
            raise IntentError(f"intent endpoint {self.url} failed: {exc}") from exc


def _content(answer: Any) -> str:
    try:
        content = answer["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise IntentError("intent endpoint answer has no choices[0].message.content") from exc
    if not isinstance(content, str):
        raise IntentError("intent endpoint answer content is not text")
    return content


def _intent(answer: Any) -> Intent:
    """The Intent in a chat-completions answer; anything else is an IntentError."""
    content = _content(answer)
    try:
        fields = json.loads(content)
    except ValueError as exc:
        raise IntentError(f"intent endpoint answered non-JSON: {content[:80]!r}") from exc
    if not isinstance(fields, dict):
        raise IntentError("intent endpoint answered JSON that is not an object")
    city = fields.get("city")
    try:
        return Intent(
            name=fields.get("intent"),
            city=normalise_city(city) if isinstance(city, str) else None,
            category=fields.get("category"),
            period_start=fields.get("period_start"),
            period_end=fields.get("period_end"),
            hold=bool(fields.get("hold", False)),
            source="llm",
        )
    except ValidationError as exc:
        raise IntentError(f"intent endpoint answered an invalid intent: {exc}") from exc

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

import json
import logging
from collections.abc import Sequence
from datetime import datetime, tzinfo
from typing import Any, Final
from zoneinfo import ZoneInfo

from pydantic import SecretStr

from hermesbus.base.lifecycle import Service
from hermesbus.errors import IntentError
from hermesbus.processors.chat import URL_SETTING, ChatEndpoint, redact_url
from hermesbus.processors.conversation._intent import DEFAULT_TIMEZONE
from hermesbus.processors.flow import Intent as FlowIntent

__all__ = ["URL_SETTING", "HttpIntentParser", "redact_url"]

log = logging.getLogger(__name__)


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
        self.endpoint = ChatEndpoint(
            base_url, model=model, api_key=api_key, timeout_s=timeout_s, what="intent endpoint"
        )
        self.url = self.endpoint.url
        self.safe_url = self.endpoint.safe_url
        """The endpoint as logs and errors name it (no userinfo, no query)."""
        self.zone: tzinfo = zone if zone is not None else ZoneInfo(DEFAULT_TIMEZONE)
        self.model = model

    async def start(self) -> None:
        await self.endpoint.start()

    async def stop(self) -> None:
        await self.endpoint.stop()

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
            "temperature": 0,
            "response_format": {"type": "json_object"},
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": text},
            ],
        }
        return _classified(await self.endpoint.post(request), intents)


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


def _content(answer: Any) -> str:
    try:
        content = answer["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise IntentError("intent endpoint answer has no choices[0].message.content") from exc
    if not isinstance(content, str):
        raise IntentError("intent endpoint answer content is not text")
    return content

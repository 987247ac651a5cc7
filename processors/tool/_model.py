"""The model behind a flow's agent state: asked by the tool processor, answered as data.

A ``ModelRequest`` names the state's allow-list; :class:`ChatModel` offers the model
exactly those tools, as chat-completions functions built from their pinned input schemas
and their approved descriptions (an MCP tool's changed description never reaches it), and
turns the answer into a ``ModelAnswer``. What the model says is checked here, never run:
a call to a tool outside the allow-list, to a tool not registered, with arguments that are
not a JSON object or that the tool's input schema refuses, a second call to the same tool
in one answer, or one past :data:`MAX_CHOICES`, is kept with its ``refusal`` and does not
run. A model that fails gives an answer with ``error`` (nothing raises: the flow decides).
In a replay the recorded answers stand in for the model (:class:`RecordedModel`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

from hermesbus.base.lifecycle import Service
from hermesbus.contract.envelope import Envelope
from hermesbus.contract.payloads import ModelAnswer, ModelChoice, ModelRequest
from hermesbus.errors import IntentError
from hermesbus.processors.chat import ChatEndpoint, content_of
from hermesbus.processors.tool._spec import ToolSpec
from hermesbus.processors.tool._verify import schema_error

__all__ = [
    "MAX_CHOICES",
    "MODEL_PORT",
    "ChatModel",
    "ModelPort",
    "RecordedModel",
    "SpecSource",
    "checked_answer",
    "functions_of",
]

log = logging.getLogger(__name__)

MODEL_PORT: Final = "model"
"""The key of the :class:`ModelPort` in the tool processor's ports."""
MAX_CHOICES: Final = 8
"""Tool calls of one model answer that may run; the rest are refused."""
MAX_KEPT: Final = 16
"""Tool calls of one model answer kept at all (the rest are dropped, said in the log)."""
MAX_COMPLETION_TOKENS: Final = 4_096
"""The most tokens one round may ask the model to write (of what is left of the state's)."""
MAX_CONTENT: Final = 4_000
"""Characters of the model's text kept (the rest is cut)."""
_MAX_DESCRIPTION: Final = 1_000
_MAX_ID: Final = 64


class ModelPort(Protocol):
    """What the tool handler needs to answer a ``ModelRequest`` (``ports["model"]``)."""

    async def answer(self, request: ModelRequest, envelope: Envelope) -> ModelAnswer: ...


class SpecSource(Protocol):
    """Where the offered tools' specs are read (a tool store)."""

    async def get_spec(self, name: str) -> ToolSpec | None: ...


def functions_of(specs: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The chat-completions ``tools`` for ``specs``: name, approved description, input
    schema (a tool that declares none takes any object)."""
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description[:_MAX_DESCRIPTION],
                "parameters": spec.input_schema or {"type": "object"},
            },
        }
        for spec in specs
    ]


class ChatModel(Service):
    """The live model: ``HERMES_LLM_URL``'s chat completions with tool calling."""

    def __init__(self, endpoint: ChatEndpoint, specs: SpecSource) -> None:
        self.endpoint = endpoint
        self._specs = specs
        self.requests = 0
        """Requests sent to the endpoint (for tests and doctor)."""

    async def start(self) -> None:
        await self.endpoint.start()

    async def stop(self) -> None:
        await self.endpoint.stop()

    async def answer(self, request: ModelRequest, envelope: Envelope) -> ModelAnswer:
        offered: dict[str, ToolSpec] = {}
        for name in request.tools:
            spec = await self._specs.get_spec(name)
            if spec is not None:
                offered[name] = spec
        try:
            messages = json.loads(request.messages_json)
        except ValueError:
            return ModelAnswer(
                model=self.endpoint.model, error="the request's messages are not JSON"
            )
        body: dict[str, Any] = {
            "messages": messages,
            "temperature": 0,
            "max_tokens": min(request.max_tokens, MAX_COMPLETION_TOKENS),
        }
        if offered:
            body["tools"] = functions_of(list(offered.values()))
        self.requests += 1
        within_s = envelope.metadata.timeout_ms / 1000 if envelope.metadata.timeout_ms else None
        try:
            raw = await self.endpoint.post(body, within_s=within_s)
            answer = checked_answer(raw, request, offered, model=self.endpoint.model)
        except IntentError as exc:
            log.warning("agent %r: the model failed: %s", request.agent, exc)
            return ModelAnswer(model=self.endpoint.model, error=str(exc)[:500])
        if answer.tokens == 0:  # no usage said: counted by the text's size, never as free
            told = len(json.dumps(body, ensure_ascii=False)) + len(json.dumps(raw, default=str))
            answer = answer.model_copy(update={"tokens": max(1, told // 4)})
        return answer


def checked_answer(
    raw: Any, request: ModelRequest, offered: Mapping[str, ToolSpec], *, model: str = ""
) -> ModelAnswer:
    """The model's raw answer as a ``ModelAnswer``, each call it chose checked against the
    allow-list and the tool's input schema (a refused call carries why). IntentError: the
    answer is not a chat completion."""
    message = content_of(raw)
    content = message.get("content")
    text = content[:MAX_CONTENT] if isinstance(content, str) else ""
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise IntentError("model endpoint answer's tool_calls is not a list")
    if len(calls) > MAX_KEPT:
        log.warning("agent %r: %d calls in one answer, the first %d kept", request.agent,
                    len(calls), MAX_KEPT)  # fmt: skip
    choices: list[ModelChoice] = []
    taken: set[str] = set()
    for index, call in enumerate(calls[:MAX_KEPT]):
        choice = _choice(call, index, request, offered, taken, runnable=len(taken) < MAX_CHOICES)
        if not choice.refusal:
            taken.add(choice.tool)
        else:
            log.warning("agent %r: refused %r: %s", request.agent, choice.tool, choice.refusal)
        choices.append(choice)
    finish = raw.get("choices", [{}])[0].get("finish_reason") if isinstance(raw, dict) else None
    if finish == "length":  # a half answer is no answer, text or calls alike
        raise IntentError("the model's answer was cut off at its token limit")
    if not choices and not text.strip():
        raise IntentError("the model answered neither text nor a tool call")
    usage = raw.get("usage") if isinstance(raw, dict) else None
    tokens = usage.get("total_tokens") if isinstance(usage, dict) else None
    named = raw.get("model") if isinstance(raw, dict) else None
    return ModelAnswer(
        content=text,
        choices=tuple(choices),
        tokens=tokens if isinstance(tokens, int) and 0 <= tokens < 2**31 else 0,
        model=named[:100] if isinstance(named, str) and named else model,
    )


def _choice(
    call: Any,
    index: int,
    request: ModelRequest,
    offered: Mapping[str, ToolSpec],
    taken: set[str],
    *,
    runnable: bool,
) -> ModelChoice:
    function = call.get("function") if isinstance(call, dict) else None
    given_id = call.get("id") if isinstance(call, dict) else None
    call_id = given_id[:_MAX_ID] if isinstance(given_id, str) and given_id else f"call_{index}"
    name = function.get("name") if isinstance(function, dict) else None
    arguments = function.get("arguments") if isinstance(function, dict) else None
    tool = name[:100] if isinstance(name, str) else ""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)

    value, why = _arguments(text)
    spec = offered.get(tool)
    if tool not in request.tools:
        allowed = ", ".join(request.tools) or "none"
        why = f"{tool or 'a nameless tool'} is not a tool of this step (allowed: {allowed})"
    elif spec is None:
        why = f"{tool} is not registered"
    elif tool in taken:
        why = f"{tool} is already called in this answer: call it again after its result"
    elif not runnable:
        why = f"at most {MAX_CHOICES} calls run per answer"
    elif why:
        why = f"the arguments of {tool} {why}"
    elif spec.input_schema is not None and (problem := schema_error(spec.input_schema, value)):
        why = f"the arguments of {tool} do not fit its schema: {problem}"
    if why:
        return ModelChoice(call_id=call_id, tool=tool, arguments_json=text[:4_000], refusal=why)
    canonical = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return ModelChoice(call_id=call_id, tool=tool, arguments_json=canonical)


def _arguments(text: str) -> tuple[Any, str]:
    """The arguments as a JSON object, or why they are not one."""
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return None, "are not JSON"
    if not isinstance(value, dict):
        return None, "are not a JSON object"
    return value, ""


class RecordedModel:
    """The model in a replay: answers each request with the answer recorded for it
    (``cue``: what the tool processor emitted for the input); never calls anything."""

    def __init__(self) -> None:
        self._answer: ModelAnswer | None = None

    def cue(self, recorded: Sequence[Envelope]) -> None:
        self._answer = next(
            (e.payload.body for e in recorded if isinstance(e.payload.body, ModelAnswer)), None
        )

    async def answer(self, request: ModelRequest, envelope: Envelope) -> ModelAnswer:
        if self._answer is None:
            return ModelAnswer(error="no answer was recorded for this request")
        return self._answer

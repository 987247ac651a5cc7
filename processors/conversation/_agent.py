"""An agent state's transcript: what the model is told, round by round (pure functions).

The transcript is chat-completions messages kept in the session's values under
:data:`AGENT_KEY`: the state's prompt, the user's turn, then for each answer with tool
calls the assistant's message and one ``tool`` message per call (its result, its error,
or why it was refused). It is data the conversation builds from envelopes it received, so
a replay builds the same one; the model's words are only ever sent back to the model or
shown to the user as text, never run or rendered as a template.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from hermesbus.contract.payloads import ModelAnswer, ModelChoice, Role, ToolResult, UserTurn
from hermesbus.processors import protocol

__all__ = [
    "AGENT_KEY",
    "MAX_RESULT_CHARS",
    "answered",
    "arguments_of",
    "kept_to",
    "opening",
    "refused_messages",
    "result_messages",
    "user_text",
]

AGENT_KEY: Final = "agent"
"""The session values' key of the running agent state's record (not a template root)."""
MAX_RESULT_CHARS: Final = 2_000
"""Characters of one tool result the model is shown."""
_MAX_TURN_CHARS: Final = 4_000


def user_text(current: object, recent: Sequence[Any]) -> str:
    """The user's words the agent answers: the turn being handled, else the latest turn
    in the session's recent history."""
    if isinstance(current, UserTurn):
        return current.text[:_MAX_TURN_CHARS]
    for message in reversed(recent):
        if message.role is Role.USER:
            text = message.body.get("text")
            if isinstance(text, str):
                return text[:_MAX_TURN_CHARS]
    return ""


def opening(state: str, prompt: str, text: str, turn: str, spent: object = None) -> dict[str, Any]:
    """A new agent record: the system prompt and the user's words. Its rounds and tokens
    start from what this state already spent on the same user ``turn`` (``spent``: the
    record an agent state left, which keeps each state's spending of its turn): a flow
    that comes back to an agent state without the user saying more spends the same
    budget, so a loop of moves through it (or through two agent states) ends."""
    messages = [{"role": "system", "content": prompt}, {"role": "user", "content": text}]
    by_state: dict[str, list[int]] = {}
    if isinstance(spent, dict) and spent.get("turn") == turn:
        by_state = dict(spent.get("spent", {}))
        if isinstance(spent.get("state"), str):
            by_state[spent["state"]] = [int(spent.get("round", 0)), int(spent.get("tokens", 0))]
    rounds, tokens = by_state.get(state, [0, 0])
    return {
        "state": state,
        "turn": turn,
        "round": rounds,
        "tokens": tokens,
        "refused": 0,
        "spent": by_state,
        "messages": messages,
    }


def kept_to(answer: ModelAnswer, allowed: frozenset[str]) -> ModelAnswer:
    """``answer`` with every call that may not run refused here too, whatever the answer
    says: a tool off the state's allow-list, arguments that are not a JSON object (the
    tool processor checks them against the schemas; this is what the cycle needs)."""
    kept = []
    for choice in answer.choices:
        why = choice.refusal
        if not why and choice.tool not in allowed:
            why = f"{choice.tool} is not a tool of this step"
        elif not why and not isinstance(arguments_of(choice), dict):
            why = f"the arguments of {choice.tool} are not a JSON object"
        kept.append(choice.model_copy(update={"refusal": why}) if why else choice)
    return answer.model_copy(update={"choices": tuple(kept)})


def arguments_of(choice: ModelChoice) -> object:
    """A choice's arguments as JSON (None when they are not JSON)."""
    try:
        return json.loads(choice.arguments_json)
    except ValueError:
        return None


def answered(record: Mapping[str, Any], answer: ModelAnswer) -> dict[str, Any]:
    """The record after the model's answer: its tokens counted; for tool calls, the
    assistant's message, a refusal message for each refused call, and the calls that run
    (``calls``: ``[call_id, tool]``) waiting for their results."""
    messages = list(record["messages"])
    refused = [choice for choice in answer.choices if choice.refusal]
    runs = [choice for choice in answer.choices if not choice.refusal]
    if answer.choices:
        messages.append(
            {
                "role": "assistant",
                "content": answer.content or None,
                "tool_calls": [_call(choice) for choice in answer.choices],
            }
        )
        messages += [_told(choice.call_id, f"refused: {choice.refusal}") for choice in refused]
    return {
        **record,
        "tokens": record["tokens"] + answer.tokens,
        "refused": record["refused"] + len(refused),
        "messages": messages,
        "calls": [[choice.call_id, choice.tool] for choice in runs],
    }


def result_messages(record: Mapping[str, Any], results: Sequence[ToolResult]) -> dict[str, Any]:
    """The record with the results of the calls it waited for, one ``tool`` message each
    (a call with no result is told so)."""
    by_tool = {result.tool: result for result in results}
    told = [_told(call_id, _shown(by_tool.get(tool))) for call_id, tool in record.get("calls", [])]
    return {**record, "messages": [*record["messages"], *told], "calls": []}


def refused_messages(record: Mapping[str, Any], tool: str, sentence: str) -> dict[str, Any]:
    """The record after the dispatcher refused ``tool`` of the calls it waited for (the
    user may not make it): that call told ``sentence``, the others that they did not run."""
    told = [
        _told(
            call_id,
            f"refused: {sentence}"
            if name == tool
            else "not run, or its result dropped: another call of this answer was refused",
        )
        for call_id, name in record.get("calls", [])
    ]
    refused = int(record.get("refused", 0)) + 1
    return {**record, "messages": [*record["messages"], *told], "calls": [], "refused": refused}


def _shown(result: ToolResult | None) -> str:
    if result is None:
        return "error: no result"
    if result.status_code == protocol.OK:
        return result.result_json[:MAX_RESULT_CHARS]
    return f"error {result.status_code}: {(result.error or '')[:MAX_RESULT_CHARS]}"


def _call(choice: ModelChoice) -> dict[str, Any]:
    return {
        "id": choice.call_id,
        "type": "function",
        "function": {"name": choice.tool, "arguments": choice.arguments_json},
    }


def _told(call_id: str, content: str) -> dict[str, str]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}

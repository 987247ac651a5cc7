"""A stand-in conversation processor: answers each user turn with ``echo: <text>``.

``hermesbus up`` runs it until the real processors arrive (issue #4), so the
runtime, the broker and the client can be tried end to end. It keeps a count of
turns per session, to show state surviving restarts.
"""

from __future__ import annotations

from hermesbus.envelope import Envelope
from hermesbus.payloads import Payload, Reply, UserTurn
from hermesbus.runtime import HandlerInput, Outcome

__all__ = ["NAME", "echo"]

NAME = "echo"


async def echo(inp: HandlerInput) -> Outcome:
    """Reply to a user turn; anything else addressed to the conversation is left alone."""
    envelope = inp.envelope
    body = envelope.payload.body
    if not isinstance(body, UserTurn):
        return Outcome()
    turns = int(inp.state.data.get("turns", 0)) + 1
    reply = Envelope(
        message_id=envelope.message_id,  # replaced by an id derived from the input's
        timestamp=envelope.timestamp,
        source=f"conversation:{NAME}",
        target="user:app",
        session_id=envelope.session_id,
        user_id=envelope.user_id,
        trace_id=envelope.trace_id,
        parent_span_id=envelope.span_id or None,
        payload=Payload(task=envelope.payload.task, body=Reply(text=f"echo: {body.text}")),
    )
    return Outcome(emit=(reply,), state={"turns": turns})

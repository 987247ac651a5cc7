"""Envelopes for unit tests: a user turn into the conversation, with overridable fields."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hermesbus import Envelope, Payload, Reply, UserTurn
from hermesbus.contract.fields import Record

T0 = datetime(2024, 5, 16, 9, 30, tzinfo=UTC)


def turn(body: Record | None = None, **fields: Any) -> Envelope:
    """A user turn (``body`` defaults to one saying the message id); any field overridable."""
    message_id = fields.pop("message_id", "m1")
    values: dict[str, Any] = {
        "message_id": message_id,
        "timestamp": T0,
        "source": "app:web",
        "target": "conversation:in",
        "session_id": "s1",
        "user_id": "u1",
        "trace_id": "t1",
        "payload": Payload(body=body or UserTurn(text=message_id)),
    }
    return Envelope(**{**values, **fields})


def reply_to(turn: Envelope, text: str, trace_id: str | None = None) -> Envelope:
    """The conversation's reply to ``turn``, back to its source; a decoy if ``trace_id`` differs."""
    return Envelope(
        message_id=f"reply-{turn.message_id}-{text}",
        timestamp=turn.timestamp,
        source="conversation:S1",
        target=turn.source,
        session_id=turn.session_id,
        user_id=turn.user_id,
        trace_id=trace_id or turn.trace_id,
        causation_id=turn.message_id,
        payload=Payload(body=Reply(text=text)),
    )

"""Messages (role, content type, parent) and the session history kept under a token budget.

Recent messages stay verbatim; older ones are folded into a summary by a fixed rule (no
model call, so a replay folds identically); key facts are pinned apart and never folded.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

from hermesbus.contract.fields import Millis, NonEmpty
from hermesbus.contract.payloads import ContentType, Role

__all__ = [
    "HISTORY_BUDGET_TOKENS",
    "MIN_RECENT",
    "History",
    "Message",
    "estimate_tokens",
    "message_text",
    "new_message",
    "render_pinned",
]

HISTORY_BUDGET_TOKENS: Final = 600
"""Tokens the history (recent + summary + pinned facts) may take."""
MIN_RECENT: Final = 2
"""Messages kept verbatim whatever the budget: the turn being answered and its answer."""
_PIECE_CHARS: Final = 16

MetaValue = StrictBool | StrictInt | StrictFloat | StrictStr


_CJK: Final = re.compile(
    "["
    "\u3400-\u9fff"  # CJK ideographs (+ extension A)
    "\uf900-\ufaff"  # compatibility ideographs
    "\u3000-\u303f"  # CJK punctuation
    "\uff00-\uffef"  # full-width forms (，：)
    "]"
)


def estimate_tokens(text: str) -> int:
    """CJK characters count one token each; other text about four characters per token."""
    cjk = len(_CJK.findall(text))
    return cjk + math.ceil((len(text) - cjk) / 4)


@functools.lru_cache(maxsize=4096)
def _counted(text: str) -> int:
    """:func:`estimate_tokens` remembered: the budget is checked several times an envelope
    over the same recent messages."""
    return estimate_tokens(text)


class Message(BaseModel):
    """One message of a session: who said what, of which kind, in answer to which message."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: NonEmpty
    session_id: NonEmpty
    role: Role
    content_type: ContentType
    body: dict[str, Any]
    """Structured content: ``{"text"}``, plus ``attachments`` or ``tool``/``status_code``."""
    timestamp: Millis
    parent_id: str | None = None
    metadata: dict[str, MetaValue] = Field(default_factory=dict)


def _content(body: Mapping[str, Any]) -> str:
    """The body's text and its attachment URIs: both go into a model context."""
    uris = body.get("attachments") or []
    return " ".join([str(body.get("text", "")), *(str(uri) for uri in uris)]).strip()


def message_text(message: Message) -> str:
    """The text a message contributes to the model context (what tokens are counted on),
    attachment URIs included."""
    return f"{message.role.value}: {_content(message.body)}"


def _piece(message: Message) -> str:
    text = str(message.body.get("text", ""))
    clipped = text if len(text) <= _PIECE_CHARS else text[:_PIECE_CHARS] + "…"
    return f"{message.role.value}:{clipped}"


class History(BaseModel):
    """Recent messages verbatim plus a folded summary; JSON-serialisable session state."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    recent: tuple[Message, ...] = ()
    summary_pieces: tuple[str, ...] = ()
    folded: int = 0
    """How many messages were folded into the summary so far."""

    @property
    def summary(self) -> str:
        if not self.folded:
            return ""
        dropped = "…" if self.folded > len(self.summary_pieces) else ""
        return f"[已折叠{self.folded}条]{dropped}" + "；".join(self.summary_pieces)

    def tokens(self, pinned: Mapping[str, str]) -> int:
        """Tokens of what would go into a model context: pinned facts, summary, recent."""
        return (
            _counted(render_pinned(pinned))
            + _counted(self.summary)
            + sum(_counted(message_text(m)) for m in self.recent)
        )

    def add(
        self,
        message: Message,
        pinned: Mapping[str, str],
        budget: int = HISTORY_BUDGET_TOKENS,
    ) -> History:
        """Append ``message`` and fold the oldest messages until the budget holds."""
        history = self.model_copy(update={"recent": (*self.recent, message)})
        while history.tokens(pinned) > budget and len(history.recent) > MIN_RECENT:
            history = history._fold_oldest(budget)
        return history

    def _fold_oldest(self, budget: int) -> History:
        oldest, *rest = self.recent
        pieces = (*self.summary_pieces, _piece(oldest))
        while len(pieces) > 1 and estimate_tokens("；".join(pieces)) > budget // 4:
            pieces = pieces[1:]  # the summary keeps its newest pieces within a quarter
        return History(recent=tuple(rest), summary_pieces=pieces, folded=self.folded + 1)


def render_pinned(pinned: Mapping[str, str]) -> str:
    """Pinned facts as one line, in key order (stable whatever the insertion order)."""
    return "；".join(f"{key}={pinned[key]}" for key in sorted(pinned))


def new_message(
    *,
    message_id: str,
    session_id: str,
    role: Role,
    text: str,
    timestamp: datetime,
    parent_id: str | None = None,
    content_type: ContentType = ContentType.TEXT,
    extra: Mapping[str, Any] | None = None,
    metadata: Mapping[str, MetaValue] | None = None,
) -> Message:
    """A message whose body is ``{"text": text, **extra}``; tokens go into its metadata."""
    body = {"text": text, **(extra or {})}
    meta: dict[str, MetaValue] = {"tokens": estimate_tokens(_content(body)), **(metadata or {})}
    return Message(
        id=message_id,
        session_id=session_id,
        role=role,
        content_type=content_type,
        body=body,
        timestamp=timestamp,
        parent_id=parent_id,
        metadata=meta,
    )

"""The expense-report demo: two conversations against the running stack.

A goes S1 -> S5 and submits; B stops before submitting ("等等，住宿费超标了，
先不提交") and ends in S5 with the unfinished report in mid-term memory. The app dates
its turns on 2024-06-03, the walkthrough's day, so "上个月" is May 2024 and the fixture trip
of 5月12-15日 falls in it; timers are due by delay, so the old dates do not fire them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hermesbus.client import CONVERSATION_TARGET, Client, ClientSettings, says_more
from hermesbus.contract.envelope import Envelope
from hermesbus.contract.payloads import Attachment, Payload, Reply, UserTurn
from hermesbus.errors import ReplyTimeout

__all__ = [
    "DEMO_START",
    "DEMO_USER",
    "FIGURES",
    "PHOTOS",
    "Conversation",
    "Said",
    "Turn",
    "conversations",
    "missing",
    "reply_text",
    "run",
    "talk",
]

DEMO_START = datetime(2024, 6, 3, 1, 0, tzinfo=UTC)
"""2024-06-03 09:00 in Shenzhen: the demo app's clock starts here."""
DEMO_USER = "u_xyz789"
"""The fixture company's employee 张三 (a hashed user id, as apps send them)."""
PHOTOS = (
    Attachment(name="photo-1.jpg", media_type="image/jpeg", uri="demo://expense/photo-1.jpg"),
    Attachment(name="photo-2.jpg", media_type="image/jpeg", uri="demo://expense/photo-2.jpg"),
)
"""The two photos the user uploads: three invoices and the itinerary."""


FIGURES = (
    "采购部",
    "125,000",
    "处理中，约 30 秒",
    "3张发票",
    "8,240",
    "5月12-15日",
    "住宿费3200接近标准上限3500",
    "张主管",
)
"""What the walkthrough shows the user; every conversation's replies must show each of them."""


@dataclass(frozen=True, slots=True)
class Turn:
    text: str
    attachments: tuple[Attachment, ...] = ()


_OPENING = (
    Turn("我要报上个月去深圳的差旅费"),
    Turn("[上传两张图片]", PHOTOS),
    Turn("不用，就这三张"),
)


@dataclass(frozen=True, slots=True)
class Conversation:
    """One scripted session: its name, id, trace and the user's turns."""

    name: str
    session_id: str
    trace_id: str
    turns: tuple[Turn, ...]


@dataclass
class Said:
    """What happened in one conversation: every reply, in the order it arrived."""

    conversation: Conversation
    replies: list[tuple[Turn, Envelope]] = field(default_factory=list)

    @property
    def last(self) -> Envelope | None:
        return self.replies[-1][1] if self.replies else None


def conversations(run: str | None = None) -> tuple[Conversation, Conversation]:
    """A (submit) and B (hold); ``run`` keeps sessions of reruns apart."""
    run = run or uuid.uuid4().hex[:6]
    return (
        Conversation(
            "A: 提交",
            f"sess_456-{run}",
            f"trace_789-{run}",
            (*_OPENING, Turn("确认")),
        ),
        Conversation(
            "B: 先不提交",
            f"sess_789-{run}",
            f"trace_790-{run}",
            (*_OPENING, Turn("等等，住宿费超标了，先不提交")),
        ),
    )


async def talk(
    app: Client,
    conversation: Conversation,
    show: Callable[[str, Envelope | Turn], None],
    *,
    timeout: float = 90.0,  # noqa: ASYNC109 - per turn, and it raises ReplyTimeout
    clock: Callable[[], datetime] | None = None,
) -> Said:
    """Say each turn and wait for the conversation's answer (a flow's last reply to the
    turn: its others say ``more``), showing every reply as it comes. ``clock`` dates the
    turns (default: the walkthrough's day, advancing with real time)."""
    said = Said(conversation)
    clock = clock or _Clock()
    async with app.replies(conversation.session_id) as replies:
        for turn in conversation.turns:
            show("user", turn)
            await app.send(_turn(conversation, turn, clock()))
            try:
                async with asyncio.timeout(timeout):
                    async for reply in replies:
                        show("reply", reply)
                        said.replies.append((turn, reply))
                        if reply.source.startswith("conversation:") and not says_more(reply):
                            break  # the conversation's answer; notices come from mcp:dispatcher
            except TimeoutError as exc:
                raise ReplyTimeout(
                    f"{conversation.name}: no answer to {turn.text!r} within {timeout:g} s"
                ) from exc
    return said


class _Clock:
    """The demo app's clock: the walkthrough's day, advancing with real time."""

    def __init__(self) -> None:
        self._t0 = time.monotonic()

    def __call__(self) -> datetime:
        return DEMO_START + timedelta(seconds=time.monotonic() - self._t0)


def _turn(conversation: Conversation, turn: Turn, now: datetime) -> Envelope:
    return Envelope(
        message_id=str(uuid.uuid4()),
        timestamp=now,
        source="app:demo",
        target=CONVERSATION_TARGET,
        session_id=conversation.session_id,
        user_id=DEMO_USER,
        trace_id=conversation.trace_id,
        span_id=uuid.uuid4().hex[:16],
        payload=Payload(body=UserTurn(text=turn.text, attachments=turn.attachments)),
    )


def reply_text(envelope: Envelope) -> str:
    body = envelope.payload.body
    if not isinstance(body, Reply):
        return f"({type(body).__name__})"
    text = body.text
    if body.choices:
        text += "  [" + " / ".join(body.choices) + "]"
    return text


async def run(
    bootstrap: str,
    prefix: str,
    show: Callable[[str, Envelope | Turn], None],
    settings: ClientSettings | None = None,
) -> tuple[Said, Said]:
    """Both conversations, one after the other, through a client of the running stack
    (with the program's ``settings``: its keys and schema registry)."""
    first, second = conversations()
    async with Client(
        settings=settings, bootstrap=bootstrap, topic_prefix=prefix, name="demo"
    ) as app:
        return await talk(app, first, show), await talk(app, second, show)


def missing(said: Said, ending: str) -> list[str]:
    """What the conversation failed to show: a figure of the walkthrough, or the ending in S5."""
    texts = " ".join(reply_text(reply) for _, reply in said.replies)
    problems = [f"no {figure!r} in any reply" for figure in FIGURES if figure not in texts]
    last = said.last
    if last is None or last.source != "conversation:S5":
        problems.append(f"did not end in S5 (last reply from {last.source if last else None})")
    elif ending not in reply_text(last):
        problems.append(f"the last reply does not say {ending!r}")
    return problems

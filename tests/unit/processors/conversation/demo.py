"""The expense-report walkthrough's figures and a driver that feeds the handler envelopes.

The driver keeps the session state between envelopes as the runtime would, remembers
the timers the handler armed, and builds the envelopes the dispatcher and the runtime
would send back (ToolResults for the pending cycle, TimerFired for an armed purpose).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from hermesbus import (
    Attachment,
    ContextSnapshot,
    Envelope,
    ErrorReport,
    MemoryContext,
    MemoryWrite,
    Payload,
    Reply,
    StateSnapshot,
    ToolCall,
    ToolResult,
    ToolResults,
    UserTurn,
)
from hermesbus.demo.scripted import ScriptedTools
from hermesbus.processors import protocol
from hermesbus.processors.conversation import DEFAULT_TIMEZONE, NAME, TOPIC, handle
from hermesbus.processors.dispatcher import StaticHealth
from hermesbus.processors.flow import expense_hooks
from hermesbus.runtime import Outcome, SessionState
from hermesbus.testing import Armed, Harness

T0 = datetime(2024, 6, 3, 9, 0, tzinfo=UTC)
USER = "u_xyz789"

ORG = {
    "user_id": USER,
    "name": "张三",
    "dept": "采购部",
    "manager": "张主管",
    "approval_chain": ["主管", "总监"],
    "symbols": {"user_dept": "采购部"},
    "facts": [{"subject": f"user:{USER}", "relation": "belongs_to", "object": "dept:采购部"}],
}
FINANCE = {"dept": "采购部", "budget_remaining": 125000, "currency": "CNY"}
OCR = {
    "invoices": [
        {
            "id": "inv-001",
            "category": "交通",
            "amount": 2840,
            "date": "2024-05-12",
            "confidence": 0.97,
        },
        {
            "id": "inv-002",
            "category": "住宿",
            "amount": 3200,
            "date": "2024-05-15",
            "confidence": 0.95,
        },
        {
            "id": "inv-003",
            "category": "餐饮",
            "amount": 2200,
            "date": "2024-05-14",
            "confidence": 0.70,
        },
    ],
    "total": 8240,
    "currency": "CNY",
    "confidence_min": 0.70,
    "itinerary": {"city": "深圳", "from": "2024-05-12", "to": "2024-05-15"},
    "symbols": {"invoices": "inv-001,inv-002,inv-003"},
}
TRIP = {
    "verified": True,
    "trip_id": "trip_shenzhen_2024_05",
    "city": "深圳",
    "from": "2024-05-12",
    "to": "2024-05-15",
    "facts": [
        *(
            {
                "subject": f"invoice:{i}",
                "relation": "occurred_during",
                "object": "trip:trip_shenzhen_2024_05",
            }
            for i in ("inv-001", "inv-002", "inv-003")
        ),
        {"subject": "trip:trip_shenzhen_2024_05", "relation": "taken_by", "object": f"user:{USER}"},
    ],
}
RULES = {"valid": True, "warnings": ["住宿费3200接近标准上限3500"], "approver": "张主管"}
STEPS = {
    "org_tool": ("已比对LDAP目录中用户状态",),
    "trip_tool": ("已比对差旅系统行程记录",),
    "rule_engine_tool": ("已按采购部差旅标准校验",),
}
PHOTOS = (
    Attachment(name="photo-1.jpg", media_type="image/jpeg", uri="demo://expense/photo-1.jpg"),
    Attachment(name="photo-2.jpg", media_type="image/jpeg", uri="demo://expense/photo-2.jpg"),
)


def read(
    text: str, now: datetime, *, attachments: int = 0, zone: str = DEFAULT_TIMEZONE
) -> tuple[str | None, dict[str, str]]:
    """The expense report's parser hook on one turn, as the engine calls it (the turn's
    local time in ``zone``): its intent (None: unclear) and entities."""
    local = now.astimezone(ZoneInfo(zone)).isoformat()
    turn = {"text": text, "attachments": attachments, "local": local}
    answer = expense_hooks.read_turn({"turn": turn})
    return answer["intent"], answer["entities"]


def submitted(report_id: str) -> dict[str, Any]:
    return {
        "status": "submitted",
        "report_id": report_id,
        "approver": "张主管",
        "facts": [
            {
                "subject": f"expense:{report_id}",
                "relation": "approved_by",
                "object": "person:张主管",
            }
        ],
    }


def snap(envelope: Envelope) -> ContextSnapshot:
    if envelope.snapshot is None:
        raise AssertionError(f"{envelope.target} envelope without a snapshot")
    return envelope.snapshot


def bodies(outcome: Outcome, kind: type) -> list[Any]:
    return [e.payload.body for e in outcome.emit if isinstance(e.payload.body, kind)]


def replies(outcome: Outcome) -> list[Reply]:
    return bodies(outcome, Reply)


def the_reply(outcome: Outcome) -> Reply:
    (reply,) = replies(outcome)
    return reply


def moves(outcome: Outcome) -> list[tuple[str | None, str]]:
    return [(s.previous_state, s.snapshot.state_id) for s in bodies(outcome, StateSnapshot)]


def writes(outcome: Outcome) -> list[MemoryWrite]:
    return bodies(outcome, MemoryWrite)


@dataclass
class Driver:
    """Feeds one session's envelopes to the handler through :class:`Harness` (state and
    timers carried as the runtime carries them), and builds the envelopes others send."""

    session: str = "sess_456"
    ports: dict[str, Any] = field(default_factory=dict)
    now: datetime = T0
    calls: list[Envelope] = field(default_factory=list)
    count: int = 0
    path: list[tuple[str | None, str]] = field(default_factory=list)
    harness: Harness = field(init=False)

    def __post_init__(self) -> None:
        self.harness = Harness().processor(NAME, handle, [TOPIC], ports=self.ports)

    @property
    def state(self) -> SessionState:
        return self.harness.state(NAME, self.session)

    @state.setter
    def state(self, state: SessionState) -> None:
        self.harness.seed(NAME, self.session, state.data)

    @property
    def armed(self) -> dict[str, Armed]:
        """The session's armed timers by purpose."""
        return {a.purpose: a for a in self.harness.timers(NAME, self.session)}

    def working(self) -> dict[str, Any]:
        """The expense report's working data (its flow's context)."""
        return dict(self.state.data["values"]["context"])

    def _id(self, kind: str) -> str:
        self.count += 1
        return f"{self.session}-{kind}-{self.count}"

    def _envelope(self, body: Any, **fields: Any) -> Envelope:
        values = {
            "message_id": self._id("in"),
            "timestamp": self.now,
            "source": "app:demo",
            "target": "conversation:in",
            "session_id": self.session,
            "user_id": USER,
            "trace_id": f"trace-{self.session}",
            "span_id": "span0",
            "payload": Payload(task="expense", body=body),
        }
        return Envelope(**{**values, **fields})

    async def send(self, envelope: Envelope) -> Outcome:
        outcome = (await self.harness.handle(NAME, envelope)).outcome
        calls = [e for e in outcome.emit if isinstance(e.payload.body, ToolCall)]
        if calls:
            self.calls = calls
        self.path.extend(moves(outcome))
        return outcome

    async def say(self, text: str, attachments: tuple[Attachment, ...] = ()) -> Outcome:
        turn = UserTurn(text=text, attachments=attachments)
        return await self.send(self._envelope(turn))

    def cycle(self) -> tuple[str, str, str]:
        """(cycle id, task, target state) of the latest calls."""
        call = self.calls[0]
        return str(call.payload.context["cycle"]), call.payload.task, call.source

    def answer(
        self,
        results: dict[str, dict[str, Any]],
        *,
        context: MemoryContext | None = None,
        status: dict[str, int] | None = None,
        stale_since: datetime | None = None,
        cycle: str | None = None,
    ) -> Envelope:
        """The dispatcher's one ToolResults for the pending cycle, tools in call order."""
        current, task, target = self.cycle()
        tools = [c.payload.body.tool for c in self.calls if isinstance(c.payload.body, ToolCall)]
        out = []
        for tool in tools:
            code = (status or {}).get(tool, 200)
            out.append(
                ToolResult(
                    tool=tool,
                    status_code=code,
                    result_json=json.dumps(results.get(tool, {}), ensure_ascii=False),
                    verified=code == 200,
                    verification_steps=STEPS.get(tool, ()),
                    stale=stale_since is not None and tool == "finance_tool",
                    stale_since=stale_since if tool == "finance_tool" else None,
                )
            )
        body = ToolResults(results=tuple(out), context=context or MemoryContext())
        return self._envelope(
            body,
            source="mcp:dispatcher",
            target=target,
            payload=Payload(task=task, context={"cycle": cycle or current}, body=body),
        )

    def error(self, component: str, code: str, *, retryable: bool = False) -> Envelope:
        current, task, target = self.cycle()
        body = ErrorReport(
            component=component, code=code, message="failed", advice="稍后重试", retryable=retryable
        )
        return self._envelope(
            body,
            source="mcp:dispatcher",
            target=target,
            payload=Payload(task=task, context={"cycle": current}, body=body),
        )

    def fire(self, purpose: str) -> Envelope:
        """The TimerFired the runtime sends when ``purpose`` is due (time moves to due_at)."""
        armed = self.armed[purpose]
        self.now = armed.due_at
        return armed.envelope

    def later(self, **delta: float) -> None:
        self.now += timedelta(**delta)


async def to_s2(driver: Driver) -> Outcome:
    """S1 -> S2: the expense intent, answered by org_tool and finance_tool."""
    await driver.say("我要报上个月去深圳的差旅费")
    return await driver.send(driver.answer({"org_tool": ORG, "finance_tool": FINANCE}))


async def to_s3(driver: Driver) -> Outcome:
    """S2 -> S3: the two photos, answered by the OCR pre-check."""
    await to_s2(driver)
    await driver.say("[上传两张图片]", PHOTOS)
    return await driver.send(driver.answer({"ocr_tool": OCR}))


async def to_review(driver: Driver) -> Outcome:
    """S1 -> S2 -> S2 -> S3 -> S3.1 with the demo's figures; the outcome of the last step."""
    await driver.say("我要报上个月去深圳的差旅费")
    await driver.send(driver.answer({"org_tool": ORG, "finance_tool": FINANCE}))
    driver.later(seconds=20)
    await driver.say("[上传两张图片]", PHOTOS)
    driver.later(seconds=2)
    await driver.send(driver.answer({"ocr_tool": OCR}))
    driver.later(seconds=1)
    return await driver.send(driver.answer({"trip_tool": TRIP, "rule_engine_tool": RULES}))


async def to_confirm(driver: Driver) -> Outcome:
    await to_review(driver)
    driver.later(seconds=10)
    return await driver.say("不用，就这三张")


def user_turn(session: str, n: int, text: str, seconds: float) -> Envelope:
    """The demo user's ``n``-th turn of ``session`` (its own trace), ``seconds`` after
    T0; a turn saying 上传 carries the two photos."""
    body = UserTurn(text=text, attachments=PHOTOS if "上传" in text else ())
    return Envelope(
        message_id=f"{session}-turn-{n}",
        timestamp=T0 + timedelta(seconds=seconds),
        source="app:web",
        target="conversation:in",
        session_id=session,
        user_id=USER,
        trace_id=f"{session}-trace-{n}",
        payload=Payload(task="expense", body=body),
    )


DEMO_TOOLS = ("org_tool", "finance_tool", "ocr_tool", "trip_tool", "rule_engine_tool")


def demo_tools(*names: str, **answers: Any) -> tuple[ScriptedTools, StaticHealth]:
    """Scripted tools answering as the demo's do (``answers`` replace some: a dict, or a
    function of the call), and every one of them healthy (20 ms, all successes). ``names``:
    only those tools (default: the five of the demo)."""
    chosen = names or DEMO_TOOLS
    fixed: dict[str, Any] = {
        "org_tool": ORG,
        "finance_tool": FINANCE,
        "ocr_tool": OCR,
        "trip_tool": TRIP,
        "rule_engine_tool": RULES,
    }
    script = {name: answers.get(name, fixed[name]) for name in chosen}
    healthy = StaticHealth(protocol.ToolHealth(name, 20.0, 1.0) for name in chosen)
    return ScriptedTools(script, steps=STEPS), healthy

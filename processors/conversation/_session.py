"""The conversation's per-session state (saved as JSON) and the snapshot drawn from it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hermesbus.contract.fields import from_epoch_ms
from hermesbus.contract.snapshot import ContextSnapshot, ToolCallTrace
from hermesbus.errors import StoreError
from hermesbus.processors.conversation._history import History
from hermesbus.processors.conversation._machine import START
from hermesbus.processors.conversation._texts import LOW_CONFIDENCE
from hermesbus.runtime import carried_model

__all__ = [
    "MAX_PROBLEMS",
    "MAX_TRACES",
    "Pending",
    "Session",
    "canonical_json",
    "digest",
    "load_session",
    "snapshot_of",
    "summary_of",
]

MAX_TRACES: Final = 16
MAX_PROBLEMS: Final = 10
"""Recent problems (failures, refusals outside a cycle) kept in the session state."""
SUMMARY_CHARS: Final = 50


class Pending(BaseModel):
    """The cycle the conversation waits for: its id, task and tools, and the turn it serves."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cycle: str
    task: str
    tools: tuple[str, ...]
    turn_id: str


class Session(BaseModel):
    """Everything the conversation keeps about one session; small and JSON-serialisable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    state: str | None = None
    entered_at_ms: int = 0
    facts: dict[str, str] = Field(default_factory=dict)
    """Pinned facts (user, goal, city, period, dept, amounts, dates, approver)."""
    turn_id: str = ""
    """The latest user message: it confirms what it answers (``confirmed_by``)."""
    pending: Pending | None = None
    timers: dict[str, str] = Field(default_factory=dict)
    """Armed timer purpose -> token; a fired timer whose token differs is stale."""
    ask: str = ""
    """What the last reply asked: materials, review, review_timeout (validation over 30 s),
    review_failed (a validation tool failed), clarify, preference, confirm, gave_up (the
    5-minute wait expired), upload_failed (the OCR pre-check failed); empty when nothing is
    asked. A question asked again is the same question, for the same reason."""
    ask_pref: dict[str, str] = Field(default_factory=dict)
    preferences: dict[str, str] = Field(default_factory=dict)
    candidates: dict[str, str] = Field(default_factory=dict)
    declined: tuple[str, ...] = ()
    materials: dict[str, Any] = Field(default_factory=dict)
    validation: dict[str, Any] = Field(default_factory=dict)
    steps: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    notes: tuple[str, ...] = ()
    """Stale/degraded notices for the next reply."""
    stale: bool = False
    degraded: bool = False
    context: dict[str, bool | int | float | str] = Field(default_factory=dict)
    """What the user stated that every later cycle carries (a flow's ``carry``: the expense
    report's ``user_tolerates_blur``, ``ocr_confidence_min``)."""
    locked: bool = False
    """S4's lock: the validated report is not changed except through 修改."""
    problems: tuple[dict[str, str], ...] = ()
    """The last :data:`MAX_PROBLEMS` error reports (component, code, message, cycle, at)."""
    traces: tuple[dict[str, Any], ...] = ()
    history: History = History()
    outcome: str = ""
    flow: str | None = None
    """The registered flow the session runs (None: the built-in expense report)."""
    flow_version: int | None = None
    """The version of ``flow`` it started with: it keeps it to its end."""
    values: dict[str, Any] = Field(default_factory=dict)
    """A flow's values, by template root: intent, entities, symbols, context, results,
    hooks (the user's and session's ids are the envelope's)."""
    next_action: int = 0
    """The on-enter action of the current state to run next (after the pending cycle)."""
    queued: str = ""
    """The first turn's intent: a move of the start state once its actions are done."""
    asked: dict[str, Any] = Field(default_factory=dict)
    """A flow's last reply (``text``, ``buttons``): asked again when a turn is not understood."""
    flow_summary: str = ""
    """A flow's snapshot summary, rendered from its state's template."""
    failures: int = 0
    """A flow's failures since the user last spoke: past MAX_FAILURES no exit is taken."""
    said_more: bool = False
    """A flow's last reply to the current turn said more would follow."""
    path: tuple[str, ...] = ()
    """The states a flow session went through, in order, each once (frequent paths)."""
    trigger: str = ""
    """The trigger of the move that entered the current state."""
    unshown_steps: tuple[str, ...] = ()
    """The verification steps of tool results a flow has not shown yet: its next reply
    carries them, so what the user reads says how it was checked."""

    def entered_at(self) -> datetime:
        return from_epoch_ms(self.entered_at_ms)


def load_session(data: Mapping[str, Any], session_id: str) -> Session:
    """The saved state, or a fresh session when nothing was saved yet; the very model the
    previous envelope left when the runtime kept it (see ``runtime.ModelState``)."""
    session = carried_model(data, Session)
    if session is not None:
        return session
    try:
        return Session.model_validate(dict(data))
    except ValidationError as exc:
        raise StoreError(
            f"conversation state of session {session_id!r} is invalid", retriable=False
        ) from exc


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, UTF-8 text: the same value always gives the same bytes."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def digest(arguments_json: str) -> str:
    """The argument digest of a tool-call trace: sha256 of the canonical JSON, 12 hex."""
    return hashlib.sha256(arguments_json.encode()).hexdigest()[:12]


_OUTCOMES: Final = {
    "submitted": "已提交报销单{report_id}",
    "cancelled": "用户暂不提交，已保存进度",
    "gave_up": "用户放弃，已保存进度",
    "expired": "会话超时过期，已保存进度",
    "unclear": "意图不明，会话结束",
    "degraded": "工具故障，流程降级结束",
    "failed": "校验未通过，流程结束",
}


def summary_of(session: Session) -> str:
    """The <= 50-character progress line of the snapshot (a flow's from its spec)."""
    if session.flow is not None:
        return session.flow_summary[:SUMMARY_CHARS]
    return _summary(session)[:SUMMARY_CHARS]


def _s1(session: Session) -> str:
    facts = session.facts
    where = "，".join(v for v in (facts.get("city"), facts.get("period")) if v)
    return f"识别意图：差旅报销（{where}）" if where else "识别意图中"


def _s2(session: Session) -> str:
    files = session.materials.get("files") or []
    if files and not session.materials.get("invoices"):
        return f"已上传{len(files)}张发票，待OCR识别"
    return "待上传发票照片和行程单"


def _s3(session: Session) -> str:
    invoices = session.materials.get("invoices") or []
    return f"{len(invoices)}张发票合计{session.facts.get('total', '?')}，校验中"


def _s31(session: Session) -> str:
    if session.ask == "review_timeout":
        return "校验超时，待人工复核"
    if session.ask == "review_failed":
        return "校验失败，待人工复核"
    invoices = session.materials.get("invoices") or []
    low = [i for i in invoices if float(i.get("confidence", 1.0)) < LOW_CONFIDENCE]
    return f"{len(low)}张发票金额模糊，待人工复核"


def _s4(session: Session) -> str:
    if session.ask == "gave_up":
        return "等待材料超时，询问是否放弃"
    if session.ask == "upload_failed":
        return "材料预检失败，询问是否继续上传"
    return "提交中" if session.pending else "校验通过，待用户确认提交"


def _s5(session: Session) -> str:
    line = _OUTCOMES.get(session.outcome, "会话结束")
    return line.format(report_id=session.facts.get("report_id", ""))


_SUMMARIES: Final = {"S1": _s1, "S2": _s2, "S3": _s3, "S3.1": _s31, "S4": _s4, "S5": _s5}


def _summary(session: Session) -> str:
    return _SUMMARIES.get(session.state or START, _s1)(session)


def snapshot_of(session: Session) -> ContextSnapshot:
    """The session's current ``ContextSnapshot`` (traces: tool, args digest, status)."""
    traces = tuple(
        ToolCallTrace(tool=t["tool"], args_digest=t["args_digest"], status_code=t["status_code"])
        for t in session.traces
    )
    return ContextSnapshot(
        state_id=session.state or START,
        entered_at=session.entered_at(),
        tokens_used=session.history.tokens(session.facts),
        summary=summary_of(session),
        tool_calls=traces,
        flow=session.flow,
        flow_version=session.flow_version,
    )

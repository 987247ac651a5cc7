"""The conversation's replies to the user (Chinese, as the demo user writes), with the figures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, timedelta, timezone
from types import MappingProxyType
from typing import Any, Final

from hermesbus.processors.conversation._machine import MACHINE
from hermesbus.processors.conversation._reasons import tool_reason

__all__ = [
    "BLUR_FLOOR",
    "CHOICES_CLARIFY",
    "CHOICES_CONFIRM",
    "CHOICES_GAVE_UP",
    "CHOICES_REVIEW",
    "CHOICES_TIMEOUT",
    "CHOICES_YES_NO",
    "LOW_CONFIDENCE",
    "TIMEOUT_TEXTS",
    "amount",
    "ask_materials",
    "confirm_text",
    "dates_text",
    "degraded_note",
    "error_text",
    "failed_text",
    "materials_text",
    "preference_text",
    "rejected_text",
    "review_text",
    "stale_note",
    "submitted_text",
]

LOW_CONFIDENCE: Final = 0.8
"""Below this OCR confidence an invoice needs the user's review (S3.1)."""

BLUR_FLOOR: Final = 0.70
"""The confidence floor of a blur preference stored without one (what was always asked)."""

CHOICES_REVIEW: Final = ("重新上传", "不用，就这三张")
CHOICES_CLARIFY: Final = ("重新校验", "重新上传", "取消")
CHOICES_CONFIRM: Final = ("确认", "修改", "取消")
CHOICES_GAVE_UP: Final = ("继续上传", "放弃")
CHOICES_TIMEOUT: Final = ("重试", "取消")
CHOICES_YES_NO: Final = ("是", "否")

_TOLERATED: Final = {"preference": "的偏好", "session": "之前的选择"}
_CHINA: Final = timezone(timedelta(hours=8))
"""Refresh times are shown in China time (the demo company's clock), fixed offset."""

UNCLEAR: Final = (
    "抱歉，没能理解您的意图。目前可以帮您提交差旅报销，例如“我要报上个月去深圳的差旅费”。"
)
PENDING: Final = "正在处理您的上一条消息，请稍候。"
CHECKLIST: Final = "发票照片和行程单"
"""What S2 asks for, until its path is frequent and the spec's default is preloaded."""


def ask_materials(checklist: str) -> str:
    return f"请提供{checklist}。"


NO_ATTACHMENT: Final = "没有收到附件，请上传发票照片和行程单。"
UPLOAD_FAILED: Final = "上传的材料未能完成预检，是否继续上传？"
"""Asked again after an OCR pre-check failure (no wait expired: never "5 minutes")."""
VALIDATION_FAILED: Final = "数据校验未能完成，已转人工复核。您可以重试校验或取消。"
"""Asked again after a validation tool failed (not a timeout: never "30 seconds")."""
REUPLOAD: Final = "好的，请重新上传发票照片和行程单。"
MODIFY: Final = "好的，请上传需要修改的材料或说明修改内容。"
CONTINUE_UPLOAD: Final = "好的，请继续上传发票照片和行程单。"
SAVED: Final = "当前进度已保存为未完成报销流程，可随时继续。"
HOLD: Final = "好的，暂不提交。" + SAVED
CANCELLED: Final = "好的，已取消本次报销。" + SAVED
USER_GAVE_UP: Final = "好的，已放弃本次报销。" + SAVED
TIMEOUT_TEXTS: Final = MappingProxyType({t.purpose: t.text for _, t in MACHINE.timeouts()})
"""What the user is told when a wait of the machine fires: each its own text, stating its own
duration (the spec's wait texts)."""
GAVE_UP: Final = MACHINE.wait("s2_wait").text
VALIDATION_TIMEOUT: Final = MACHINE.wait("s3_validation").text
CONTEXT_INVALID: Final = (
    "部分上下文已失效或无法核实（{names}），需要您重新确认：回复“重新校验”重新核对这些信息，"
    "或“重新上传”相关材料。"
)
LOCKED: Final = "报销单已校验并锁定，如需更改材料请先回复“修改”。"
FAILED_S2: Final = "是否继续上传？"
FAILED_S3: Final = "已转人工复核。您可以重试校验或取消。"


def amount(value: Any) -> str:
    """``125000`` -> ``125,000``; fractions keep two decimals."""
    number = float(value)
    return f"{int(number):,}" if number.is_integer() else f"{number:,.2f}"


def _day(text: str) -> date:
    return date.fromisoformat(text)


def dates_text(start: str, end: str) -> str:
    """``2024-05-12``..``2024-05-15`` -> ``5月12-15日``; across months ``5月30日-6月2日``."""
    first, last = _day(start), _day(end)
    if (first.year, first.month) == (last.year, last.month):
        return f"{first.month}月{first.day}-{last.day}日"
    return f"{first.month}月{first.day}日-{last.month}月{last.day}日"


def materials_text(facts: Mapping[str, str], checklist: str = CHECKLIST) -> str:
    """S2: the department and budget, then what to upload."""
    what = "".join(v for v in (facts.get("period_label"), facts.get("city")) if v)
    opening = f"好的，已为您发起{what}差旅报销。" if what else "好的，已为您发起差旅报销。"
    budget = facts.get("budget_remaining")
    currency = facts.get("currency", "CNY")
    dept = f"您所在部门：{facts['dept']}" if facts.get("dept") else ""
    money = f"，部门预算余额 {amount(budget)} {currency}" if budget else ""
    return f"{opening}{dept}{money}。{ask_materials(checklist)}"


def _invoice(invoice: Mapping[str, Any]) -> str:
    return (
        f"{invoice.get('id')} {invoice.get('category', '')} {amount(invoice.get('amount', 0))}"
        f"，置信度 {float(invoice.get('confidence', 0)):.2f}"
    )


def review_text(materials: Mapping[str, Any]) -> str:
    """S3.1: how many invoices, their total, and which are blurred."""
    invoices = materials.get("invoices") or []
    low = [i for i in invoices if float(i.get("confidence", 1.0)) < LOW_CONFIDENCE]
    total = f"{amount(materials.get('total', 0))} {materials.get('currency', 'CNY')}"
    blurred = "；".join(_invoice(i) for i in low)
    return (
        f"检测到{len(invoices)}张发票（合计 {total}），其中{len(low)}张金额模糊（{blurred}），"
        "是否重新上传？"
    )


def confirm_text(materials: Mapping[str, Any], validation: Mapping[str, Any]) -> str:
    """S4: the structured summary the user confirms."""
    invoices = materials.get("invoices") or []
    total = f"{amount(materials.get('total', 0))} {materials.get('currency', 'CNY')}"
    parts = [f"报销单已校验通过：含{len(invoices)}张发票，合计 {total}"]
    trip = validation.get("trip") or {}
    if trip.get("from") and trip.get("to"):
        checked = "已核实" if trip.get("verified") else "未核实"
        parts.append(f"行程单显示往返日期为{dates_text(trip['from'], trip['to'])}（{checked}）")
    warnings = validation.get("warnings") or []
    if warnings:
        parts.append("提醒：" + "；".join(warnings))
    text = "；".join(parts) + "。"
    tolerated = validation.get("tolerated")
    if tolerated in _TOLERATED:
        text += f"已按您{_TOLERATED[tolerated]}接受金额模糊的发票。"
    if validation.get("approver"):
        text += f"审批人：{validation['approver']}。"
    return text + "是否提交？"


def preference_text(name: str, value: str, floor: float = BLUR_FLOOR) -> str:
    """The question before a preference is written; the blur floor asked is the one stored."""
    if name == "ocr_blur_tolerance":
        return f"检测到您多次选择接受金额模糊的发票，是否以后默认接受（置信度不低于{floor:.2f}）？"
    return f"检测到您多次选择“{value}”（{name}），是否设为默认？"


def submitted_text(report_id: str, approver: str) -> str:
    return f"已提交报销单 {report_id}，审批人：{approver}。"


def failed_text(reasons: Sequence[str]) -> str:
    why = "；".join(reasons) or "未通过财务规则校验"
    return f"报销单校验未通过：{why}。" + SAVED


def error_text(component: str, code: str, advice: str) -> str:
    """A failed component, named, with its code and advice (fail fast from the dispatcher);
    the raw detail (tool errors, HTTP bodies) stays in the logs and the session's problems."""
    text = f"{component} 暂时无法完成请求（{code}）"
    advice = advice.strip().rstrip("。.")
    return text + (f"。建议：{advice}。" if advice else "。")


_CHECK_INPUT: Final = "请检查输入"
_ADMIN: Final = "请联系管理员"
_REJECTED_ADVICE: Final = MappingProxyType(
    {401: _ADMIN, 403: _ADMIN, 404: _ADMIN, 407: _ADMIN, 409: _ADMIN}
)
"""Access refused (401, 403, 407), a tool not registered (404), a reused idempotency key
(409): nothing the user typed is wrong."""
REASON_SHOWN: Final = frozenset({400, 404, 422})
"""The 4xx whose tool text is the request's fault and says which part: bad or unprocessable
arguments, something not found. Any other 4xx text (an access refusal naming credentials or
the module allow-list, an upstream body) stays in the logs and the session's problems."""


def rejected_text(tool: str, code: int, error: str | None) -> str:
    """A caller's mistake (a 4xx of ``tool``): what was wrong where the tool's text may be
    shown (REASON_SHOWN), and what to do about it (never "retry later": the same request
    fails the same way; transient 4xx, 408 and 429, are not rejections)."""
    reason = tool_reason(error) if code in REASON_SHOWN else ""
    why = f"：{reason}" if reason else ""
    return f"{tool} 无法处理该请求（{code}）{why}。{_REJECTED_ADVICE.get(code, _CHECK_INPUT)}。"


def stale_note(tool: str, since: datetime | None) -> str:
    """A cached answer, said so: "（预算数据暂未更新，最新刷新时间为14:22）"."""
    label = "预算" if tool == "finance_tool" else tool
    when = since.astimezone(UTC).astimezone(_CHINA).strftime("%H:%M") if since else "未知"
    return f"（{label}数据暂未更新，最新刷新时间为{when}）"


def degraded_note(tool: str, fallback: str) -> str:
    return f"（{tool} 当前使用降级结果：{fallback}）"

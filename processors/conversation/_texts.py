"""What the engine itself tells the user (Chinese, as the demo user writes): a failed
component with its code and advice, a cached or degraded answer, a turn while one is being
processed. A flow's own words are in its spec and hooks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from types import MappingProxyType
from typing import Final

from hermesbus.processors.conversation._reasons import tool_reason

__all__ = [
    "PENDING",
    "REASON_SHOWN",
    "degraded_note",
    "error_text",
    "rejected_text",
    "stale_note",
]

_CHINA: Final = timezone(timedelta(hours=8))
"""Refresh times are shown in China time (the demo company's clock), fixed offset."""
PENDING: Final = "正在处理您的上一条消息，请稍候。"


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

"""Tool choice from live health, and what the user is told about degraded or stale data.

An unhealthy tool answers with its fallback strategy and the
user is told; a healthy but slow one is called normally and the user hears it takes
about ``estimate_s`` seconds; stale results say since when.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from hermesbus.contract.payloads import ToolResult
from hermesbus.processors.protocol import HealthView, ToolHealth

__all__ = [
    "BUSY",
    "BUSY_ADVICE",
    "HealthChoice",
    "Verdict",
    "bilingual",
    "busy_tool",
    "choose",
    "result_notices",
]


def bilingual(zh: str, en: str) -> str:
    """A user-facing text: Chinese, then the English in full-width parentheses."""
    return f"{zh}\uff08{en}\uff09"


BUSY: Final = "busy"
"""The code of a round whose deadline passed while its call waited for a free worker."""
BUSY_ADVICE: Final = bilingual(
    "系统繁忙，请求仍在排队，请稍后重试", "the bus is busy and the request is queued; retry shortly"
)


async def busy_tool(tools: Iterable[str], health: HealthView) -> str | None:
    """The first of ``tools`` whose live health has calls waiting for a free worker (None:
    none has): a deadline passed in that queue is a busy bus, not a failed tool."""
    for tool in tools:
        seen = await health.health(tool)
        if seen is not None and seen.queued > 0:
            return tool
    return None


class Verdict(enum.StrEnum):
    OK = "ok"
    SLOW = "slow"
    UNHEALTHY = "unhealthy"
    UNKNOWN = "unknown"
    """The health view does not know the tool: it is called normally (the tool says 404)."""


@dataclass(frozen=True, slots=True)
class HealthChoice:
    """How a call goes out, and the notice for the user (empty: nothing to say)."""

    verdict: Verdict
    fallback: bool
    notice: str = ""
    latency_ms: float | None = None
    alert: str = ""
    """The open alerts that made the tool unhealthy (``ToolHealth.alert``)."""


def choose(tool: str, health: ToolHealth | None, fallback_allowed: bool) -> HealthChoice:
    """Fallback for an unhealthy tool (when the call allows it), a notice when slow."""
    if health is None:
        return HealthChoice(Verdict.UNKNOWN, fallback=False)
    latency = health.latency_ms
    if not health.healthy:
        if not fallback_allowed:
            return HealthChoice(Verdict.UNHEALTHY, fallback=False, latency_ms=latency)
        notice = bilingual(
            f"{tool} 暂时不可用，正在使用降级数据", f"{tool} unavailable, using fallback data"
        )
        if health.alert:  # the diagnostics' alert says why
            notice = bilingual(
                f"{tool} 告警中（{health.alert}），正在使用降级数据",
                f"{tool} under alert {health.alert}, using fallback data",
            )
        return HealthChoice(
            Verdict.UNHEALTHY, fallback=True, notice=notice, latency_ms=latency, alert=health.alert
        )
    if health.slow:
        estimate = health.estimate_s
        notice = bilingual(f"{tool} 处理中，约 {estimate} 秒", f"processing, about {estimate} s")
        return HealthChoice(Verdict.SLOW, fallback=False, notice=notice, latency_ms=latency)
    return HealthChoice(Verdict.OK, fallback=False, latency_ms=latency)


def _since(moment: datetime | None) -> tuple[str, str]:
    if moment is None:
        return "时间未知", "unknown time"
    text = moment.strftime("%Y-%m-%d %H:%M UTC")
    return text, text


def result_notices(result: ToolResult) -> list[str]:
    """What the conversation must tell the user about one result: stale or fallback data."""
    notices = []
    if result.stale:
        zh, en = _since(result.stale_since)
        notices.append(
            bilingual(f"{result.tool} 数据可能已过期，最后更新于 {zh}", f"stale since {en}")
        )
    if result.fallback:
        name = result.fallback
        notices.append(bilingual(f"{result.tool} 使用降级数据 {name}", f"fallback data: {name}"))
    return notices

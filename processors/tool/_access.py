"""Who may call a tool, and how often: the dispatcher's access port over the tool store.

A spec's ``access`` names the roles that may call the tool (a user holds a role when
long-term memory has ``user:<id> -has_role-> role:<name>`` as a verified fact, which the
dispatcher reads with the round's memory context) and per-user limits: a sliding ``rate``
and a calendar ``quota`` (UTC days or months), counted by the envelopes' times in the tool
store, once per call (its idempotency key), atomically across every dispatcher. A refusal
comes with the one sentence the user is told. Roles are checked before any limit, so a
call refused for its role uses none of the quota.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hermesbus.contract.fields import epoch_ms
from hermesbus.processors.protocol import (
    ADMIT,
    FORBIDDEN,
    OVER_QUOTA,
    RATE_LIMITED,
    Admission,
)
from hermesbus.processors.tool._spec import Access, ToolSpec
from hermesbus.processors.tool._store import ToolStore, Window

__all__ = ["ToolAccess", "windows_of"]


def windows_of(access: Access, at_ms: int) -> list[Window]:
    """The limits ``access`` puts on a call at ``at_ms``: the rate's window ending with
    it, the quota's calendar day or month (UTC) holding it."""
    windows = []
    if access.rate is not None:  # either side of it: a call stamped later, read first, counts
        per_ms = access.rate.per_s * 1000
        windows.append(Window(RATE_LIMITED, at_ms - per_ms + 1, at_ms + per_ms, access.rate.calls))
    if access.quota is not None:
        start, end = _period(at_ms, access.quota.per)
        windows.append(Window(OVER_QUOTA, start, end, access.quota.calls))
    return windows


def _period(at_ms: int, per: str) -> tuple[int, int]:
    at = datetime.fromtimestamp(at_ms / 1000, UTC)
    if per == "day":
        start = at.replace(hour=0, minute=0, second=0, microsecond=0)
        end = datetime.fromordinal(start.toordinal() + 1).replace(tzinfo=UTC)
    else:
        start = at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        year, month = (start.year + 1, 1) if start.month == 12 else (start.year, start.month + 1)  # noqa: PLR2004 - December
        end = start.replace(year=year, month=month)
    return epoch_ms(start), epoch_ms(end)


def _sentence(refusal: str, spec: ToolSpec, access: Access) -> str:
    """What the user is told, in one sentence (Chinese, then English)."""
    tool = spec.name
    if refusal == FORBIDDEN:
        roles = "、".join(access.roles)
        return (
            f"您没有调用 {tool} 的权限（需要以下角色之一：{roles}）"
            f"（you may not call {tool}: it needs one of the roles {', '.join(access.roles)}）。"
        )
    if refusal == RATE_LIMITED and access.rate is not None:
        rate = access.rate
        return (
            f"您调用 {tool} 过于频繁（每 {rate.per_s} 秒最多 {rate.calls} 次），请稍后再试"
            f"（{tool} allows {rate.calls} calls per {rate.per_s} s: try again later）。"
        )
    quota = access.quota
    limit = quota.calls if quota is not None else 0
    daily = quota is not None and quota.per == "day"
    when, each, unit = ("今天", "天", "day") if daily else ("本月", "月", "month")
    return (
        f"您{when}调用 {tool} 的次数已用完（每{each}最多 {limit} 次，按 UTC 计）"
        f"（your {tool} quota of {limit} calls a UTC {unit} is used up）。"
    )


def _nobody(spec: ToolSpec) -> str:
    return (
        f"{spec.name} 按用户计数，调用需要用户身份（{spec.name} is limited per user: "
        "a call needs a user id）。"
    )


class ToolAccess:
    """:class:`hermesbus.processors.protocol.AccessView` over the tool store."""

    def __init__(self, store: ToolStore) -> None:
        self._store = store

    async def admit(
        self,
        tool: str,
        user: str,
        roles: frozenset[tuple[str, str]],
        at_ms: int,
        key: str,
        *,
        count: bool = True,
    ) -> Admission:
        spec = await self._store.get_spec(tool)
        if spec is None or spec.access is None:
            return ADMIT
        access = spec.access
        held = {role for role, by in roles if by in access.roles_from}
        if access.roles and not held & set(access.roles):
            return Admission(FORBIDDEN, _sentence(FORBIDDEN, spec, access), checked=True)
        windows = windows_of(access, at_ms)
        if windows and not user:  # counted per user: a call nobody made cannot be counted
            return Admission(FORBIDDEN, _nobody(spec), checked=True)
        if not count or not windows:
            return Admission(checked=True)
        full = await self._store.admit_call(tool, user, key, at_ms, windows)
        if full is None:
            return Admission(checked=True)
        return Admission(full, _sentence(full, spec, access), checked=True)

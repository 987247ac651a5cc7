"""Live tool health: the latest probe combined with the success rate of recent calls."""

from __future__ import annotations

import json
from typing import Any

from hermesbus.processors.protocol import ToolHealth
from hermesbus.processors.tool._executor import Execution
from hermesbus.processors.tool._store import Probe, ToolStore

__all__ = ["RegistryHealth", "parse_probe"]


def parse_probe(execution: Execution, checked_at_ms: int, timeout_s: float) -> Probe:
    """A probe's answer ``{"latency_ms", "success_rate", "quota_remaining"}``; a failed or
    malformed probe counts as a tool at its timeout with no success."""
    if not execution.ok:
        return Probe(timeout_s * 1000, 0.0, None, checked_at_ms, execution.error or "failed")
    try:
        answer: Any = json.loads(execution.body)
        latency = float(answer.get("latency_ms", execution.latency_ms))
        success = float(answer.get("success_rate", 1.0))
        quota = answer.get("quota_remaining")
        quota = None if quota is None else int(quota)
    except (ValueError, TypeError, AttributeError) as exc:
        return Probe(timeout_s * 1000, 0.0, None, checked_at_ms, f"malformed probe: {exc}")
    return Probe(latency, success, quota, checked_at_ms)


class RegistryHealth:
    """:class:`~hermesbus.processors.protocol.HealthView` over a :class:`ToolStore`.

    Latency and quota come from the latest probe (observed call latency when never
    probed); the success rate is the lower of the probe's and that of the latest calls.
    """

    def __init__(self, store: ToolStore, window: int = 20) -> None:
        self.store = store
        self.window = window

    async def health(self, tool: str) -> ToolHealth | None:
        spec = await self.store.get_spec(tool)
        if spec is None:
            return None
        probe = await self.store.get_probe(tool)
        stats = await self.store.call_stats(tool, self.window)
        latency, success, quota, checked = 0.0, 1.0, None, 0
        if probe is not None:
            latency, success = probe.latency_ms, probe.success_rate
            quota, checked = probe.quota_remaining, probe.checked_at_ms
        elif stats is not None:
            latency = stats.avg_latency_ms
        if stats is not None:
            success = min(success, stats.success_rate)
        if spec.mcp is not None and spec.mcp.offered_pin is not None:
            success = 0.0  # its server changed the tool: unhealthy until approved
        return ToolHealth(
            tool=tool,
            latency_ms=latency,
            success_rate=success,
            quota_remaining=quota,
            checked_at_ms=checked,
            slow_after_ms=spec.slow_after_ms,
            unhealthy_after_ms=spec.unhealthy_after_ms,
            min_success_rate=spec.min_success_rate,
            estimate_s=spec.estimate_s,
        )

"""Health: probes stored by probe_all, combined with the observed success of calls."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hermesbus.processors.tool import RegistryHealth, ToolService

from .conftest import SAMPLES, python_spec
from .test_calls import PATH_IN
from .test_executor import NOW, call


async def test_probe_all_stores_each_probe_and_health_reads_it(tools: ToolService) -> None:
    await tools.register(python_spec("fast", "echo"))
    await tools.register(python_spec("slow", "echo", health=f"{SAMPLES}:slow_probe"))
    await tools.register(python_spec("dead", "echo", health=f"{SAMPLES}:broken_probe"))
    probes = await tools.probe_all()
    assert sorted(probes) == ["dead", "fast", "slow"]
    view = RegistryHealth(tools.store)
    fast, slow, dead = [await view.health(name) for name in ("fast", "slow", "dead")]
    assert fast is not None and slow is not None and dead is not None
    assert (fast.latency_ms, fast.quota_remaining, fast.healthy, fast.slow) == (
        12.0,
        7,
        True,
        False,
    )
    assert (slow.latency_ms, slow.healthy, slow.slow, slow.estimate_s) == (1500.0, True, True, 30)
    assert (dead.success_rate, dead.healthy) == (0.0, False)
    assert "probe down" in probes["dead"].error
    assert await view.health("unregistered") is None


async def test_observed_failures_lower_the_success_rate(tools: ToolService, tmp_path: Path) -> None:
    await tools.register(python_spec("flaky", "flaky", input_schema=PATH_IN))
    await tools.probe_all()
    down = tmp_path / "down"
    for i in range(3):
        await tools.call(call("flaky", f"ok{i}", path=str(down)), now=NOW)
    down.touch()
    await tools.call(call("flaky", "bad", path=str(down)), now=NOW)
    health = await tools.health("flaky")
    assert health is not None
    assert health.success_rate == 0.75  # 3 of the latest 4 calls, below the probe's 1.0
    assert not health.healthy


async def test_thresholds_come_from_the_spec(tools: ToolService) -> None:
    spec = python_spec("tight", "echo", slow_after_ms=5, unhealthy_after_ms=10, estimate_s=12)
    await tools.register(spec)
    await tools.probe_all()  # the sample probe says 12 ms
    health = await tools.health("tight")
    assert health is not None
    assert (health.healthy, health.estimate_s, health.unhealthy_after_ms) == (False, 12, 10)


async def test_an_unprobed_tool_uses_its_observed_latency(tools: ToolService) -> None:
    await tools.register(python_spec("echo_tool", "echo"))
    await tools.call(call("echo_tool", "k"), now=NOW)
    health = await tools.health("echo_tool")
    assert health is not None
    assert health.checked_at_ms == 0 and health.success_rate == 1.0
    assert 0 < health.latency_ms < 1000


async def test_probes_kept_to_themselves_change_no_stored_health(tools: ToolService) -> None:
    """probe_all(save=False), as doctor runs it: a running bus reads what it stored."""
    await tools.register(python_spec("dead", "echo", health=f"{SAMPLES}:broken_probe"))
    probes = await tools.probe_all(save=False)
    assert "probe down" in probes["dead"].error
    assert await tools.store.get_probe("dead") is None


async def test_health_waits_until_the_first_probes_of_a_start_landed(tools: ToolService) -> None:
    """A start clears ``probed``: no call is routed by the previous run's probe meanwhile."""
    await tools.register(python_spec("dead", "echo", health=f"{SAMPLES}:broken_probe"))
    tools.probed.clear()
    asked = asyncio.create_task(tools.health("dead"))
    await asyncio.sleep(0.05)
    assert not asked.done()
    await tools.probe_all()
    tools.probed.set()
    health = await asyncio.wait_for(asked, 5)
    assert health is not None and not health.healthy  # this run's probe, not none at all

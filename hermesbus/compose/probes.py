"""The registered tools' health probes while a stack runs: the first ones as it starts,
then every :data:`PROBE_INTERVAL_S` (the dispatcher reads the latest).

The first probes start the tools' workers while the consumer groups join (tansu: >= 1 s);
until they land, a dispatcher asking for a tool's health waits (no stale probe). A probe
that fails makes its tool unhealthy, not the stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from hermesbus.base.lifecycle import logged_task
from hermesbus.errors import HermesError
from hermesbus.processors import tool

__all__ = ["PROBE_INTERVAL_S", "first_probes", "keep_probing"]

log = logging.getLogger(__name__)

PROBE_INTERVAL_S = 10.0
"""How often every tool's health probe runs (the dispatcher reads the latest)."""


def first_probes(
    exits: contextlib.AsyncExitStack, tools: tool.ToolService, say: Callable[[str], None]
) -> asyncio.Task[None]:
    """Start the first probes of every registered tool: the task to await once the groups
    have joined (``say`` is told which tools are ready); cancelled with ``exits`` if the
    start fails before."""
    tools.probed.clear()
    probed = asyncio.create_task(_first_probes(tools, say))
    exits.push_async_callback(_cancelled, probed)
    return probed


def keep_probing(exits: contextlib.AsyncExitStack, tools: tool.ToolService) -> None:
    """Probe every registered tool every PROBE_INTERVAL_S until ``exits`` closes."""
    exits.callback(logged_task(_probing(tools), "tool-health").cancel)


async def _probe(tools: tool.ToolService) -> None:
    try:
        await tools.probe_all()
    except HermesError as exc:  # a probe that fails makes its tool unhealthy, not the stack
        log.warning("tool health probes: %s", exc)


async def _first_probes(tools: tool.ToolService, say: Callable[[str], None]) -> None:
    try:
        await _probe(tools)
    finally:
        tools.probed.set()
    names = [spec.name for spec in await tools.store.list_specs()]
    say(f"tools ready: {', '.join(names) or 'none registered'}")


async def _cancelled(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait for it; its own failure is logged, not raised over the
    error the stack may be unwinding for."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    except Exception:
        log.exception("the tools' first probes failed")


async def _probing(tools: tool.ToolService) -> None:
    while True:
        await asyncio.sleep(PROBE_INTERVAL_S)
        await _probe(tools)

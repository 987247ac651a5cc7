"""A python tool's pool of workers: ``workers`` calls run at once, the rest wait in a
queue the tool's health reports, and a call that finds no free worker in its time answers
503 busy (#25, item 8)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hermesbus.contract.payloads import ToolCall
from hermesbus.processors.protocol import BUSY_PREFIX
from hermesbus.processors.tool import CallReport, Fallback, ToolService

from .conftest import python_spec

NOW = datetime(2024, 6, 3, 9, 0, tzinfo=UTC)
GATE_IN = {"type": "object", "properties": {"dir": {"type": "string"}, "n": {"type": "integer"}}}
NO_FALLBACK = Fallback(strategy="cache", stale_after_s=1)
POLL_S = 120.0
"""How long a poll may wait for the workers (they start on a busy 2-core machine)."""


def call(tool: str, folder: Path, n: int) -> ToolCall:
    arguments = json.dumps({"dir": str(folder), "n": n})
    return ToolCall(tool=tool, arguments_json=arguments, idempotency_key=f"{tool}-{n}")


async def until(ready: Callable[[], bool]) -> None:
    async with asyncio.timeout(POLL_S):
        while not ready():
            await asyncio.sleep(0.05)


def running(folder: Path) -> int:
    return len(list(folder.glob("running-*")))


async def test_n_calls_to_a_pool_of_k_run_k_at_once_and_the_rest_queue(
    tools: ToolService, tmp_path: Path
) -> None:
    spec = python_spec(
        "gate", "gate", input_schema=GATE_IN, timeout_s=300, fallback=NO_FALLBACK, workers=3
    )
    await tools.register(spec)
    calls = [asyncio.create_task(tools.call(call("gate", tmp_path, n), now=NOW)) for n in range(7)]
    await until(lambda: running(tmp_path) == 3 and tools.queued("gate") == 4)
    health = await tools.health("gate")
    assert health is not None and health.queued == 4  # what the dispatcher sees
    assert running(tmp_path) == 3  # the other four never started
    (tmp_path / "open").touch()
    reports: list[CallReport] = await asyncio.gather(*calls)
    assert [r.result.status_code for r in reports] == [200] * 7
    pids = {json.loads(r.result.result_json or "{}")["echo"] for r in reports}
    assert len(pids) == 3  # three worker processes shared the seven calls
    assert tools.queued("gate") == 0
    health = await tools.health("gate")
    assert health is not None and health.queued == 0


async def test_a_quiet_tool_keeps_one_worker(tools: ToolService, tmp_path: Path) -> None:
    spec = python_spec(
        "gate", "gate", input_schema=GATE_IN, timeout_s=300, fallback=NO_FALLBACK, workers=3
    )
    await tools.register(spec)
    (tmp_path / "open").touch()
    reports = [await tools.call(call("gate", tmp_path, n), now=NOW) for n in range(3)]
    pids = {json.loads(r.result.result_json or "{}")["echo"] for r in reports}
    assert len(pids) == 1  # one after the other: the first worker each time


async def test_a_call_with_no_free_worker_in_its_time_answers_busy(
    tools: ToolService, tmp_path: Path
) -> None:
    spec = python_spec("gate", "gate", input_schema=GATE_IN, timeout_s=300, fallback=NO_FALLBACK)
    await tools.register(spec)
    held = asyncio.create_task(tools.call(call("gate", tmp_path, 0), now=NOW))
    await until(lambda: running(tmp_path) == 1)
    late = await tools.call(call("gate", tmp_path, 1), now=NOW, timeout_ms=200)
    assert late.result.status_code == 503
    said = late.result.error or ""
    assert said.startswith(f"{BUSY_PREFIX} gate had none of its 1 within 0.2 s"), said
    assert running(tmp_path) == 1  # it never ran
    (tmp_path / "open").touch()
    assert (await held).result.status_code == 200


@pytest.mark.parametrize("workers", [0, 33])
def test_the_pool_size_is_bounded(workers: int) -> None:
    with pytest.raises(ValueError, match="workers"):
        python_spec("gate", "gate", workers=workers)


async def test_probes_after_the_first_start_the_whole_pool(tools: ToolService) -> None:
    spec = await tools.register(python_spec("gate", "gate", workers=3))
    await tools.probe(spec)  # the first: one worker, as at start-up
    pool = tools.pool("gate")
    assert pool is not None and pool.started == 1
    await tools.probe(spec)  # the next ones start the others before a burst needs them
    assert pool.started == 3

"""Python tools run in a warm worker process: a timeout kills it, a memory limit holds."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

import pytest

from hermesbus.contract.payloads import ToolCall
from hermesbus.processors.tool import Fallback, ToolService

from .conftest import python_spec

NOW = datetime(2024, 6, 3, 9, 0, tzinfo=UTC)
SLEEP_IN = {"type": "object", "properties": {"seconds": {"type": "number"}}}
HOG_IN = {"type": "object", "properties": {"mb": {"type": "integer"}}}
PATH_IN_ANY = {"type": "object", "properties": {"path": {"type": "string"}}}
NO_FALLBACK = Fallback(strategy="cache", stale_after_s=1)
"""A cache that is empty in these tests: failures come back as they are."""


def call(tool: str, key: str, **arguments: object) -> ToolCall:
    return ToolCall(tool=tool, arguments_json=json.dumps(arguments), idempotency_key=key)


def alone(tool_call: ToolCall) -> ToolCall:
    """The call with no fallback allowed: what the tool itself answered is the result."""
    return tool_call.model_copy(update={"fallback_allowed": False})


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_call_past_its_timeout_kills_the_worker_and_the_next_call_works(
    tools: ToolService,
) -> None:
    spec = python_spec(
        "sleepy", "sleepy", input_schema=SLEEP_IN, timeout_s=0.5, fallback=NO_FALLBACK
    )
    await tools.register(spec)
    first = await tools.call(call("sleepy", "k1", seconds=0), now=NOW)
    assert first.result.status_code == 200
    pid = tools.worker_pid("sleepy")
    assert pid is not None and alive(pid)

    late = await tools.call(call("sleepy", "k2", seconds=30), now=NOW)
    assert late.result.status_code == 504
    assert "timed out after 0.5 s" in (late.result.error or "")
    assert not alive(pid)  # killed and reaped
    assert tools.worker_pid("sleepy") is None

    again = await tools.call(call("sleepy", "k3", seconds=0), now=NOW)
    assert again.result.status_code == 200
    assert tools.worker_pid("sleepy") not in (None, pid)


async def test_the_envelope_deadline_shortens_the_tool_timeout(tools: ToolService) -> None:
    spec = python_spec(
        "sleepy2", "sleepy", input_schema=SLEEP_IN, timeout_s=10, fallback=NO_FALLBACK
    )
    await tools.register(spec)
    await tools.call(call("sleepy2", "w", seconds=0), now=NOW)  # warm
    report = await tools.call(call("sleepy2", "d", seconds=5), now=NOW, timeout_ms=300)
    assert report.result.status_code == 504
    assert report.elapsed_ms < 3000


async def test_a_tool_allocating_past_its_memory_limit_fails_cleanly(tools: ToolService) -> None:
    spec = python_spec("hog", "hog", input_schema=HOG_IN, memory_limit_mb=64, fallback=NO_FALLBACK)
    await tools.register(spec)
    small = await tools.call(call("hog", "a", mb=8), now=NOW)
    assert small.result.status_code == 200
    assert json.loads(small.result.result_json) == {"echo": str(8 * 1024 * 1024)}

    greedy = await tools.call(call("hog", "b", mb=512), now=NOW)
    assert greedy.result.status_code == 507
    assert "memory limit exceeded" in (greedy.result.error or "")
    assert greedy.result.result_json == "null"
    assert tools.worker_pid("hog") is None  # not trusted with the next call

    after = await tools.call(call("hog", "c", mb=8), now=NOW)
    assert after.result.status_code == 200


async def test_tool_errors_and_crashes_are_answers_not_processor_failures(
    tools: ToolService,
) -> None:
    await tools.register(python_spec("refuse", "refuse", fallback=NO_FALLBACK))
    await tools.register(python_spec("crash", "crash", fallback=NO_FALLBACK))
    refused = await tools.call(call("refuse", "r"), now=NOW)
    assert refused.result.status_code == 409  # the exception's status_code
    assert refused.result.error == "Refused: not allowed for this user"
    crashed = await tools.call(call("crash", "c"), now=NOW)
    assert crashed.result.status_code == 503
    assert "worker exited (7)" in (crashed.result.error or "")
    assert tools.worker_pid("crash") is None


@pytest.mark.parametrize("seconds", [0.2])
async def test_the_executor_reports_its_external_call_latency(
    tools: ToolService, seconds: float
) -> None:
    await tools.register(python_spec("nap", "sleepy", input_schema=SLEEP_IN, fallback=NO_FALLBACK))
    report = await tools.call(call("nap", "n", seconds=seconds), now=NOW)
    assert report.external_calls == 1
    assert report.avg_latency_ms >= seconds * 1000
    assert report.elapsed_ms >= report.avg_latency_ms

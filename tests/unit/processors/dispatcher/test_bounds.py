"""What an envelope can make grow is bounded: open cycles, tools, result fan-out, dates."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from hermesbus import Envelope, ErrorReport, MemoryWrite
from hermesbus.processors.dispatcher import (
    CAPPED_WRITES,
    MAX_FACTS,
    MAX_OPEN_CYCLES,
    MAX_SYMBOLS,
)
from hermesbus.processors.protocol import ToolHealth

from .helpers import T0, Driver, answer_query, answers, call, cont, kinds, result_for

ONE = ["org_tool"]
HEALTHY = ToolHealth(tool="org_tool", latency_ms=10.0, success_rate=1.0)


def open_cycles(d: Driver) -> list[str]:
    return [cid for cid, c in d.data["cycles"].items() if c["status"] == "open"]


async def dispatched(d: Driver, cycle: str = "cycle-1") -> Envelope:
    (query,) = await d.send(call("org_tool", ONE, cycle=cycle))
    (out,) = await d.send(answer_query(query))
    return out


async def test_open_cycles_per_session_are_capped_and_the_state_stays_small() -> None:
    d = Driver()
    started = time.perf_counter()
    for i in range(200):
        await d.send(call("org_tool", ONE, cycle=f"c{i}"))
    assert time.perf_counter() - started < 5.0  # not quadratic in the calls sent
    assert open_cycles(d) == [f"c{i}" for i in range(MAX_OPEN_CYCLES)]
    assert d.data["violations"] == {"open_cycles": 200 - MAX_OPEN_CYCLES}
    assert len(str(d.data)) < 64_000


async def test_a_cycle_that_closes_frees_its_place() -> None:
    d = Driver.with_health(HEALTHY)
    out = await dispatched(d, "c0")
    for i in range(1, MAX_OPEN_CYCLES):
        await d.send(call("org_tool", ONE, cycle=f"c{i}"))
    refused = await d.send(call("org_tool", ONE, cycle="late"))
    assert [e.payload.body.code for e in refused] == ["violation.open_cycles"] * 2  # type: ignore[union-attr]
    assert answers(await d.send(result_for(out, 200, {})))  # c0 answered: one place free
    # a new envelope: the refused one's id is applied, so its redelivery would be skipped
    again = await d.send(call("org_tool", ONE, cycle="late", message_id="call-late-again"))
    assert kinds(again) == [("memory:context", "MemoryQuery")]


async def test_a_continue_may_not_open_one_cycle_too_many() -> None:
    d = Driver.with_health(HEALTHY)
    out = await dispatched(d, "c0")
    await d.send(result_for(out, 200, {}))  # c0 answered, closed
    for i in range(1, MAX_OPEN_CYCLES + 1):
        await d.send(call("org_tool", ONE, cycle=f"c{i}"))
    refused = await d.send(cont(cycle="c0"))
    assert [e.target for e in refused] == ["conversation:S1", "alerts:dispatcher"]
    assert refused[-1].payload.body.code == "violation.open_cycles"  # type: ignore[union-attr]
    assert d.data["cycles"]["c0"]["status"] == "answered"


async def test_one_result_feeds_memory_at_most_the_caps_and_alerts_once() -> None:
    d = Driver.with_health(HEALTHY)
    out = await dispatched(d)
    facts = [{"subject": f"s:{i}", "relation": "r", "object": "o"} for i in range(5000)]
    symbols = {f"n{i}": "e" for i in range(MAX_SYMBOLS + 7)}
    emitted = await d.send(result_for(out, 200, {"facts": facts, "symbols": symbols}))
    targets = [e.target for e in emitted]
    assert targets.count("memory:long_term") == MAX_FACTS
    assert targets.count("memory:short_term") == MAX_SYMBOLS
    (alert,) = [e for e in emitted if e.target == "alerts:dispatcher"]
    assert isinstance(alert.payload.body, ErrorReport)
    assert alert.payload.body.code == CAPPED_WRITES
    assert "4900 facts" in alert.payload.body.message
    assert "7 symbols" in alert.payload.body.message
    assert d.data["capped_writes"] == 5000 - MAX_FACTS + 7
    assert len(answers(emitted)) == 1  # the cycle is still answered, once
    assert len(emitted) == MAX_FACTS + MAX_SYMBOLS + 2


async def test_verified_at_is_the_results_time_when_it_is_in_time() -> None:
    d = Driver.with_health(HEALTHY)
    out = await dispatched(d)
    result = result_for(out, 200, {"facts": [{"subject": "a", "relation": "r", "object": "b"}]})
    result = result.model_copy(update={"timestamp": T0 + timedelta(seconds=2)})
    (write, _) = await d.send(result)
    assert isinstance(write.payload.body, MemoryWrite) and write.payload.body.verified_by
    assert write.payload.body.verified_by.verified_at == T0 + timedelta(seconds=2)


async def test_a_result_from_the_future_is_verified_at_the_calls_deadline() -> None:
    d = Driver.with_health(HEALTHY)
    out = await dispatched(d)  # an S1 call: 5 s budget from T0
    result = result_for(out, 200, {"facts": [{"subject": "a", "relation": "r", "object": "b"}]})
    result = result.model_copy(update={"timestamp": datetime(2099, 1, 1, tzinfo=UTC)})
    (write, _) = await d.send(result)
    assert isinstance(write.payload.body, MemoryWrite) and write.payload.body.verified_by
    assert write.payload.body.verified_by.verified_at == T0 + timedelta(milliseconds=5_000)

"""The ports: the counter's totals and summary, the static health view, wiring errors."""

from __future__ import annotations

import pytest

from hermesbus.errors import ConfigError
from hermesbus.processors.dispatcher import (
    HEALTH_PORT,
    NAME,
    TOPIC,
    VIOLATIONS_PORT,
    StaticHealth,
    Violations,
    dispatcher_ports,
    handle,
)
from hermesbus.processors.dispatcher._state import KEEP_CLOSED
from hermesbus.processors.protocol import ToolHealth
from hermesbus.runtime import HandlerInput, SessionState
from hermesbus.topics import topic_for

from .helpers import Driver, answer_query, call, result_for


def test_name_and_topic_match_the_routes() -> None:
    assert (NAME, TOPIC) == ("dispatcher", topic_for("mcp:dispatcher"))


def test_the_counter_summarises_violations_and_late_results() -> None:
    counter = Violations()
    assert counter.summary() == "dispatcher: 0 violations, 0 late results"
    counter.count("one_dispatch")
    counter.count_late()
    assert counter.summary() == "dispatcher: 1 violation (one_dispatch=1), 1 late result"
    assert (counter.total, counter.late, counter.by_rule) == (1, 1, {"one_dispatch": 1})


async def test_static_health_answers_and_replaces() -> None:
    view = StaticHealth([ToolHealth(tool="a", latency_ms=1.0, success_rate=1.0)])
    assert (await view.health("a")) is not None
    assert await view.health("b") is None
    view.set(ToolHealth(tool="a", latency_ms=9_999.0, success_rate=1.0))
    health = await view.health("a")
    assert health is not None
    assert not health.healthy


def test_dispatcher_ports_makes_a_counter_unless_given_one() -> None:
    health = StaticHealth()
    ports = dispatcher_ports(health)
    assert ports[HEALTH_PORT] is health
    assert isinstance(ports[VIOLATIONS_PORT], Violations)
    mine = Violations()
    assert dispatcher_ports(health, mine)[VIOLATIONS_PORT] is mine


async def test_a_dispatch_without_a_health_port_is_a_config_error() -> None:
    state = SessionState()
    first = await handle(HandlerInput(call("org_tool", ["org_tool"]), state, NAME))
    (query,) = first.emit
    assert first.state is not None
    with pytest.raises(ConfigError, match="health"):
        await handle(HandlerInput(answer_query(query), SessionState(1, first.state), NAME))


async def test_closed_cycles_are_pruned_and_open_ones_kept() -> None:
    driver = Driver.with_health(ToolHealth(tool="org_tool", latency_ms=1.0, success_rate=1.0))
    await driver.send(call("org_tool", ["org_tool"], cycle="open-one"))
    for i in range(KEEP_CLOSED + 4):
        (query,) = await driver.send(call("org_tool", ["org_tool"], cycle=f"c{i}"))
        (out,) = await driver.send(answer_query(query))
        await driver.send(result_for(out, 200, {}))
    cycles = driver.data["cycles"]
    assert "open-one" in cycles
    assert len(cycles) == KEEP_CLOSED + 1
    assert "c0" not in cycles
    assert cycles[f"c{KEEP_CLOSED + 3}"] == {
        **cycles[f"c{KEEP_CLOSED + 3}"],
        "calls": {},
        "results": {},
        "memory": None,
    }

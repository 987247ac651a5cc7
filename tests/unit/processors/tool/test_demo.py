"""The demo tools reproduce the walkthrough's figures, signed with Ed25519 and verified."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.sqlite.tools import SqliteToolStore
from hermesbus.processors.tool import ToolService, ToolSettings
from hermesbus.processors.tool.demo import (
    DEMO_TOOLS,
    DEMO_VERIFY_ENV,
    demo_keys,
    demo_specs,
    register_demo,
)
from hermesbus.processors.tool.demo.fixtures import DEMO_USER_ID

from .test_executor import NOW, alone, call

FILES = [
    {"name": "photo-1.jpg", "uri": "demo://expense/photo-1.jpg"},
    {"name": "photo-2.jpg", "uri": "demo://expense/photo-2.jpg"},
]
INVOICES = [
    {"id": "inv-001", "category": "交通", "amount": 2840, "date": "2024-05-12", "confidence": 0.97},
    {"id": "inv-002", "category": "住宿", "amount": 3200, "date": "2024-05-15", "confidence": 0.95},
    {"id": "inv-003", "category": "餐饮", "amount": 2200, "date": "2024-05-14", "confidence": 0.70},
]
ITINERARY = {"city": "深圳", "from": "2024-05-12", "to": "2024-05-15"}
IDS = ["inv-001", "inv-002", "inv-003"]


@pytest.fixture(scope="module")
def demo_environ() -> dict[str, str]:
    """The environment the demo's service is handed: the tests' own and the demo's keys."""
    return {**os.environ, **demo_keys()}


@pytest.fixture(scope="module")
async def demo(
    tmp_path_factory: pytest.TempPathFactory, demo_environ: dict[str, str]
) -> AsyncIterator[ToolService]:
    """One service for the module: its warm workers are shared by the tests."""
    settings = ToolSettings(home=tmp_path_factory.mktemp("demo"))
    store = SqliteToolStore(settings=settings, book=MarkBook(settings.home))
    async with ToolService(store, settings, environ=demo_environ) as tools:
        assert await register_demo(tools) == list(DEMO_TOOLS)
        yield tools


async def result_of(tools: ToolService, tool: str, **arguments: Any) -> tuple[dict[str, Any], Any]:
    report = await tools.call(call(tool, f"{tool}-{json.dumps(arguments)}", **arguments), now=NOW)
    result = report.result
    assert (result.status_code, result.verified, report.alert) == (200, True, None), result.error
    assert result.verification_steps, "every demo tool explains its verification"
    value = json.loads(result.result_json)
    assert value.pop("verification_steps") == list(result.verification_steps)
    return value, result


async def test_org_tool(demo: ToolService) -> None:
    value, result = await result_of(demo, "org_tool", user_id=DEMO_USER_ID)
    assert value == {
        "user_id": "u_xyz789", "name": "张三", "dept": "采购部", "manager": "张主管",
        "approval_chain": ["主管", "总监"], "symbols": {"user_dept": "采购部"},
        "facts": [{"subject": "user:u_xyz789", "relation": "belongs_to", "object": "dept:采购部"}],
    }  # fmt: skip
    assert result.verification_steps[0] == "已比对组织架构目录：张三属于采购部"


async def test_finance_tool_budget_and_submit(demo: ToolService) -> None:
    budget, _ = await result_of(demo, "finance_tool", action="budget", user_id=DEMO_USER_ID)
    assert budget == {"dept": "采购部", "budget_remaining": 125000, "currency": "CNY"}
    submitted, _ = await result_of(
        demo, "finance_tool", action="submit", user_id=DEMO_USER_ID, report_id="EXP-1a2b3c4d",
        amount=8240, approver="张主管", invoices=IDS,
    )  # fmt: skip
    assert submitted == {
        "status": "submitted", "report_id": "EXP-1a2b3c4d", "approver": "张主管",
        "facts": [
            {"subject": "expense:EXP-1a2b3c4d", "relation": "approved_by",
             "object": "person:张主管"},
        ],
    }  # fmt: skip


async def test_finance_submit_without_its_fields_is_refused_before_running(
    demo: ToolService,
) -> None:
    report = await demo.call(call("finance_tool", "k", action="submit", user_id="u"), now=NOW)
    assert report.result.status_code == 400
    assert "'report_id' is a required property" in (report.result.error or "")


async def test_ocr_tool_is_slow_and_reads_the_three_invoices(demo: ToolService) -> None:
    report = await demo.call(call("ocr_tool", "ocr", files=FILES), now=NOW)
    assert report.avg_latency_ms >= 1000  # honestly slow
    value, _ = await result_of(demo, "ocr_tool", files=FILES)
    assert value == {
        "invoices": INVOICES, "total": 8240, "currency": "CNY", "confidence_min": 0.70,
        "itinerary": ITINERARY, "symbols": {"invoices": "inv-001,inv-002,inv-003"},
    }  # fmt: skip
    await demo.probe_all()
    health = await demo.health("ocr_tool")
    assert health is not None
    assert (health.latency_ms, health.healthy, health.slow, health.estimate_s) == (
        1200.0, True, True, 30,
    )  # fmt: skip


async def test_ocr_tool_refuses_unknown_files(demo: ToolService) -> None:
    unknown = [{"name": "x.jpg", "uri": "demo://expense/nope.jpg"}]
    report = await demo.call(call("ocr_tool", "k", files=unknown), now=NOW)
    assert report.result.status_code == 422
    assert "'demo://expense/nope.jpg' is not one of the demo uploads" in (report.result.error or "")


async def test_trip_tool_verifies_the_trip(demo: ToolService) -> None:
    value, _ = await result_of(
        demo, "trip_tool", user_id=DEMO_USER_ID, city="深圳", invoices=IDS,
        **{"from": "2024-05-12", "to": "2024-05-15"},
    )  # fmt: skip
    trip = "trip:trip_shenzhen_2024_05"
    assert value == {
        "verified": True, "trip_id": "trip_shenzhen_2024_05", "city": "深圳",
        "from": "2024-05-12", "to": "2024-05-15",
        "facts": [
            *({"subject": f"invoice:{i}", "relation": "occurred_during", "object": trip}
              for i in IDS),
            {"subject": trip, "relation": "taken_by", "object": "user:u_xyz789"},
        ],
    }  # fmt: skip


@pytest.mark.parametrize("invoices", [INVOICES, IDS])
async def test_rule_engine_tool_warns_about_lodging(demo: ToolService, invoices: list[Any]) -> None:
    value, _ = await result_of(
        demo, "rule_engine_tool", dept="采购部", invoices=invoices, itinerary=ITINERARY
    )
    assert value == {
        "valid": True,
        "warnings": ["住宿费3200接近标准上限3500"],
        "approver": "张主管",
    }


async def test_a_result_signed_with_another_key_is_discarded(
    demo: ToolService, demo_environ: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(demo_environ, DEMO_VERIFY_ENV, demo_keys()[DEMO_VERIFY_ENV])
    report = await demo.call(alone(call("org_tool", "k", user_id=DEMO_USER_ID)), now=NOW)
    assert report.result.status_code == 502
    assert "Ed25519 signature does not match" in (report.alert or "")


def test_every_demo_tool_is_complete() -> None:
    specs = {spec.name: spec for spec in demo_specs()}
    assert list(specs) == list(DEMO_TOOLS)
    assert specs["finance_tool"].fallback is not None
    assert specs["finance_tool"].fallback.stale_after_s == 1800
    assert specs["rule_engine_tool"].fallback is not None
    assert specs["rule_engine_tool"].fallback.strategy == "mock"
    assert all(s.signature is not None and s.signature.alg == "ed25519" for s in specs.values())

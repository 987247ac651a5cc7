"""``tools chaos``: each fault injected into a real tool, its fallback proven to answer."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.sqlite.tools import SqliteToolStore
from hermesbus.processors.tool import (
    FAULTS,
    ChaosReport,
    Fallback,
    ToolService,
    ToolSettings,
    chaos,
)
from hermesbus.processors.tool.demo import (
    DEMO_TOOLS,
    demo_keys,
    demo_mcp_document,
    demo_mcp_server,
    demo_specs,
)

from .conftest import MODULES, SAMPLES, python_spec, run
from .test_mcp import generous

GENEROUS_S = 60.0
"""Not about timing: how long a tool may take to answer itself again after a fault."""


def said(report: ChaosReport) -> str:
    lines = [f"{report.tool}: baseline {report.baseline or 'ok'}"]
    for outcome in report.outcomes:
        result = outcome.result
        answered = f"{result.status_code} {result.fallback} {result.error}" if result else "-"
        lines.append(f"  {outcome.fault}: {outcome.how} -> {answered}; {outcome.problems}")
    return "\n".join(lines)


@pytest.fixture
async def demo(tmp_path: Path) -> AsyncIterator[ToolService]:
    settings = ToolSettings(home=tmp_path, tool_modules=MODULES)
    store = SqliteToolStore(settings=settings, book=MarkBook(tmp_path))
    async with ToolService(store, settings, environ={**os.environ, **demo_keys()}) as tools:
        yield tools


async def test_every_demo_tool_answers_each_fault_with_its_fallback(demo: ToolService) -> None:
    for spec in demo_specs():  # not about timing: only the faults' budget (1 s) is tight
        await demo.register(spec.model_copy(update={"timeout_s": GENEROUS_S}))
    reports = await asyncio.gather(
        *(chaos(demo, name, recover_s=GENEROUS_S) for name in DEMO_TOOLS)
    )
    for report in reports:
        assert report.passed, said(report)
        assert [outcome.fault for outcome in report.outcomes] == list(FAULTS)
        for outcome in report.outcomes:  # each applied to a process of its own here
            assert outcome.applies and outcome.recovered and outcome.result is not None
            assert outcome.result.fallback == report.strategy
            assert outcome.alerted == (outcome.fault == "unverified")
        primary = {outcome.fault: outcome.primary for outcome in report.outcomes}
        assert primary["latency"].startswith(f"504: {report.tool} timed out after 1 s")
        assert primary["hang"].startswith(f"504: {report.tool} timed out after 1 s")
        assert primary["killed"].startswith(f"503: {report.tool}: worker exited"), said(report)
        assert primary["error"] == "503: injected: the tool answered 503 Service Unavailable"
        assert primary["unverified"] == "200"  # cut after it answered
        if report.strategy == "cache":
            assert all(o.result is not None and o.result.stale for o in report.outcomes)


async def test_a_demo_tool_served_over_mcp_answers_each_fault_with_its_fallback(
    demo: ToolService,
) -> None:
    await demo.register_mcp(generous(demo_mcp_document()), demo_mcp_server())
    report = await chaos(demo, "org_tool", recover_s=GENEROUS_S)
    assert report.passed, said(report)
    assert all(outcome.applies for outcome in report.outcomes)  # a stdio server: a process


async def test_a_fallback_that_cannot_answer_fails_and_says_why(demo: ToolService) -> None:
    """A proxy whose backup fails too: every fault is a failure, named."""
    backup = Fallback(strategy="proxy", backup=f"{SAMPLES}:crash")
    await demo.register(python_spec("fragile", "echo", fallback=backup, timeout_s=GENEROUS_S))
    report = await chaos(demo, "fragile", {"text": "hi"}, recover_s=GENEROUS_S)
    assert not report.passed and report.baseline is None
    for outcome in report.outcomes:
        assert outcome.problems and outcome.problems[0].startswith("no fallback answered"), said(
            report
        )
        assert outcome.recovered  # the tool itself is fine afterwards


async def test_a_tool_without_sample_arguments_is_refused(demo: ToolService) -> None:
    await demo.register(python_spec("plain", "echo"))
    with pytest.raises(ValueError, match="no sample_arguments"):
        await chaos(demo, "plain")
    with pytest.raises(LookupError, match="not registered"):
        await chaos(demo, "ghost")
    with pytest.raises(ValueError, match="unknown faults"):
        await chaos(demo, "plain", {"text": "x"}, faults=("meteor",))


def _spec_file(home: Path, name: str, fallback: dict[str, object]) -> Path:
    """The sample echo tool's spec as a YAML file, with ``fallback`` and sample arguments."""
    spec = python_spec(
        name, "echo", fallback=fallback, sample_arguments={"text": "hi"}, timeout_s=GENEROUS_S
    )
    path = home / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True)))
    return path


def test_register_with_chaos_admits_only_a_tool_whose_fallback_answers_every_fault(
    home: Path,
) -> None:
    fragile = _spec_file(home, "fragile", {"strategy": "proxy", "backup": f"{SAMPLES}:crash"})
    code, out = run("tools", "register", "--chaos", str(fragile))
    assert code == 1, out
    assert "refused: the fallback of fragile did not answer every injected fault" in out
    assert "no fallback answered" in out
    code, out = run("tools", "list")
    assert "fragile" not in out  # nothing was registered
    sound = _spec_file(home, "sound", {"strategy": "mock", "mock_result": {"echo": "mocked"}})
    code, out = run("tools", "register", "--chaos", str(sound))
    assert code == 0, out
    assert out.rstrip().endswith("registered sound")
    assert out.count(" ok ") == len(FAULTS)
    code, out = run("tools", "chaos", "sound", "--fault", "error", "--fault", "unverified")
    assert code == 0, out
    assert "error" in out and "unverified" in out and "hang" not in out
    assert "ok: every fault was answered by sound's fallback" in out


def test_chaos_refuses_bad_arguments_with_exit_2(home: Path) -> None:
    sound = _spec_file(home, "sound", {"strategy": "mock", "mock_result": {"echo": "mocked"}})
    assert run("tools", "register", str(sound))[0] == 0
    for args, said in (
        (["--fault", "meteor"], "unknown --fault meteor"),
        (["--arguments", "[1]"], "--arguments must be a JSON object"),
        (["--arguments", "{"], "--arguments is not JSON"),
        (["--budget", "0"], "--budget must be a number of seconds above 0"),
        (["--recover", "nan"], "--recover must be a number of seconds above 0"),
    ):
        code, out = run("tools", "chaos", "sound", *args)
        assert (code, said in out) == (2, True), out
    code, out = run("tools", "chaos", "ghost_tool")
    assert code == 1 and "tool 'ghost_tool' is not registered" in out


def test_chaos_on_the_demo_tools_from_the_command_line_needs_no_keys(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scratch service makes the demo's signing keys when none are set, as `up` does."""
    for variable in ("HERMES_DEMO_SIGNING_KEY", "HERMES_DEMO_VERIFY_KEY"):
        monkeypatch.delenv(variable, raising=False)
    assert run("tools", "register", "--demo")[0] == 0
    code, out = run("tools", "chaos", "rule_engine_tool", "--fault", "killed", "--fault", "error")
    assert code == 0, out
    assert "ok: every fault was answered by rule_engine_tool's fallback" in out
    assert "exited" in out and "降级数据" in out  # the kill, what the user is told (wrapped)

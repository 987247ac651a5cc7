"""Fallbacks: cache (stale marking, too old), mock, proxy, none; when they are used."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from hermesbus.processors.tool import Fallback, ToolService

from .conftest import SAMPLES, python_spec
from .test_calls import PATH_IN
from .test_executor import NOW, call


async def _flaky(tools: ToolService, fallback: Fallback, tmp_path: Path) -> Path:
    """Registers ``flaky`` with the fallback; the returned path, when it exists, breaks it."""
    await tools.register(python_spec("flaky", "flaky", input_schema=PATH_IN, fallback=fallback))
    return tmp_path / "down"


async def test_cache_answers_a_failure_with_the_last_result_marked_stale(
    tools: ToolService, tmp_path: Path
) -> None:
    down = await _flaky(tools, Fallback(strategy="cache", stale_after_s=1800), tmp_path)
    fresh = await tools.call(call("flaky", "k1", path=str(down)), now=NOW)
    assert (fresh.result.status_code, fresh.result.stale) == (200, False)

    down.touch()
    later = NOW + timedelta(minutes=29)
    cached = await tools.call(call("flaky", "k2", path=str(down)), now=later)
    result = cached.result
    assert (result.status_code, result.fallback, result.stale) == (200, "cache", True)
    assert result.stale_since == NOW  # the envelope time of the call that produced it
    assert result.result_json == fresh.result.result_json
    assert cached.external_calls == 1  # the primary was tried first


async def test_a_cache_older_than_stale_after_is_not_used(
    tools: ToolService, tmp_path: Path
) -> None:
    down = await _flaky(tools, Fallback(strategy="cache", stale_after_s=1800), tmp_path)
    await tools.call(call("flaky", "k1", path=str(down)), now=NOW)
    down.touch()
    too_late = NOW + timedelta(minutes=31)
    report = await tools.call(call("flaky", "k2", path=str(down)), now=too_late)
    assert report.result.status_code == 500
    assert report.result.fallback is None and not report.result.stale
    assert report.result.error == ("RuntimeError: the backend is down; no fallback answered")


async def test_the_cache_is_per_arguments(tools: ToolService, tmp_path: Path) -> None:
    down = await _flaky(tools, Fallback(strategy="cache", stale_after_s=1800), tmp_path)
    await tools.call(call("flaky", "k1", path=str(down)), now=NOW)
    other = tmp_path / "other"
    down.touch()
    other.touch()
    report = await tools.call(call("flaky", "k2", path=str(other)), now=NOW)
    assert report.result.status_code == 500  # no result was ever cached for these arguments
    cached = await tools.call(call("flaky", "k3", path=str(down)), now=NOW)
    assert cached.result.fallback == "cache"


async def test_an_unhealthy_tool_answers_from_its_fallback_without_running(
    tools: ToolService, tmp_path: Path
) -> None:
    count = python_spec("count", "counter", input_schema=PATH_IN)  # mock fallback
    await tools.register(count)
    runs = tmp_path / "runs"
    report = await tools.call(call("count", "k", path=str(runs)), now=NOW, fallback=True)
    assert (report.result.status_code, report.result.fallback) == (200, "mock")
    assert json.loads(report.result.result_json) == {"echo": "mocked"}
    assert not report.result.verified  # mock data is not a verified fact
    assert not runs.exists() and report.external_calls == 0


async def test_fallback_not_allowed_runs_the_primary(tools: ToolService, tmp_path: Path) -> None:
    await tools.register(python_spec("count", "counter", input_schema=PATH_IN))
    runs = tmp_path / "runs"
    forbidden = call("count", "k", path=str(runs)).model_copy(update={"fallback_allowed": False})
    report = await tools.call(forbidden, now=NOW, fallback=True)
    assert report.result.fallback is None
    assert runs.read_text().splitlines() == ["run"]


async def test_an_unhealthy_tool_with_an_empty_cache_is_still_tried(
    tools: ToolService, tmp_path: Path
) -> None:
    down = await _flaky(tools, Fallback(strategy="cache", stale_after_s=60), tmp_path)
    report = await tools.call(call("flaky", "k", path=str(down)), now=NOW, fallback=True)
    assert (report.result.status_code, report.result.fallback) == (200, None)


async def test_proxy_calls_the_backup_and_verifies_it(tools: ToolService, tmp_path: Path) -> None:
    proxy = Fallback(strategy="proxy", backup=f"{SAMPLES}:backup")
    down = await _flaky(tools, proxy, tmp_path)
    down.touch()
    report = await tools.call(call("flaky", "k", path=str(down)), now=NOW)
    result = report.result
    assert (result.status_code, result.fallback, result.verified) == (200, "proxy", True)
    assert json.loads(result.result_json)["echo"] == "from backup"
    assert result.verification_steps == ("备用服务已回答",)
    assert report.external_calls == 2


async def test_none_returns_the_failure(tmp_path: Path, environ: dict[str, str]) -> None:
    from hermesbus.base.storemark import MarkBook
    from hermesbus.connectors.sqlite.tools import SqliteToolStore
    from hermesbus.processors.tool import ToolSettings

    settings = ToolSettings(home=tmp_path, debug=True)
    store = SqliteToolStore(settings=settings, book=MarkBook(tmp_path))
    async with ToolService(store, settings, environ=environ) as tools:
        down = await _flaky(tools, Fallback(strategy="none"), tmp_path)
        down.touch()
        report = await tools.call(call("flaky", "k", path=str(down)), now=NOW, fallback=True)
        assert report.result.status_code == 500
        assert report.result.error == "RuntimeError: the backend is down"


async def test_a_verification_failure_is_alerted_and_answered_by_the_fallback(
    tools: ToolService,
) -> None:
    """The result that failed verification is discarded and alerted all the same; the
    fallback answers, marked as such (the user is told; memory never takes it)."""
    await tools.register(python_spec("shape", "wrong_shape"))  # mock fallback
    report = await tools.call(call("shape", "k"), now=NOW)
    assert report.result.status_code == 200 and report.result.fallback == "mock"
    assert json.loads(report.result.result_json) == {"echo": "mocked"}
    assert (report.alert or "").startswith("verification failed: output_schema: echo")
    assert report.alert_code == "verification_failed"


async def test_a_cache_entry_from_the_future_is_not_fresh(
    tools: ToolService, tmp_path: Path
) -> None:
    down = await _flaky(tools, Fallback(strategy="cache", stale_after_s=1800), tmp_path)
    ahead = NOW + timedelta(hours=1)
    await tools.call(call("flaky", "k1", path=str(down)), now=ahead)  # cached at NOW + 1 h
    down.touch()
    report = await tools.call(call("flaky", "k2", path=str(down)), now=NOW)
    assert report.result.status_code == 500 and report.result.fallback is None
    later = await tools.call(call("flaky", "k3", path=str(down)), now=ahead + timedelta(minutes=1))
    assert later.result.fallback == "cache"  # the same entry, seen from after its time

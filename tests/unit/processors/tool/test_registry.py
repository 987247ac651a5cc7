"""Admission: a tool is refused, naming what is missing, unless it is complete."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.sqlite.tools import SqliteToolStore
from hermesbus.errors import AdmissionError
from hermesbus.processors.tool import (
    TOOL_NAME_PATTERN,
    Fallback,
    ToolRegistry,
    ToolService,
    ToolSettings,
)
from hermesbus.processors.tool.demo import DEMO_TOOLS, demo_specs

from .conftest import python_spec
from .test_executor import NOW, call


@pytest.fixture
async def store(settings: ToolSettings) -> AsyncIterator[SqliteToolStore]:
    async with SqliteToolStore(settings=settings, book=MarkBook(settings.home)) as store:
        yield store


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"input_schema": None}, "no input schema"),
        ({"output_schema": None}, "no output schema"),
        ({"input_schema": {"type": "nonsense"}}, "input schema is not a valid JSON Schema"),
        ({"health": None}, "no health probe"),
        ({"health": "no_colon_here"}, "health probe 'no_colon_here' is not module:function"),
        ({"verifier": None}, "no verifier"),
        ({"verifier": "tests.unit.nowhere_mod:f"}, "verifier module 'tests.unit.nowhere_mod'"),
        ({"fallback": None}, "no fallback strategy"),
        ({"fallback": Fallback(strategy="none")}, "fallback 'none' is only admitted in debug"),
        ({"fallback": Fallback(strategy="cache")}, "fallback 'cache' needs stale_after_s"),
        ({"fallback": Fallback(strategy="mock")}, "fallback 'mock' needs a mock_result"),
        (
            {"fallback": Fallback(strategy="mock", mock_result={"echo": 1})},
            "mock_result breaks the output schema (echo: 1 is not of type 'string')",
        ),
        ({"fallback": Fallback(strategy="proxy")}, "fallback 'proxy' needs a backup endpoint"),
        ({"target": "tests.unit.processors.tool.nowhere:f"}, "python target module"),
        (
            {"target": "nowhere_such_module:f"},
            "'nowhere_such_module' is not on HERMES_TOOL_MODULES",
        ),
    ],
)
async def test_an_incomplete_tool_is_refused_naming_the_missing_part(
    store: SqliteToolStore, settings: ToolSettings, fields: dict[str, Any], named: str
) -> None:
    registry = ToolRegistry(store, settings)
    with pytest.raises(AdmissionError) as refused:
        await registry.register(python_spec("t", "echo", **fields))
    assert named in str(refused.value)
    assert str(refused.value).startswith("tool 't' refused: ")
    assert await registry.get("t") is None


async def test_every_missing_part_is_named_at_once(
    store: SqliteToolStore, settings: ToolSettings
) -> None:
    spec = python_spec("bare", "echo", input_schema=None, verifier=None, fallback=None, health=None)
    with pytest.raises(AdmissionError) as refused:
        await ToolRegistry(store, settings).register(spec)
    message = str(refused.value)
    for part in ("no input schema", "no health probe", "no verifier", "no fallback strategy"):
        assert part in message


async def test_fallback_none_is_admitted_in_debug_mode_only(
    store: SqliteToolStore, settings: ToolSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = python_spec("dbg", "echo", fallback=Fallback(strategy="none"))
    assert (await ToolRegistry(store, settings, debug=True).register(spec)).name == "dbg"
    monkeypatch.setenv("HERMES_DEBUG", "1")
    from_env = ToolRegistry(store, ToolSettings(home=tmp_path))
    assert from_env.debug is True
    assert (await from_env.register(spec.model_copy(update={"name": "dbg2"}))).name == "dbg2"


async def test_http_hosts_must_be_on_the_allow_list(
    store: SqliteToolStore, settings: ToolSettings
) -> None:
    spec = python_spec("web", "echo", kind="http", target="http://example.com:8080", health=None)
    with pytest.raises(AdmissionError, match=r"host 'example.com' is not on HERMES_TOOL_HOSTS"):
        await ToolRegistry(store, settings).register(spec)
    backup = Fallback(strategy="proxy", backup="http://evil.test/")
    local = spec.model_copy(update={"target": "http://127.0.0.1:1", "fallback": backup})
    with pytest.raises(AdmissionError, match=r"proxy backup host 'evil.test' is not on"):
        await ToolRegistry(store, settings).register(local)
    wider = ToolSettings(home=settings.home, tool_hosts="example.com, 127.0.0.1")
    assert "example.com" in wider.hosts


async def test_an_admitted_spec_persists_in_the_sqlite_file(
    store: SqliteToolStore, settings: ToolSettings
) -> None:
    spec = python_spec("kept", "echo", sensitive_words=("secret",))
    await ToolRegistry(store, settings).register(spec)
    async with SqliteToolStore(settings=settings, book=MarkBook(settings.home)) as reopened:
        assert reopened.path == settings.home / "tools.sqlite3"
        assert await reopened.get_spec("kept") == spec
        assert [s.name for s in await reopened.list_specs()] == ["kept"]


NAMES_IN_USE = [*DEMO_TOOLS, "echo", "echo_tool", "mac2", "yaml_echo", "web_echo", "t", "x" * 64]
NOT_NAMES = [
    "..",
    ".",
    "",
    "../etc",
    "a/b",
    "a.b",
    "a-b",
    "Org_tool",
    "1tool",
    "_tool",
    "org tool",
    "tool\n",
    "wörk",
    "x" * 65,
]


@pytest.mark.parametrize("name", NAMES_IN_USE)
def test_the_names_in_use_match_the_one_pattern(name: str) -> None:
    assert python_spec(name, "echo").name == name


def test_the_demo_specs_all_have_tool_names() -> None:
    assert sorted(s.name for s in demo_specs()) == sorted(DEMO_TOOLS)


@pytest.mark.parametrize("name", NOT_NAMES)
def test_a_name_off_the_pattern_is_refused_saying_so(name: str) -> None:
    with pytest.raises(ValidationError) as refused:
        python_spec(name, "echo")
    assert f"tool name {name!r} does not match {TOOL_NAME_PATTERN}" in str(refused.value)
    assert "a lowercase letter, then up to 63 lowercase letters, digits or _" in str(refused.value)


async def test_a_spec_copied_past_the_check_is_refused_at_admission(
    store: SqliteToolStore, settings: ToolSettings
) -> None:
    sneaked = python_spec("fine", "echo").model_copy(update={"name": ".."})  # copies skip checks
    with pytest.raises(AdmissionError) as refused:
        await ToolRegistry(store, settings).register(sneaked)
    assert str(refused.value).startswith("tool '..' refused: tool name '..' does not match")
    assert await store.list_specs() == []


async def test_a_call_of_a_name_off_the_pattern_is_a_404_naming_it(tools: ToolService) -> None:
    report = await tools.call(call("..", "k"), now=NOW)
    assert report.result.status_code == 404
    assert report.result.error == (
        f"tool name '..' does not match {TOOL_NAME_PATTERN} "
        "(a lowercase letter, then up to 63 lowercase letters, digits or _)"
    )

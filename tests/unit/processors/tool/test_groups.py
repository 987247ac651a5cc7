"""Each tool's own consumer group answers only its tool's calls; ``tool`` answers the rest."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from hermesbus.processors.tool import NAME, ToolService, group_name, serving
from hermesbus.runtime import HandlerInput, SessionState

from .conftest import python_spec
from .test_handler import dispatched


def _inp(tool: str, tools: ToolService) -> HandlerInput:
    return HandlerInput(dispatched(tool, {"x": 1}), SessionState(), NAME, ports={"tools": tools})


def test_group_names_are_valid_processor_names() -> None:
    assert group_name("org_tool") == "tool-org_tool"
    assert group_name("weather-api") == "tool-weather-2dapi"


async def test_a_tool_group_answers_its_own_calls_only(tools: ToolService) -> None:
    await tools.register(python_spec("echo", "echo"))
    own, rest = serving(["echo"]), serving(["echo"], others=True)
    answered = await own(_inp("echo", tools))
    assert len(answered.emit) == 1 and answered.emit[0].target == "mcp:dispatcher"
    assert (await rest(_inp("echo", tools))).emit == ()  # echo's group answers it
    assert (await own(_inp("unknown", tools))).emit == ()
    (not_found,) = (await rest(_inp("unknown", tools))).emit  # a tool with no group
    assert not_found.payload.body.status_code == 404  # type: ignore[union-attr]


def test_names_that_differ_only_in_case_or_punctuation_get_different_groups() -> None:
    names = ["Org.Tool", "org-tool", "org.tool", "org_tool", "ORG_TOOL", "org-2etool"]
    groups = [group_name(name) for name in names]
    assert len(set(groups)) == len(names)
    assert group_name("Org.Tool") == "tool--4frg-2e-54ool"


@given(st.lists(st.from_regex(r"[A-Za-z0-9_.\-]{1,20}", fullmatch=True), unique=True, max_size=30))
def test_group_names_are_injective_and_valid(names: list[str]) -> None:
    groups = [group_name(name) for name in names]
    assert len(set(groups)) == len(groups)
    assert all(re.fullmatch(r"[a-z][a-z0-9_-]*", group) for group in groups)

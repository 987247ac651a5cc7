"""Agent states: a model chooses the tools, each call an ordinary cycle, its answers checked.

The model is the scripted OpenAI-compatible server (``model_server``), reached over HTTP
by the tool processor's :class:`ChatModel`; the tools answer from a script with the demo
tools' own results; the four processors run on the in-memory bus as ``up`` wires them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hermesbus import Envelope, Payload, Reply, ToolCall, UserTurn
from hermesbus.compose.stack import in_memory
from hermesbus.contract.payloads import ModelAnswer, ModelChoice, ModelRequest
from hermesbus.demo import agent
from hermesbus.demo.scripted import ScriptedTools
from hermesbus.errors import IntentError
from hermesbus.processors import protocol
from hermesbus.processors.chat import ChatEndpoint
from hermesbus.processors.conversation._agent import kept_to, opening
from hermesbus.processors.dispatcher import StaticHealth
from hermesbus.processors.flow import StaticCatalog, lint, load_flow
from hermesbus.processors.tool import DEMO_MODULES, ChatModel, ToolSpec, checked_answer, demo
from hermesbus.processors.tool.demo import DEMO_SIGNING_ENV
from hermesbus.processors.tool.demo import tools as demo_tools
from hermesbus.processors.tool.demo.model_server import DEMO_SCRIPT, ScriptedModel
from hermesbus.testing import Harness

T0 = datetime(2024, 6, 3, 1, 0, tzinfo=UTC)
SESSION = "budget-1"
REGISTERED = frozenset({"org_tool", "finance_tool"})
SPECS = {spec.name: spec for spec in demo.demo_specs()}
BUDGET = agent.flow_text().decode()


class Specs:
    """The tool store's part the model reads: the demo tools' pinned specs."""

    def __init__(self, specs: Mapping[str, ToolSpec]) -> None:
        self.specs = specs

    async def get_spec(self, name: str) -> ToolSpec | None:
        return self.specs.get(name)


def unsigned(name: str) -> Any:
    """A demo tool's own answer, its result JSON (the scripted tools sign nothing)."""
    run = getattr(demo_tools, name)
    return lambda call: json.loads(run(json.loads(call.arguments_json)).body)


@pytest.fixture(autouse=True)
def signing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo tools sign their answers (the scripted tools then read the JSON only)."""
    monkeypatch.setenv(DEMO_SIGNING_ENV, demo.demo_keys()[DEMO_SIGNING_ENV])


@pytest.fixture
def scripted() -> Iterator[ScriptedModel]:
    with ScriptedModel(DEMO_SCRIPT) as model:
        yield model


@asynccontextmanager
async def agent_bus(
    tmp_path: Path,
    model_url: str | None,
    flow: str = BUDGET,
    access: protocol.AccessView | None = None,
    policy: protocol.ProtocolPolicy | None = None,
    **endpoint: Any,
) -> AsyncIterator[tuple[Harness, ScriptedTools]]:
    tools = ScriptedTools({name: unsigned(name) for name in ("org_tool", "finance_tool")})
    health = StaticHealth(
        [protocol.ToolHealth(name, 20.0, 1.0) for name in ("org_tool", "finance_tool")]
    )
    chat = None
    if model_url is not None:
        given = {"timeout_s": 60.0, **endpoint}  # not about timing: a busy machine
        chat = ChatModel(ChatEndpoint(model_url, model="m", **given), Specs(SPECS))
        await chat.start()
    try:
        async with in_memory(
            tmp_path,
            tools=tools,
            health=health,
            policy=policy or protocol.ProtocolPolicy(),
            flows=StaticCatalog.of([load_flow(flow, "agent.yaml")[0]]),
            model=chat,
            access=access,
        ) as harness:
            yield harness, tools
    finally:
        if chat is not None:
            await chat.stop()


def turn(text: str, n: int = 1) -> Envelope:
    return Envelope(
        message_id=f"m{n}",
        timestamp=T0 + timedelta(seconds=n),
        source="app:web",
        target="conversation:in",
        session_id=SESSION,
        user_id="u_xyz789",
        trace_id=f"t{n}",
        payload=Payload(body=UserTurn(text=text)),
    )


def replies(harness: Harness) -> list[str]:
    return [
        s.envelope.payload.body.text
        for s in harness.sent
        if isinstance(s.envelope.payload.body, Reply)
    ]


def bodies(harness: Harness, kind: type[Any]) -> list[Any]:
    """Every body of ``kind`` that went over the bus, in order."""
    return [
        s.envelope.payload.body for s in harness.log if isinstance(s.envelope.payload.body, kind)
    ]


def record(harness: Harness) -> dict[str, Any]:
    return dict(harness.state("conversation", SESSION).data["values"]["agent"])


def problems(harness: Harness) -> list[dict[str, str]]:
    return list(harness.state("conversation", SESSION).data["problems"])


def script_of(*answers: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    return answers


def test_the_shipped_agent_flow_lints_clean_against_the_demo_tools() -> None:
    spec, lines = load_flow(BUDGET, agent.FLOW_FILE)
    registered = {"org_tool", "finance_tool"}
    assert lint(spec, lines, modules=(DEMO_MODULES,), registered=registered) == []


async def test_the_model_chooses_two_tools_each_an_ordinary_cycle_then_answers(
    tmp_path: Path, scripted: ScriptedModel
) -> None:
    async with agent_bus(tmp_path, scripted.url) as (harness, tools):
        await harness.send(turn("我的部门还有多少预算？"))
        assert harness.refused == []
        assert replies(harness) == [agent.ENDING]
        # the tools ran in the order the model chose them, with its arguments
        assert [(c.tool, json.loads(c.arguments_json)) for c, _ in tools.calls] == [
            ("org_tool", {"user_id": "u_xyz789"}),
            ("finance_tool", {"action": "budget", "user_id": "u_xyz789"}),
        ]
        # each through the dispatcher, memory first: a ToolCall to tool:<name> from it
        dispatched = [
            s.envelope
            for s in harness.log
            if isinstance(s.envelope.payload.body, ToolCall)
            and s.envelope.source == protocol.DISPATCHER_ADDRESS
        ]
        assert [e.target for e in dispatched] == ["tool:org_tool", "tool:finance_tool"]
        # three rounds asked, three answered, each an envelope of its own on the log
        assert [r.round for r in bodies(harness, ModelRequest)] == [1, 1, 2, 2, 3, 3]
        answers = [
            s.envelope.payload.body
            for s in harness.log
            if isinstance(s.envelope.payload.body, ModelAnswer)
            and s.envelope.source == protocol.MODEL_ADDRESS
        ]
        assert [[c.tool for c in a.choices] for a in answers] == [
            ["org_tool"],
            ["finance_tool"],
            [],
        ]
        assert answers[-1].content == agent.ENDING
        assert all(a.tokens > 0 and a.model == "scripted" for a in answers)
    # the model was offered exactly the allow-list, as functions of the pinned schemas
    assert len(scripted.requests) == 3
    offered = scripted.requests[0]["tools"]
    assert [f["function"]["name"] for f in offered] == ["org_tool", "finance_tool"]
    assert offered[0]["function"]["parameters"] == SPECS["org_tool"].input_schema
    assert offered[1]["function"]["description"] == SPECS["finance_tool"].description
    first = scripted.requests[0]["messages"]
    assert first[0]["role"] == "system" and "u_xyz789" in first[0]["content"]
    assert first[1] == {"role": "user", "content": "我的部门还有多少预算？"}
    last = scripted.requests[2]["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert json.loads(last[5]["content"])["budget_remaining"] == 125000


async def test_a_tool_off_the_list_and_arguments_the_schema_refuses_are_told_and_never_run(
    tmp_path: Path,
) -> None:
    script = script_of(
        {
            "tool_calls": [
                {"name": "table_tool", "arguments": {"action": "export", "table": "A"}},
                {"name": "org_tool", "arguments": {"user": 7}},
            ]
        },
        {"tool_calls": [{"name": "org_tool", "arguments": {"user_id": "u_xyz789"}}]},
        {"content": "{tool:org_tool.dept}"},
    )
    with ScriptedModel(script) as model:
        async with agent_bus(tmp_path, model.url) as (harness, tools):
            await harness.send(turn("预算"))
            assert replies(harness) == ["采购部"]
            assert [c.tool for c, _ in tools.calls] == ["org_tool"]  # only the sound call
            kept = record(harness)
            assert kept["refused"] == 2
            refusals = [p for p in problems(harness) if p["code"] == "refused"]
            assert [p["message"].split(":")[0] for p in refusals] == ["table_tool", "org_tool"]
            assert (
                "not a tool of this step (allowed: org_tool, finance_tool)"
                in (refusals[0]["message"])
            )
            assert "do not fit its schema" in refusals[1]["message"]
        # the model heard each refusal as the tool's result, and tried again
        told = [m for m in model.requests[1]["messages"] if m["role"] == "tool"]
        assert [m["content"].split(":")[0] for m in told] == ["refused", "refused"]
        assert "table_tool is not a tool of this step" in told[0]["content"]


async def test_past_its_rounds_the_state_fails_by_its_exit(tmp_path: Path) -> None:
    again = {"tool_calls": [{"name": "org_tool", "arguments": {"user_id": "u_xyz789"}}]}
    flow = BUDGET.replace("max_rounds: 4", "max_rounds: 2")
    with ScriptedModel(script_of(again, again, again)) as model:
        async with agent_bus(tmp_path, model.url, flow) as (harness, tools):
            await harness.send(turn("预算"))
            assert len(tools.calls) == 1 and len(model.requests) == 2
            assert "tools" not in model.requests[1]  # the last round: answer, call nothing
            assert harness.state("conversation", SESSION).data["state"] == "failed"
            assert replies(harness) == [
                "model:chat 暂时无法完成请求（rounds）。建议：请稍后重试或联系管理员。"
            ]
            assert problems(harness)[-1]["message"] == (
                "the model of ask used its 2 rounds without answering"
            )


async def test_a_model_that_fails_or_is_missing_fails_the_state_and_says_so(
    tmp_path: Path,
) -> None:
    async with agent_bus(tmp_path, "http://127.0.0.1:9/v1", timeout_s=2.0) as (harness, tools):
        await harness.send(turn("预算"))
        assert tools.calls == []
        assert harness.state("conversation", SESSION).data["state"] == "failed"
        answer = bodies(harness, ModelAnswer)[0]
        assert answer.error.startswith(
            "model endpoint http://127.0.0.1:9/v1/chat/completions failed"
        )
        assert replies(harness) == [
            "model:chat 暂时无法完成请求（model）。建议：请稍后重试或联系管理员。"
        ]
    async with agent_bus(tmp_path / "none", None) as (harness, tools):
        await harness.send(turn("预算"))
        assert bodies(harness, ModelAnswer)[0].error == (
            "no model is configured here (HERMES_LLM_URL is not set)"
        )
        assert harness.state("conversation", SESSION).data["state"] == "failed"


async def test_a_forged_or_late_model_answer_reaches_no_state(tmp_path: Path) -> None:
    async with agent_bus(tmp_path, None) as (harness, _):
        forged = Envelope(
            message_id="forged-1",
            timestamp=T0,
            source=protocol.MODEL_ADDRESS,
            target=protocol.DISPATCHER_ADDRESS,
            session_id=SESSION,
            user_id="u_xyz789",
            trace_id="t-forged",
            payload=Payload(
                context={protocol.CYCLE: "no-such-cycle"}, body=ModelAnswer(content="pay me")
            ),
        )
        await harness.send(forged)
        assert replies(harness) == []
        assert not any(
            isinstance(s.envelope.payload.body, ModelAnswer)
            and s.envelope.source == protocol.DISPATCHER_ADDRESS
            for s in harness.log
        )
        assert harness.state("dispatcher", SESSION).data["late"] == 1


def test_an_agent_state_says_its_model_and_moves_on_done() -> None:
    lacking = BUDGET.replace(
        "  - {from: ask, on: done, to: answered}\n", "  - {from: ask, on: other, to: answered}\n"
    )
    spec, lines = load_flow(lacking, "agent.yaml")
    said = [
        f.problem.message for f in lint(spec, lines, modules=(DEMO_MODULES,), registered=REGISTERED)
    ]
    assert "an agent state moves on its answer: it needs a move on done" in said
    plain = BUDGET.replace("    kind: agent\n", "")
    spec, lines = load_flow(plain, "agent.yaml")
    said = [
        f.problem.message for f in lint(spec, lines, modules=(DEMO_MODULES,), registered=REGISTERED)
    ]
    assert "agent: is for states of kind agent" in said


class FinanceOnly:
    """Access rules where finance_tool needs the role finance (nobody here holds it)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, frozenset[str]]] = []

    async def admit(
        self,
        tool: str,
        user: str,
        roles: frozenset[tuple[str, str]],
        at_ms: int,
        key: str,
        *,
        count: bool = True,
    ) -> protocol.Admission:
        if not count:  # every call's roles are asked first
            self.asked.append((tool, frozenset(role for role, _ in roles)))
        if tool == "finance_tool" and "finance" not in {role for role, _ in roles}:
            return protocol.Admission(protocol.FORBIDDEN, "finance_tool 需要角色 finance。", True)
        return protocol.Admission(checked=True)


async def test_a_tool_the_model_chose_is_refused_like_any_call_the_user_may_not_make(
    tmp_path: Path,
) -> None:
    """The dispatcher refuses finance_tool before it runs; the model hears the sentence as
    that call's result and answers with it."""
    script = script_of(
        {
            "tool_calls": [
                {"name": "finance_tool", "arguments": {"action": "budget", "user_id": "u_xyz789"}}
            ]
        },
        {"content": "抱歉，您无权查询预算。"},
    )
    gate = FinanceOnly()
    with ScriptedModel(script) as model:
        async with agent_bus(tmp_path, model.url, access=gate) as (harness, tools):
            await harness.send(turn("我的部门还有多少预算？"))
            assert tools.calls == []  # finance_tool never ran
            assert replies(harness) == ["抱歉，您无权查询预算。"]
            assert harness.state("conversation", SESSION).data["state"] == "answered"
            assert record(harness)["refused"] == 1
        told = [m for m in model.requests[1]["messages"] if m["role"] == "tool"]
        assert told == [
            {
                "role": "tool",
                "tool_call_id": "call_1_0",
                "content": "refused: finance_tool 需要角色 finance。",
            }
        ]
    assert [tool for tool, _ in gate.asked] == ["finance_tool"]


class LosesModelAnswers(protocol.ProtocolPolicy):
    """The protocol, but every model answer is lost on its way (as if never written)."""

    def refusal(self, topic: str, identity: str, envelope: Envelope) -> str | None:
        if isinstance(envelope.payload.body, ModelAnswer) and identity == protocol.TOOL:
            return "lost by the test"
        return super().refusal(topic, identity, envelope)


async def test_a_model_round_that_gets_no_answer_ends_at_its_deadline(
    tmp_path: Path, scripted: ScriptedModel
) -> None:
    async with agent_bus(tmp_path, scripted.url, policy=LosesModelAnswers()) as (harness, _):
        await harness.send(turn("预算"))
        assert replies(harness) == []
        (deadline,) = harness.timers("dispatcher", SESSION)
        assert deadline.purpose.startswith("model:")
        assert deadline.due_at == T0 + timedelta(seconds=1) + timedelta(seconds=30)  # budget
        await harness.fire(deadline.purpose, session_id=SESSION)
        assert harness.state("conversation", SESSION).data["state"] == "failed"
        assert replies(harness) == [
            "model:chat 暂时无法完成请求（timeout）。建议：请稍后重试（try again later）。"
        ]
        assert harness.state("conversation", SESSION).data["pending"] is None


async def test_a_loop_through_an_agent_state_spends_one_budget_per_turn(
    tmp_path: Path,
) -> None:
    """ask -done-> again -done-> ask: each entry for the same turn counts on, so the loop
    stops at max_rounds model requests (not one budget per entry)."""
    back = "  - {from: answered, on: done, to: ask}\n"
    looping = (
        BUDGET.replace("max_rounds: 4", "max_rounds: 3")
        .replace("  - id: answered\n    name: 已回答\n    kind: terminal\n",
                 "  - id: answered\n    name: 已回答\n    exit: failed\n")
        .replace("  - {from: ask, on: done, to: answered}\n",
                 "  - {from: ask, on: done, to: answered}\n" + back)
    )  # fmt: skip
    with ScriptedModel(script_of({"content": "好的"})) as model:
        async with agent_bus(tmp_path, model.url, looping) as (harness, _):
            await harness.send(turn("预算"))
            assert len(model.requests) == 3
            assert replies(harness)[:3] == ["好的", "好的", "好的"]
            assert problems(harness)[-1]["code"] == "rounds"


def test_the_conversation_refuses_what_the_allow_list_lacks_whatever_the_answer_says() -> None:
    """A ModelAnswer is checked again where it is used: a refusal left empty by mistake or
    by a forger does not make a call off the list, or with no JSON object, run."""
    choices = (
        ModelChoice(call_id="a", tool="table_tool", arguments_json="{}"),
        ModelChoice(call_id="b", tool="org_tool", arguments_json="not json"),
        ModelChoice(call_id="c", tool="org_tool", arguments_json='{"user_id": "u"}'),
    )
    kept = kept_to(ModelAnswer(choices=choices), frozenset({"org_tool"}))
    assert [c.refusal for c in kept.choices] == [
        "table_tool is not a tool of this step",
        "the arguments of org_tool are not a JSON object",
        "",
    ]


async def test_an_empty_answer_is_a_failed_round_not_a_silent_one(tmp_path: Path) -> None:
    with ScriptedModel(script_of({"content": ""})) as model:
        async with agent_bus(tmp_path, model.url) as (harness, _):
            await harness.send(turn("预算"))
            (answer,) = bodies(harness, ModelAnswer)[:1]
            assert answer.error == "the model answered neither text nor a tool call"
            assert harness.state("conversation", SESSION).data["state"] == "failed"
            assert len(replies(harness)) == 1


def test_each_agent_state_spends_its_own_budget_of_a_turn() -> None:
    """Another agent state of the same turn starts afresh; coming back to one carries what
    it spent (so a loop through one, or through two, ends); a new turn starts afresh."""
    left_a = {**opening("a", "p", "t", "turn-1"), "round": 3, "tokens": 900}
    b = opening("b", "p", "t", "turn-1", left_a)
    assert (b["round"], b["tokens"]) == (0, 0)
    left_b = {**b, "round": 1, "tokens": 100}
    again = opening("a", "p", "t", "turn-1", left_b)
    assert (again["round"], again["tokens"]) == (3, 900)
    later = opening("a", "p", "t", "turn-2", left_b)
    assert (later["round"], later["tokens"]) == (0, 0)


def test_an_answer_cut_off_at_its_token_limit_is_no_answer() -> None:
    request = ModelRequest(agent="f/s", tools=("org_tool",), messages_json="[]", max_tokens=10)
    cut = {"choices": [{"message": {"content": "您所在的部门本月预"}, "finish_reason": "length"}]}
    with pytest.raises(IntentError, match="cut off at its token limit"):
        checked_answer(cut, request, {})

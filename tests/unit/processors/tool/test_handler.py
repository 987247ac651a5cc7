"""The handler on envelopes: a ToolCall in, its ToolResult (and alert) out."""

from __future__ import annotations

import json
from pathlib import Path

from hermesbus import Envelope, Payload
from hermesbus.contract.envelope import Metadata
from hermesbus.contract.payloads import ErrorReport, ToolCall, ToolResult, UserTurn
from hermesbus.processors.tool import NAME, TOPIC, CallReport, ToolService, handle
from hermesbus.runtime import HandlerInput, SessionState, derive_id

from .conftest import python_spec
from .test_executor import NOW

CYCLE = derive_id("turn-1", "cycle")


def dispatched(tool: str, arguments: object, *, fallback: bool = False) -> Envelope:
    context: dict[str, object] = {"cycle": CYCLE, "tools": [tool]}
    if fallback:
        context["fallback"] = True
    body = ToolCall(
        tool=tool,
        arguments_json=json.dumps(arguments),
        idempotency_key=derive_id("turn-1", "call", tool),
    )
    return Envelope(
        message_id=f"dispatch-{tool}",
        timestamp=NOW,
        source="mcp:dispatcher",
        target=f"tool:{tool}",
        session_id="sess_456",
        user_id="u_xyz789",
        trace_id="trace-1",
        span_id="span-dispatch",
        causation_id="call-envelope",
        payload=Payload(task="check_budget", context=context, body=body),
        metadata=Metadata(timeout_ms=5000, attempt=2),
    )


def run(envelope: Envelope, tools: ToolService) -> HandlerInput:
    return HandlerInput(envelope, SessionState(), NAME, {"tools": tools}, topic=TOPIC)


async def test_a_call_is_answered_to_the_dispatcher_in_its_cycle(tools: ToolService) -> None:
    await tools.register(python_spec("echo_tool", "echo"))
    call = dispatched("echo_tool", {"text": "你好"})
    outcome = await handle(run(call, tools))
    assert outcome.state is None and outcome.timers == ()
    (answer,) = outcome.emit
    assert (answer.source, answer.target) == ("tool:echo_tool", "mcp:dispatcher")
    assert answer.payload.task == "check_budget"
    assert answer.payload.context["cycle"] == CYCLE
    assert (answer.session_id, answer.user_id, answer.trace_id) == (
        "sess_456",
        "u_xyz789",
        "trace-1",
    )
    assert answer.causation_id == call.message_id and answer.parent_span_id == "span-dispatch"
    assert answer.timestamp == NOW and answer.metadata.attempt == 2
    result = answer.payload.body
    assert isinstance(result, ToolResult)
    assert (result.tool, result.status_code, result.verified) == ("echo_tool", 200, True)
    assert result.verification_steps == ("已回显输入",)
    assert answer.diagnostics is not None
    assert answer.diagnostics.external_calls.count == 1
    assert answer.diagnostics.processing_time_ms > 0


async def test_a_redelivered_envelope_gets_the_same_answer(
    tools: ToolService, tmp_path: Path
) -> None:
    from .test_calls import PATH_IN

    await tools.register(python_spec("count", "counter", input_schema=PATH_IN))
    runs = tmp_path / "runs"
    call = dispatched("count", {"path": str(runs)})
    first = await handle(run(call, tools))
    again = await handle(run(call, tools))
    assert runs.read_text().splitlines() == ["run"]
    assert first.emit[0].payload == again.emit[0].payload
    assert first.emit[0].message_id == again.emit[0].message_id


async def test_a_failed_verification_also_raises_an_alert(tools: ToolService) -> None:
    """The discarded result is alerted; its fallback answers the dispatcher, marked."""
    await tools.register(python_spec("shape", "wrong_shape"))  # mock fallback
    outcome = await handle(run(dispatched("shape", {}), tools))
    answer, alert = outcome.emit
    result = answer.payload.body
    assert isinstance(result, ToolResult)
    assert (result.status_code, result.fallback) == (200, "mock")
    assert json.loads(result.result_json) == {"echo": "mocked"}
    assert (alert.source, alert.target) == ("tool:shape", "alerts:tool")
    report = alert.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code) == ("tool:shape", "verification_failed")
    assert "output_schema" in report.message
    assert alert.payload.context["cycle"] == CYCLE
    assert answer.span_id != alert.span_id


async def test_the_fallback_flag_of_the_dispatcher_is_obeyed(tools: ToolService) -> None:
    await tools.register(python_spec("echo_tool", "echo"))  # mock fallback
    outcome = await handle(run(dispatched("echo_tool", {"text": "x"}, fallback=True), tools))
    result = outcome.emit[0].payload.body
    assert isinstance(result, ToolResult)
    assert (result.fallback, json.loads(result.result_json)) == ("mock", {"echo": "mocked"})


async def test_an_unknown_tool_is_answered_404(tools: ToolService) -> None:
    outcome = await handle(run(dispatched("nope", {}), tools))
    result = outcome.emit[0].payload.body
    assert isinstance(result, ToolResult)
    assert (result.status_code, result.tool) == (404, "nope")


async def test_other_bodies_are_left_alone(tools: ToolService) -> None:
    turn = dispatched("echo_tool", {}).model_copy(
        update={"payload": Payload(body=UserTurn(text="hi"))}
    )
    assert await handle(run(turn, tools)) == (await handle(run(turn, tools)))
    assert (await handle(run(turn, tools))).emit == ()


class _Reporting:
    """A tool port whose tool reports progress twice, then answers."""

    async def call(self, call: ToolCall, **given: object) -> CallReport:
        progress = given.get("progress")
        assert callable(progress)
        await progress(0, 2)
        await progress(1, 2)
        return CallReport(ToolResult(tool=call.tool, status_code=200, result_json="{}"))


async def test_progress_is_news_to_the_dispatcher_once_before_the_result() -> None:
    sent: list[Envelope] = []

    async def news(envelope: Envelope) -> None:
        sent.append(envelope)

    call = dispatched("ocr_tool", {"files": []})
    given = HandlerInput(
        call, SessionState(), NAME, {"tools": _Reporting()}, topic=TOPIC, news=news
    )
    outcome = await handle(given)
    (notice,) = sent  # the first report only: the user is told once anyway
    report = notice.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.code, report.component, notice.target) == (
        "progress",
        "tool:ocr_tool",
        "mcp:dispatcher",
    )
    assert "0/2" in report.message and notice.causation_id == call.message_id
    (answer,) = outcome.emit
    assert isinstance(answer.payload.body, ToolResult)


async def test_without_news_a_call_runs_as_before(tools: ToolService) -> None:
    await tools.register(python_spec("echo_tool", "echo"))
    outcome = await handle(run(dispatched("echo_tool", {"text": "x"}), tools))  # news None
    (answer,) = outcome.emit
    assert isinstance(answer.payload.body, ToolResult)

"""The tool processor's handler: a ``ToolCall`` to ``tool:<name>`` in, its ``ToolResult`` out.

One result goes back to the dispatcher (same task and context cycle); when the result
failed verification, an ``ErrorReport`` also goes to ``alerts:tool``. All I/O goes
through ``inp.ports["tools"]`` (a :class:`ToolPort`, e.g. :class:`ToolService`).
"""

from __future__ import annotations

from hermesbus.contract.envelope import Diagnostics, Envelope, ExternalCalls
from hermesbus.contract.payloads import (
    Body,
    ErrorReport,
    ModelAnswer,
    ModelRequest,
    ToolCall,
    ToolResult,
)
from hermesbus.processors.protocol import (
    ALERTS,
    DISPATCHER_ADDRESS,
    FALLBACK,
    MODEL_ADDRESS,
    TOOL,
    answer,
    component_of,
    progress_notice,
    result_confidence,
)
from hermesbus.processors.tool._model import MODEL_PORT, ModelPort
from hermesbus.processors.tool._service import (
    DEFINITION_ALERT,
    VERIFICATION_ALERT,
    CallReport,
    Progress,
    ToolPort,
)
from hermesbus.runtime import HandlerInput, Outcome

__all__ = ["NAME", "PORT", "TOPIC", "handle"]

NAME = TOOL
TOPIC = "hermes.tool"
PORT = "tools"
"""The key of the :class:`ToolPort` in ``HandlerInput.ports``."""


_ADVICE = {
    VERIFICATION_ALERT: "the result was discarded; check the tool's signing key, schema and output",
    DEFINITION_ALERT: (
        "its fallback answers meanwhile; `hermesbus tools approve TOOL` shows what changed "
        "and re-admits it, if the change is wanted"
    ),
}


async def handle(inp: HandlerInput) -> Outcome:
    """Run the call addressed to ``tool:<name>``; other bodies are left alone."""
    envelope = inp.envelope
    body = envelope.payload.body
    if isinstance(body, ModelRequest) and envelope.target == MODEL_ADDRESS:
        return await _ask_model(inp, body)
    if not isinstance(body, ToolCall) or component_of(envelope.target) != TOOL:
        return Outcome()
    tools: ToolPort = inp.ports[PORT]
    report = await tools.call(
        body,
        now=envelope.timestamp,
        fallback=envelope.payload.context.get(FALLBACK) is True,
        timeout_ms=envelope.metadata.timeout_ms,
        progress=_progress(inp),
    )
    emit = [_answer(envelope, report, DISPATCHER_ADDRESS, report.result, 0)]
    if report.alert is not None:
        alert = ErrorReport(
            component=envelope.target,
            code=report.alert_code,
            message=report.alert,
            advice=_ADVICE.get(report.alert_code, ""),
        )
        emit.append(_answer(envelope, report, ALERTS, alert, 1))
    return Outcome(emit=tuple(emit))


async def _ask_model(inp: HandlerInput, request: ModelRequest) -> Outcome:
    """A flow's agent state asks the model: its answer (checked, or why there is none)
    goes back to the dispatcher as a ``ModelAnswer``, the log's record of what it said."""
    envelope = inp.envelope
    model: ModelPort | None = inp.ports.get(MODEL_PORT)
    if model is None:
        answered = ModelAnswer(error="no model is configured here (HERMES_LLM_URL is not set)")
    else:
        answered = await model.answer(request, envelope)
    calls = 1 if model is not None and not answered.error else 0
    diagnostics = Diagnostics(external_calls=ExternalCalls(count=calls, avg_latency_ms=0.0))
    return Outcome(emit=(_sent(envelope, 0, DISPATCHER_ADDRESS, answered, diagnostics),))


def _progress(inp: HandlerInput) -> Progress | None:
    """Tells the dispatcher, at once, the first time the call's tool reports progress (it
    then tells the user the tool is processing); None where no news can be sent."""
    news = inp.news
    if news is None:
        return None
    told = False

    async def heard(done: float, total: float | None) -> None:
        nonlocal told
        if told:
            return
        told = True
        notice = progress_notice(inp.envelope, done, total, 0)
        if notice is not None:
            await news(notice)

    return heard


def _answer(
    envelope: Envelope, report: CallReport, target: str, body: Body, index: int
) -> Envelope:
    """The answer's diagnostics: the call's time, its external calls, and (a result) how
    far it can be trusted, which the rollup averages per tool and the alerts judge."""
    diagnostics = Diagnostics(
        processing_time_ms=report.elapsed_ms,
        external_calls=ExternalCalls(
            count=report.external_calls, avg_latency_ms=report.avg_latency_ms
        ),
        confidence_score=_confidence(envelope, body),
    )
    return _sent(envelope, index, target, body, diagnostics)


def _confidence(call: Envelope, body: Body) -> float:
    """How far the answer can be trusted (:func:`result_confidence`); 0.0 for the tool's
    own when its fallback answered for it because the tool failed (not asked for by the
    dispatcher): what the rollup takes as the tool's confidence."""
    if not isinstance(body, ToolResult):
        return 1.0
    if body.fallback is not None and call.payload.context.get(FALLBACK) is not True:
        return 0.0
    return result_confidence(body)


def _sent(
    envelope: Envelope, index: int, target: str, body: Body, diagnostics: Diagnostics
) -> Envelope:
    """The ``index``-th envelope emitted for ``envelope``, from what it was addressed to
    (``tool:<name>`` or ``model:chat``), with its task, context and metadata."""
    return answer(
        envelope,
        index,
        source=envelope.target,
        target=target,
        body=body,
        task=envelope.payload.task,
        context=envelope.payload.context,
        metadata=envelope.metadata,
        diagnostics=diagnostics,
    )

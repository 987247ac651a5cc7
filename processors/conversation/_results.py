"""The dispatcher's answers (``ToolResults``, ``ErrorReport``), by task and state."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, Final

from hermesbus.contract.envelope import Envelope
from hermesbus.contract.payloads import ErrorReport, ToolResult, ToolResults
from hermesbus.processors import protocol
from hermesbus.processors.conversation import _flow as flow
from hermesbus.processors.conversation import _texts as texts
from hermesbus.processors.conversation._context import Step
from hermesbus.processors.conversation._machine import (
    FAILURE,
    GAVE_UP_WAIT,
    MACHINE,
    MATERIALS_WAIT,
    START,
    VALIDATION_WAIT,
)

__all__ = [
    "EXITS",
    "TASKS",
    "current_cycle",
    "on_error",
    "on_stray_error",
    "on_tool_results",
]

log = logging.getLogger(__name__)

_TOOL_SUMMARY_CHARS: Final = 60
_CALLER_ERRORS: Final = range(400, 500)
"""HTTP's client-error class: the request was wrong, another try fails the same way..."""
_TRANSIENT: Final = frozenset({408, 425, 429})
"""... except a timeout, too early and too many requests: later, the same request may pass."""
_LATER: Final = "请稍后重试或联系管理员"


def current_cycle(step: Step, envelope: Envelope) -> bool:
    """An answer for the cycle the conversation waits for; anything else is stale."""
    pending = step.session.pending
    cycle = envelope.payload.context.get(protocol.CYCLE)
    if pending is None or cycle != pending.cycle:
        log.info("session %s: stale answer for cycle %s", envelope.session_id, cycle)
        return False
    return True


def _loads(result: ToolResult) -> dict[str, Any]:
    try:
        value = json.loads(result.result_json)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _absorb(
    step: Step, cycle: str, answer: ToolResults, contents: Sequence[dict[str, Any]]
) -> None:
    """Traces, history, stale/degraded notes and memory's preferences/candidates."""
    step.set_status(cycle, {r.tool: r.status_code for r in answer.results})
    notes, session = list(step.session.notes), step.session
    for result in answer.results:
        step.record_result(result, cycle)
        if result.stale:
            notes.append(texts.stale_note(result.tool, result.stale_since))
        elif result.fallback:
            notes.append(texts.degraded_note(result.tool, result.fallback))
    memory = answer.context
    preferences = {**session.preferences, **(memory.preferences if memory else {})}
    skip = set(preferences) | set(session.declined)
    found = {k: v for k, v in (memory.candidates if memory else {}).items() if k not in skip}
    step.update(
        notes=tuple(notes),
        stale=session.stale or any(r.stale for r in answer.results),
        degraded=session.degraded or any(r.fallback and not r.stale for r in answer.results),
        preferences=preferences,
        candidates={**session.candidates, **found},
    )


def on_tool_results(step: Step, answer: ToolResults) -> None:
    pending = step.session.pending
    if pending is None:
        return
    step.update(pending=None)
    contents = [_loads(r) for r in answer.results]
    _absorb(step, pending.cycle, answer, contents)
    by_tool = {r.tool: r for r in answer.results}
    failed = next((r for r in answer.results if r.status_code != protocol.OK), None)
    missing = [tool for tool in pending.tools if tool not in by_tool]
    steps = tuple(s for r in answer.results for s in r.verification_steps)
    step.update(steps={**step.session.steps, pending.task: steps})
    if failed is not None or missing:
        _fail_result(step, failed, missing)
        return
    results = {r.tool: c for r, c in zip(answer.results, contents, strict=True)}
    TASKS[pending.task](step, results, answer)


def _fail_result(step: Step, failed: ToolResult | None, missing: Sequence[str]) -> None:
    """A tool answered with an error (or not at all). A 4xx is the caller's mistake: the
    user is told what the tool said was wrong; anything else may pass, so: retry later."""
    if failed is None:
        component = protocol.tool_at(missing[0])
        text = texts.error_text(component, "missing", _LATER)
        _fail(step, component, "missing", "no result", text)
        return
    component, code = protocol.tool_at(failed.tool), failed.status_code
    if _CALLER_ERRORS.start <= code < _CALLER_ERRORS.stop and code not in _TRANSIENT:
        text = texts.rejected_text(failed.tool, code, failed.error)
    else:
        text = texts.error_text(component, str(code), _LATER)
    _fail(step, component, str(code), failed.error or "", text)


def _check_budget(step: Step, results: dict[str, dict[str, Any]], _: ToolResults) -> None:
    org, finance = results.get("org_tool", {}), results.get("finance_tool", {})
    step.fact(
        user_name=org.get("name"),
        dept=org.get("dept") or finance.get("dept"),
        manager=org.get("manager"),
        budget_remaining=finance.get("budget_remaining"),
        currency=finance.get("currency"),
    )
    step.move("expense_intent")
    period = step.session.facts.get("period", "")
    label = f"{period[:4]}年{int(period[5:7])}月" if len(period) == 7 else ""  # noqa: PLR2004
    steps = step.session.steps.get("check_budget", ())
    step.update(ask="materials")
    step.arm(MATERIALS_WAIT.purpose)
    checklist = flow.checklist(step)
    text = texts.materials_text({**step.session.facts, "period_label": label}, checklist)
    step.reply(text, steps=steps)


def _ocr_precheck(step: Step, results: dict[str, dict[str, Any]], _: ToolResults) -> None:
    ocr = results.get("ocr_tool", {})
    invoices = list(ocr.get("invoices") or [])
    itinerary = ocr.get("itinerary") or {}
    total = ocr.get("total", sum(float(i.get("amount", 0)) for i in invoices))
    confidences = [float(i.get("confidence", 1.0)) for i in invoices] or [1.0]
    materials = {
        **step.session.materials,
        "invoices": invoices,
        "total": total,
        "currency": ocr.get("currency", "CNY"),
        "confidence_min": ocr.get("confidence_min", min(confidences)),
        "itinerary": itinerary,
    }
    step.update(materials=materials)
    dates = f"{itinerary.get('from')}~{itinerary.get('to')}" if itinerary.get("from") else None
    step.fact(total=texts.amount(total) if invoices else None, trip_dates=dates)
    if invoices and itinerary:
        step.move("materials_complete")
        flow.start_validation(step)
        return
    lacking = "、".join(n for n, ok in (("发票", invoices), ("行程单", itinerary)) if not ok)
    step.move("materials_missing")
    flow.ask_materials(step, f"已识别{len(invoices)}张发票，还缺少{lacking}，请补充上传。")


def _expense_validation(step: Step, results: dict[str, dict[str, Any]], ans: ToolResults) -> None:
    step.disarm(VALIDATION_WAIT.purpose)
    trip, rules = results.get("trip_tool", {}), results.get("rule_engine_tool", {})
    trip_view = {k: trip.get(k) for k in ("verified", "trip_id", "city", "from", "to")}
    warnings = [str(w) for w in rules.get("warnings") or []]
    errors = [str(e) for e in rules.get("errors") or []]
    validation = {
        "trip": trip_view,
        "warnings": warnings,
        "errors": errors,
        "approver": rules.get("approver"),
        "valid": rules.get("valid") is True,
    }
    step.update(validation=validation)
    step.fact(approver=rules.get("approver"), trip_id=trip.get("trip_id"))
    invoices = step.session.materials.get("invoices") or []
    if not validation["valid"]:
        flow.end(step, "validation_failed", "failed", texts.failed_text(errors or warnings))
    elif ans.context is not None and ans.context.invalid:
        step.move("context_invalid")
        flow.ask_clarification(step, ans.context.invalid)
    elif (why := flow.tolerated(step, invoices)) is not None:
        step.update(validation={**validation, "tolerated": why})
        step.move("validated")
        flow.ask_confirm(step)
    else:
        step.move("low_confidence")
        candidate = step.session.candidates.get(flow.BLUR)
        if candidate is not None:
            flow.ask_preference(step, flow.BLUR, candidate)
        else:
            flow.ask_review(step)


def _submit_expense(step: Step, results: dict[str, dict[str, Any]], _: ToolResults) -> None:
    finance = results.get("finance_tool", {})
    if finance.get("status") != "submitted":
        why = str(finance.get("status") or "unknown")
        text = texts.error_text("tool:finance_tool", why, "请稍后重试")
        _fail(step, "tool:finance_tool", why, "报销单未能提交", text)
        return
    rid = str(finance.get("report_id") or step.session.facts.get("report_id", ""))
    approver = str(finance.get("approver") or step.session.validation.get("approver") or "")
    step.fact(report_id=rid, approver=approver)
    flow.end(step, "submitted", "submitted", texts.submitted_text(rid, approver))


_Task = Callable[[Step, dict[str, dict[str, Any]], ToolResults], None]
TASKS: Final[dict[str, _Task]] = {
    "check_budget": _check_budget,
    "ocr_precheck": _ocr_precheck,
    "expense_validation": _expense_validation,
    "submit_expense": _submit_expense,
}


def on_error(step: Step, report: ErrorReport) -> None:
    """Fail fast from the dispatcher: the state's exception exit (S3 timeout -> S3.1)."""
    pending = step.session.pending
    if pending is None:
        on_stray_error(step, report)
        return
    step.failed_call(report)
    step.update(pending=None)
    text = texts.error_text(report.component, report.code, report.advice)
    _fail(step, report.component, report.code, report.message, text)


def on_stray_error(step: Step, report: ErrorReport) -> None:
    """An error report for no pending cycle (e.g. memory refused a write): nothing to
    undo, but it is kept among the session's problems and logged, never dropped."""
    step.problem(report.component, report.code, report.message)


def _fail(step: Step, component: str, code: str, message: str, text: str) -> None:
    """Tell the user ``text`` (the failed component, its code and what to do; the raw
    message stays in the logs and the session's problems), then take the state's
    exception exit from the table."""
    state = step.session.state or START
    step.problem(component, code, message)
    step.update(pending=None, degraded=True)
    step.disarm_all()
    exit_state = MACHINE.exception_exit(state)
    timed_out = state == "S3" and code in ("timeout", str(protocol.TIMEOUT))
    if exit_state == state:  # terminal already (S5): recorded, nothing else to do
        return
    EXITS[exit_state](step, "validation_timeout" if timed_out else FAILURE, text)


def _exit_to_review(step: Step, trigger: str, text: str) -> None:
    """S3 -> S3.1: validation could not finish (over 30 s or a tool failed)."""
    if trigger == "validation_timeout":
        flow.to_review_timeout(step)
        return
    step.update(ask="review_failed")
    step.move(trigger)
    step.reply(text + texts.FAILED_S3, choices=texts.CHOICES_TIMEOUT)


def _exit_to_gave_up(step: Step, trigger: str, text: str) -> None:
    """S2 -> S4: the OCR pre-check failed; ask whether to go on uploading or give up."""
    step.update(ask="upload_failed", materials={}, validation={})
    step.move(trigger)
    step.arm(GAVE_UP_WAIT.purpose)
    step.reply(text + texts.FAILED_S2, choices=texts.CHOICES_GAVE_UP)


def _exit_to_end(step: Step, trigger: str, text: str) -> None:
    flow.end(step, trigger, "degraded", text + texts.SAVED)


EXITS: Final[dict[str, Callable[[Step, str, str], None]]] = {
    "S3.1": _exit_to_review,
    "S4": _exit_to_gave_up,
    "S5": _exit_to_end,
}
"""What taking an exception exit does, by the exit state (every exit the table names)."""

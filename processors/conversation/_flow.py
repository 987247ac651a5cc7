"""The actions the states share: ask a question, start a cycle, end the session (S5)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from hermesbus.contract.payloads import Attachment
from hermesbus.processors.conversation import _texts as texts
from hermesbus.processors.conversation._context import Step
from hermesbus.processors.conversation._machine import MATERIALS_WAIT, SUMMARY_WAIT, VALIDATION_WAIT
from hermesbus.processors.conversation._session import snapshot_of
from hermesbus.runtime import derive_id

__all__ = [
    "BLUR",
    "ask_clarification",
    "ask_confirm",
    "ask_materials",
    "ask_preference",
    "ask_review",
    "blur_floor",
    "checklist",
    "end",
    "lock_session",
    "low_confidence",
    "preference_value",
    "report_id",
    "review_passed",
    "start_validation",
    "to_review_timeout",
    "tolerated",
    "upload",
]

BLUR: Final = "ocr_blur_tolerance"
"""The preference / choice name of accepting blurred (low-confidence) invoices."""
_ACCEPT: Final = "accept"


def report_id(session_id: str) -> str:
    return f"EXP-{derive_id(session_id, 'report')[:8]}"


def low_confidence(invoices: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [i for i in invoices if float(i.get("confidence", 1.0)) < texts.LOW_CONFIDENCE]


def _steps(step: Step, *tasks: str) -> list[str]:
    return [s for task in tasks for s in step.session.steps.get(task, ())]


def checklist(step: Step) -> str:
    """What to upload: S2's preloaded default once its path is frequent, else the code's."""
    preloaded = step.session.values.get("context", {}).get("checklist")
    return preloaded if isinstance(preloaded, str) and preloaded else texts.CHECKLIST


def ask_materials(step: Step, text: str) -> None:
    """Ask for (more) materials and wait at most 5 minutes for them."""
    step.update(ask="materials")
    step.arm(MATERIALS_WAIT.purpose)
    step.reply(text)


def ask_review(step: Step) -> None:
    step.update(ask="review")
    step.reply(
        texts.review_text(step.session.materials),
        choices=texts.CHOICES_REVIEW,
        steps=_steps(step, "ocr_precheck", "expense_validation"),
    )


def ask_clarification(step: Step, names: Sequence[str]) -> None:
    """S3.1 for an expired/invalid symbol: re-check or re-upload the named items; the blur
    review's "keep these" does not answer this question."""
    step.update(ask="clarify", ask_pref={"names": "、".join(names)})
    step.reply(texts.CONTEXT_INVALID.format(names="、".join(names)), choices=texts.CHOICES_CLARIFY)


def lock_session(step: Step) -> None:
    """S4 locks the validated report: materials change only through 修改."""
    step.update(locked=True)


def ask_confirm(step: Step) -> None:
    """S4: the structured summary, three choices, and the 10-minute idle timer."""
    session = step.session
    lock_session(step)
    step.update(ask="confirm")
    step.arm(SUMMARY_WAIT.purpose)
    step.reply(
        texts.confirm_text(session.materials, session.validation),
        choices=texts.CHOICES_CONFIRM,
        steps=_steps(step, "ocr_precheck", "expense_validation"),
    )


def ask_preference(step: Step, name: str, value: str) -> None:
    """A repeated choice seen by memory: ask before anything is written; the
    blur floor asked is the lowest confidence accepted now, and it is stored with the value."""
    floor = _lowest(step) if name == BLUR else texts.BLUR_FLOOR
    step.update(ask="preference", ask_pref={"name": name, "value": value, "floor": f"{floor}"})
    step.reply(texts.preference_text(name, value, floor), choices=texts.CHOICES_YES_NO)


def _lowest(step: Step) -> float:
    low = low_confidence(step.session.materials.get("invoices") or [])
    return round(min((float(i.get("confidence", 0.0)) for i in low), default=texts.BLUR_FLOOR), 2)


def preference_value(name: str, value: str, floor: str) -> Any:
    """What ``pref:<name>`` stores: the blur tolerance keeps its floor with the value."""
    return {"value": value, "confidence_min": float(floor)} if name == BLUR else value


def blur_floor(preference: str | None) -> float | None:
    """The floor of a confirmed blur preference as memory returns it (a bare ``accept`` or
    the JSON object written with its floor); None when there is no accepting preference."""
    if preference is None:
        return None
    try:
        value = json.loads(preference)
    except ValueError:
        value = preference
    if isinstance(value, dict) and value.get("value") == _ACCEPT:
        floor = value.get("confidence_min")
        return float(floor) if isinstance(floor, int | float) else texts.BLUR_FLOOR
    return texts.BLUR_FLOOR if value == _ACCEPT else None


def upload(step: Step, attachments: Sequence[Attachment]) -> None:
    """S2 -> S2: OCR pre-check of the uploaded files."""
    files = [{"name": a.name, "uri": a.uri} for a in attachments]
    step.update(materials={"files": files}, validation={}, ask="")
    step.move("upload")
    step.cycle("ocr_precheck", [("ocr_tool", {"files": files})], preferences=[BLUR])


def start_validation(step: Step) -> None:
    """S3: trip and rule checks in parallel, at most 30 s (a durable timer)."""
    session = step.session
    materials, facts = session.materials, session.facts
    invoices = materials.get("invoices") or []
    itinerary = materials.get("itinerary") or {}
    trip_args = {
        "user_id": step.env.user_id,
        "city": itinerary.get("city") or facts.get("city"),
        "from": itinerary.get("from"),
        "to": itinerary.get("to"),
        "invoices": [i.get("id") for i in invoices],
    }
    rule_args = {"dept": facts.get("dept"), "invoices": invoices, "itinerary": itinerary}
    step.cycle(
        "expense_validation",
        [("trip_tool", trip_args), ("rule_engine_tool", rule_args)],
        invoice_count=len(invoices),
        symbols=["user_dept", "invoices"],
        preferences=[BLUR],
    )
    step.arm(VALIDATION_WAIT.purpose)


def to_review_timeout(
    step: Step, trigger: str = "validation_timeout", text: str = texts.VALIDATION_TIMEOUT
) -> None:
    """S3 -> S3.1: validation took longer than 30 s; late answers are stale from now on."""
    step.update(pending=None, ask="review_timeout", degraded=True)
    step.move(trigger)
    step.reply(text, choices=texts.CHOICES_TIMEOUT)


def review_passed(step: Step) -> None:
    """The user's explicit "keep these": record the tolerance, observe the choice, go to S4."""
    session = step.session
    invoices = session.materials.get("invoices") or []
    confidences = [float(i.get("confidence", 1.0)) for i in invoices] or [1.0]
    minimum = float(session.materials.get("confidence_min", min(confidences)))
    tolerance = {"user_tolerates_blur": True, "ocr_confidence_min": minimum}
    step.update(
        context={**session.context, **tolerance},
        validation={**session.validation, "tolerated": True},
        ask="",
        ask_pref={},
    )
    step.move("review_passed")
    step.remember(f"choice:{BLUR}", _ACCEPT)
    ask_confirm(step)


def tolerated(step: Step, invoices: Sequence[dict[str, Any]]) -> str | None:
    """Why low confidence needs no review: "" (none is low), "preference" (confirmed, with
    every low invoice at or above its floor), or "session" (accepted earlier in this session
    at or below this confidence); else None."""
    session = step.session
    low = low_confidence(invoices)
    if not low:
        return ""
    lowest = min(float(i.get("confidence", 0.0)) for i in low)
    preferred = blur_floor(session.preferences.get(BLUR))
    if preferred is not None and round(lowest, 2) >= preferred:
        return "preference"
    floor = session.context.get("ocr_confidence_min")
    if session.context.get("user_tolerates_blur") is not True or not isinstance(floor, float):
        return None
    return "session" if lowest >= floor else None


def end(step: Step, trigger: str, outcome: str, text: str, *, confirmed_by: str = "") -> None:
    """To S5: cancel timers, clear working data, save the unfinished report unless submitted."""
    left = snapshot_of(step.session).model_dump(mode="json", exclude_none=True)
    step.update(outcome=outcome, pending=None)
    step.move(trigger)
    if outcome != "submitted" and step.session.facts.get("goal"):
        step.unfinished(confirmed_by or step.session.turn_id or step.env.message_id, left)
    step.update(materials={}, validation={}, steps={}, ask="", ask_pref={}, candidates={})
    step.update(locked=False)
    step.reply(text)

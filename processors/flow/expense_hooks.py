"""The expense report's hooks: what its spec (``expense.yaml``) cannot say.

Each public function is a hook: given a copy of the session's values, it returns JSON and
does nothing else (no I/O, no clock: dates come from the turn's time). They read turns
(the expense report's rule parser: negation, holds, yes and no), write the texts the user
is told with their figures, judge the budget check's, the OCR pre-check's, the trip and
rule checks' answers, the low-confidence invoices against the user's recorded tolerance,
and choose the move a turn makes while a state asks one of its several questions. The
engine admits this module as it admits any allow-listed one; it is the built-in flow's, so
it is always allowed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any, Final

from hermesbus.processors.flow._entities import found, normalise_city, relative_period
from hermesbus.processors.flow._expense import EXPENSE_SPEC
from hermesbus.runtime import derive_id

__all__ = [
    "UNFINISHED_LABEL",
    "asking_confirm",
    "budget_checked",
    "budget_facts",
    "cancel_text",
    "checklist_text",
    "clarify_text",
    "confirm_text",
    "confirm_turn",
    "continuing_upload",
    "first_facts",
    "gave_up_turn",
    "has_candidate",
    "intent_of",
    "is_expense",
    "materials_text",
    "negation",
    "no_files",
    "not_submitted",
    "ocr_read",
    "ocr_verdict",
    "preference_answer",
    "preference_question",
    "read_turn",
    "report_id",
    "review_passed",
    "review_text",
    "review_turn",
    "s2_turn",
    "said_yes_to_preference",
    "submission",
    "submit_result",
    "submit_verdict",
    "summary",
    "unfinished",
    "upload",
    "uploaded",
    "user_said",
    "validated",
    "validation_args",
    "validation_verdict",
]

LOW_CONFIDENCE: Final = 0.8
"""Below this OCR confidence an invoice needs the user's review (S3.1)."""
BLUR_FLOOR: Final = 0.70
"""The confidence floor of a blur preference stored without one (what was always asked)."""
BLUR: Final = "ocr_blur_tolerance"
"""The preference / choice name of accepting blurred (low-confidence) invoices."""
ACCEPT: Final = "accept"
CHECKLIST: Final = "发票照片和行程单"
"""What S2 asks for, until its path is frequent and the spec's default is preloaded."""
UNFINISHED_LABEL: Final = "未完成报销流程"
UNFINISHED_TTL_S: Final = 30 * 24 * 3600
SAVED: Final = "当前进度已保存为未完成报销流程，可随时继续。"
HOLD: Final = "好的，暂不提交。" + SAVED
CANCELLED: Final = "好的，已取消本次报销。" + SAVED
_TOLERATED: Final = {"preference": "的偏好", "session": "之前的选择"}
_OUTCOMES: Final = {
    "submitted": ("submitted", "已提交报销单{report_id}"),
    "cancel": ("cancelled", "用户暂不提交，已保存进度"),
    "gave_up": ("gave_up", "用户放弃，已保存进度"),
    "idle_expired": ("expired", "会话超时过期，已保存进度"),
    "unclear_intent": ("unclear", "意图不明，会话结束"),
    "failed": ("degraded", "工具故障，流程降级结束"),
    "validation_failed": ("failed", "校验未通过，流程结束"),
}
"""How the session ended, by the trigger that ended it: the outcome, the summary line."""

# -- reading turns -------------------------------------------------------------------------

_PHRASES: Final = tuple((i.name, tuple(i.phrases)) for i in EXPENSE_SPEC.intents if i.phrases)
"""(intent, phrases) from the spec, checked in its order: the first phrase found wins."""
_HOLD: Final = ("先不", "暂不", "等等", "等一下", "wait", "hold on", "not yet", "don't submit")
_SUBMIT_WORDS: Final = r"提交|submit"
_CONFIRM_WORDS: Final = r"确认|确定|confirm|go ahead"
_WORD: Final = rf"(?P<word>{_SUBMIT_WORDS}|{_CONFIRM_WORDS})"
# a negation right before the word, with a few fillers: 不要提交, 先别提交, 还没确定, 不太确定
_NEG_BEFORE_ZH: Final = re.compile(
    rf"(?:不|别|没|未|勿|莫)(?:要|用|能|想|必|会|有|太|去|急着|着急)?(?:先|再|马上|直接)?{_WORD}"
)
_NEG_BEFORE_EN: Final = re.compile(
    rf"(?<![a-z])(?:not|never|no|don'?t|do not|won'?t|can'?t|cannot)(?![a-z])"
    rf"(?:\W+[a-z]+){{0,2}}?\W+{_WORD}"
)
# a negation right after it: 提交不了, 确认不行, "submit? no", "confirm, not yet"
_NEG_AFTER: Final = re.compile(
    rf"{_WORD}(?:不了|不行|不对|不|[a-z]*\W+(?:[a-z]+\W+)?(?:not|no|never)(?![a-z]))"
)
_QUESTION: Final = re.compile(r"(?:[?？]|吗|么|呢)\s*$")
_EXPENSE_VERB: Final = re.compile(r"报.{0,12}费")
_YES: Final = frozenset({"是", "是的", "好", "好的", "可以", "对", "行", "嗯", "yes", "y", "ok"})
_YES_EN: Final = frozenset({"okay", "sure", "yep", "yeah", "yes please"})
_NO: Final = frozenset({"否", "不", "不是", "不用", "不要", "no", "n", "nope", "no thanks"})
_STRIP: Final = re.compile(r"[\s,.!?;:，。！？；：、~]+")


def _lower(text: str) -> str:
    return text.lower().replace("\u2019", "'")  # a typographic apostrophe


def negation(text: str) -> str | None:
    """A negated confirm/submit word: ``"submit"`` when a submit word is negated before it
    (不要提交, "don't submit": a hold), ``"confirm"`` for any other negation around a
    confirm/submit word (不确认, 还没确定, "submit? no"); None when nothing is negated."""
    lowered = _lower(text)
    before = [m["word"] for p in (_NEG_BEFORE_ZH, _NEG_BEFORE_EN) for m in p.finditer(lowered)]
    if any(re.fullmatch(_SUBMIT_WORDS, word) for word in before):
        return "submit"
    return "confirm" if before or _NEG_AFTER.search(lowered) else None


def _yes_no(lowered: str) -> str | None:
    bare = _STRIP.sub(" ", lowered).strip()
    if bare in _YES or bare in _YES_EN:
        return "yes"
    return "no" if bare in _NO else None


def intent_of(text: str, attachments: int) -> str | None:
    """The expense intent of a turn (None: unclear)."""
    lowered = _lower(text)
    negated = negation(text)
    if (answer := _yes_no(lowered)) is not None:
        return answer
    if negated == "submit":
        return "cancel"
    name = next((n for n, ps in _PHRASES if any(found(lowered, p) for p in ps)), None)
    if name == "confirm" and (negated or _QUESTION.search(lowered)):
        return None  # a negated or asked confirmation is never a confirmation
    if name is not None:
        return name
    if _EXPENSE_VERB.search(text):
        return "expense_submit"
    return "upload" if attachments else None


def _period(text: str, local: datetime) -> str | None:
    """``YYYY-MM`` for one whole calendar month, else ``start~end``."""
    period = relative_period(text, local)
    if period is None:
        return None
    start, end = period
    following = date(start.year + start.month // 12, start.month % 12 + 1, 1)
    if start.day == 1 and (following - end).days == 1:
        return start.strftime("%Y-%m")
    return f"{start}~{end}"


def read_turn(values: dict[str, Any]) -> dict[str, Any]:
    """The flow's parser: the intent (None: unclear) and its entities (an expense's city
    and period, a cancel's hold)."""
    turn = values["turn"]
    text, attachments = str(turn.get("text", "")), int(turn.get("attachments", 0))
    intent = intent_of(text, attachments)
    entities: dict[str, str] = {}
    if intent == "expense_submit":
        city = normalise_city(text)
        period = _period(text, datetime.fromisoformat(str(turn["local"])))
        entities = {k: v for k, v in (("city", city), ("period", period)) if v}
    elif intent == "cancel":
        lowered = _lower(text)
        if negation(text) == "submit" or any(found(lowered, p) for p in _HOLD):
            entities = {"hold": "yes"}
    return {"intent": intent, "entities": entities}


def first_facts(values: dict[str, Any]) -> dict[str, Any]:
    """What an expense request pins as it begins (nothing, for anything else)."""
    if values["intent"]["name"] != "expense_submit":
        return {}
    entities = values["entities"]
    return {
        "user": values["user"]["id"],
        "goal": "差旅报销",
        "city": entities.get("city"),
        "period": entities.get("period"),
    }


def is_expense(values: dict[str, Any]) -> str | None:
    """S1: anything but an expense request ends unclear."""
    return None if values["intent"]["name"] == "expense_submit" else "unclear_intent"


# -- figures -------------------------------------------------------------------------------


def _amount(value: Any) -> str:
    """``125000`` -> ``125,000``; fractions keep two decimals."""
    number = float(value)
    return f"{int(number):,}" if number.is_integer() else f"{number:,.2f}"


def _dates(start: str, end: str) -> str:
    """``2024-05-12``..``2024-05-15`` -> ``5月12-15日``; across months ``5月30日-6月2日``."""
    first, last = date.fromisoformat(start), date.fromisoformat(end)
    if (first.year, first.month) == (last.year, last.month):
        return f"{first.month}月{first.day}-{last.day}日"
    return f"{first.month}月{first.day}日-{last.month}月{last.day}日"


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _materials(values: Mapping[str, Any]) -> dict[str, Any]:
    materials = values.get("context", {}).get("materials")
    return materials if isinstance(materials, dict) else {}


def _invoices(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list(_materials(values).get("invoices") or [])


def _low(invoices: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [i for i in invoices if float(i.get("confidence", 1.0)) < LOW_CONFIDENCE]


# -- S1: the budget check ------------------------------------------------------------------


def budget_facts(values: dict[str, Any]) -> dict[str, Any]:
    """The department and its budget, from the org and finance tools."""
    results = values.get("results", {})
    org, finance = results.get("org_tool") or {}, results.get("finance_tool") or {}
    return {
        "user_name": org.get("name"),
        "dept": org.get("dept") or finance.get("dept"),
        "manager": org.get("manager"),
        "budget_remaining": finance.get("budget_remaining"),
        "currency": finance.get("currency"),
    }


def budget_checked(values: dict[str, Any]) -> str:
    return "expense_intent"


def materials_text(values: dict[str, Any]) -> str:
    """S2's opening: the department and budget, then what to upload (the preloaded
    checklist once the path is frequent)."""
    facts = values.get("facts", {})
    period = str(facts.get("period", ""))
    label = f"{period[:4]}年{int(period[5:7])}月" if len(period) == 7 else ""  # noqa: PLR2004
    what = "".join(v for v in (label, facts.get("city")) if v)
    opening = f"好的，已为您发起{what}差旅报销。" if what else "好的，已为您发起差旅报销。"
    budget = facts.get("budget_remaining")
    currency = facts.get("currency", "CNY")
    dept = f"您所在部门：{facts['dept']}" if facts.get("dept") else ""
    money = f"，部门预算余额 {_amount(budget)} {currency}" if budget else ""
    return f"{opening}{dept}{money}。请提供{_checklist(values)}。"


def _checklist(values: Mapping[str, Any]) -> str:
    preloaded = values.get("context", {}).get("checklist")
    return preloaded if isinstance(preloaded, str) and preloaded else CHECKLIST


def checklist_text(values: dict[str, Any]) -> str:
    return f"请提供{_checklist(values)}。"


# -- S2: materials -------------------------------------------------------------------------


def uploaded(values: dict[str, Any]) -> bool:
    """S2 was entered on an upload: its OCR pre-check runs."""
    return bool(values["session"]["trigger"] == "upload")


def continuing_upload(values: dict[str, Any]) -> str | None:
    """S2 entered on "继续上传" with the files: they are uploaded at once."""
    moved = values["session"]["trigger"] == "continue_upload"
    return "upload" if moved and values.get("attachments") else None


def upload(values: dict[str, Any]) -> dict[str, Any]:
    """The files of the turn: the materials start over with them."""
    files = [{"name": a["name"], "uri": a["uri"]} for a in values.get("attachments") or []]
    turn = values["turn"]["id"]
    return {"materials": {"files": files}, "validation": {}, "ask": "", "uploaded_in": turn}


def s2_turn(values: dict[str, Any]) -> str:
    """A turn in S2: cancel, files (an upload), an upload said without files, else ask."""
    intent = values["intent"]["name"]
    if intent == "cancel":
        return "cancel"
    if values.get("attachments"):
        return "upload"
    if intent in ("upload", "reupload"):
        return "no_attachment"
    return "materials_again"


def ocr_read(values: dict[str, Any]) -> dict[str, Any]:
    """The OCR pre-check's answer: the materials, the facts it gives, and what is lacking."""
    ocr = values.get("results", {}).get("ocr_tool") or {}
    invoices = list(ocr.get("invoices") or [])
    itinerary = ocr.get("itinerary") or {}
    total = ocr.get("total", sum(float(i.get("amount", 0)) for i in invoices))
    confidences = [float(i.get("confidence", 1.0)) for i in invoices] or [1.0]
    materials = {
        **_materials(values),
        "invoices": invoices,
        "total": total,
        "currency": ocr.get("currency", "CNY"),
        "confidence_min": ocr.get("confidence_min", min(confidences)),
        "itinerary": itinerary,
    }
    dates = f"{itinerary.get('from')}~{itinerary.get('to')}" if itinerary.get("from") else None
    lacking = "、".join(n for n, ok in (("发票", invoices), ("行程单", itinerary)) if not ok)
    return {
        "materials": materials,
        "facts": {"total": _amount(total) if invoices else None, "trip_dates": dates},
        "complete": bool(invoices and itinerary),
        "text": f"已识别{len(invoices)}张发票，还缺少{lacking}，请补充上传。",
    }


def ocr_verdict(values: dict[str, Any]) -> str:
    ocr = values["hooks"]["ocr"]
    return "materials_complete" if ocr["complete"] else "materials_missing"


# -- S3: validation ------------------------------------------------------------------------


def validation_args(values: dict[str, Any]) -> dict[str, Any]:
    """The trip check's and the rule check's arguments."""
    materials, facts = _materials(values), values.get("facts", {})
    invoices = list(materials.get("invoices") or [])
    itinerary = materials.get("itinerary") or {}
    trip = {
        "user_id": values["user"]["id"],
        "city": itinerary.get("city") or facts.get("city"),
        "from": itinerary.get("from"),
        "to": itinerary.get("to"),
        "invoices": [i.get("id") for i in invoices],
    }
    rules = {"dept": facts.get("dept"), "invoices": invoices, "itinerary": itinerary}
    return {"trip": trip, "rules": rules, "invoice_count": len(invoices)}


def _blur_floor(preference: str | None) -> float | None:
    """The floor of a confirmed blur preference as memory returns it (a bare ``accept`` or
    the JSON object written with its floor); None when there is no accepting preference."""
    if preference is None:
        return None
    try:
        value = json.loads(preference)
    except ValueError:
        value = preference
    if isinstance(value, dict) and value.get("value") == ACCEPT:
        floor = value.get("confidence_min")
        return float(floor) if isinstance(floor, int | float) else BLUR_FLOOR
    return BLUR_FLOOR if value == ACCEPT else None


def _tolerated(values: Mapping[str, Any], invoices: Sequence[Mapping[str, Any]]) -> str | None:
    """Why low confidence needs no review: "" (none is low), "preference" (confirmed, with
    every low invoice at or above its floor), or "session" (accepted earlier in this session
    at or below this confidence); else None."""
    low = _low(invoices)
    if not low:
        return ""
    lowest = min(float(i.get("confidence", 0.0)) for i in low)
    preferred = _blur_floor(values.get("memory", {}).get("preferences", {}).get(BLUR))
    if preferred is not None and round(lowest, 2) >= preferred:
        return "preference"
    tolerance = values.get("context", {}).get("tolerance") or {}
    floor = tolerance.get("ocr_confidence_min")
    if tolerance.get("user_tolerates_blur") is not True or not isinstance(floor, float):
        return None
    return "session" if lowest >= floor else None


def validated(values: dict[str, Any]) -> dict[str, Any]:
    """The trip and rule checks' answers: the validation, the facts, and the verdict."""
    results = values.get("results", {})
    trip, rules = results.get("trip_tool") or {}, results.get("rule_engine_tool") or {}
    errors = [str(e) for e in rules.get("errors") or []]
    warnings = [str(w) for w in rules.get("warnings") or []]
    validation: dict[str, Any] = {
        "trip": {k: trip.get(k) for k in ("verified", "trip_id", "city", "from", "to")},
        "warnings": warnings,
        "errors": errors,
        "approver": rules.get("approver"),
        "valid": rules.get("valid") is True,
    }
    facts = {"approver": rules.get("approver"), "trip_id": trip.get("trip_id")}
    invalid = list(values.get("memory", {}).get("invalid") or [])
    why = _tolerated(values, _invoices(values))
    if not validation["valid"]:
        verdict = "validation_failed"
        why_not = "；".join(errors or warnings) or "未通过财务规则校验"
        text = f"报销单校验未通过：{why_not}。" + SAVED
    elif invalid:
        verdict, text = "context_invalid", _clarify("、".join(invalid))
    elif why is not None:
        validation["tolerated"] = why
        verdict, text = "validated", _confirm(_materials(values), validation)
    else:
        verdict, text = "low_confidence", ""
    return {
        "validation": validation,
        "facts": facts,
        "verdict": verdict,
        "text": text,
        "names": "、".join(invalid),
    }


def validation_verdict(values: dict[str, Any]) -> str:
    return str(values["hooks"]["validated"]["verdict"])


def has_candidate(values: dict[str, Any]) -> bool:
    """Memory proposes the blur tolerance as a preference: ask before anything is kept."""
    return BLUR in values.get("memory", {}).get("candidates", {})


def _lowest(values: Mapping[str, Any]) -> float:
    low = _low(_invoices(values))
    return round(min((float(i.get("confidence", 0.0)) for i in low), default=BLUR_FLOOR), 2)


def preference_question(values: dict[str, Any]) -> dict[str, Any]:
    """The question before the blur preference is kept: the floor asked is the lowest
    confidence accepted now, and it is stored with the value."""
    value = values["memory"]["candidates"][BLUR]
    floor = _lowest(values)
    text = f"检测到您多次选择接受金额模糊的发票，是否以后默认接受（置信度不低于{floor:.2f}）？"
    return {"ask_pref": {"name": BLUR, "value": value, "floor": f"{floor}"}, "text": text}


def _clarify(names: str) -> str:
    return (
        f"部分上下文已失效或无法核实（{names}），需要您重新确认：回复“重新校验”重新核对这些"
        "信息，或“重新上传”相关材料。"
    )


def clarify_text(values: dict[str, Any]) -> str:
    return _clarify(str(values.get("context", {}).get("ask_pref", {}).get("names", "")))


def _invoice(invoice: Mapping[str, Any]) -> str:
    return (
        f"{invoice.get('id')} {invoice.get('category', '')} {_amount(invoice.get('amount', 0))}"
        f"，置信度 {float(invoice.get('confidence', 0)):.2f}"
    )


def review_text(values: dict[str, Any]) -> str:
    """S3.1: how many invoices, their total, and which are blurred."""
    materials = _materials(values)
    invoices = list(materials.get("invoices") or [])
    low = _low(invoices)
    total = f"{_amount(materials.get('total', 0))} {materials.get('currency', 'CNY')}"
    blurred = "；".join(_invoice(i) for i in low)
    return (
        f"检测到{len(invoices)}张发票（合计 {total}），其中{len(low)}张金额模糊（{blurred}），"
        "是否重新上传？"
    )


def _confirm(materials: Mapping[str, Any], validation: Mapping[str, Any]) -> str:
    invoices = materials.get("invoices") or []
    total = f"{_amount(materials.get('total', 0))} {materials.get('currency', 'CNY')}"
    parts = [f"报销单已校验通过：含{len(invoices)}张发票，合计 {total}"]
    trip = validation.get("trip") or {}
    if trip.get("from") and trip.get("to"):
        checked = "已核实" if trip.get("verified") else "未核实"
        parts.append(f"行程单显示往返日期为{_dates(trip['from'], trip['to'])}（{checked}）")
    warnings = validation.get("warnings") or []
    if warnings:
        parts.append("提醒：" + "；".join(warnings))
    text = "；".join(parts) + "。"
    tolerated = validation.get("tolerated")
    if tolerated in _TOLERATED:
        text += f"已按您{_TOLERATED[tolerated]}接受金额模糊的发票。"
    if validation.get("approver"):
        text += f"审批人：{validation['approver']}。"
    return text + "是否提交？"


def confirm_text(values: dict[str, Any]) -> str:
    """S4: the structured summary the user confirms."""
    context = values.get("context", {})
    return _confirm(_materials(values), context.get("validation") or {})


# -- S3.1: the review ----------------------------------------------------------------------

_RETRIES: Final = {
    "review_timeout": ("retry", "keep_materials", "yes"),
    "review_failed": ("retry", "keep_materials", "yes"),
    "clarify": ("retry",),
}
"""The answers that re-run the validation, by the S3.1 question asked."""
_AGAIN: Final = {
    "review_timeout": "again_timeout",
    "review_failed": "again_failed",
    "clarify": "again_clarify",
}


def review_turn(values: dict[str, Any]) -> str:
    """S3.1: only an explicit answer to the question asked moves on; else it is asked
    again, the same question for the same reason."""
    intent, ask = values["intent"]["name"], values.get("context", {}).get("ask", "")
    if intent in ("cancel", "reupload"):
        return str(intent)
    if ask == "preference" and intent in ("yes", "no"):
        # yes keeps the blur tolerance, and the review passes with it
        return "review_passed" if intent == "yes" else "preference_no"
    if ask in _RETRIES and intent in _RETRIES[ask]:
        return "retry"
    if ask in ("review", "preference") and intent == "keep_materials":
        return "review_passed"  # the low-confidence review only
    return _AGAIN.get(ask, "again_review")


def said_yes_to_preference(values: dict[str, Any]) -> bool:
    """ "是" to keeping the blur tolerance, as a whole short answer (the engine keeps a
    preference on nothing else: a model's "yes" passes the review and keeps nothing; "就这
    三张" while that question is open neither)."""
    asked = values.get("context", {}).get("ask") == "preference"
    whole = values["turn"].get("whole") is True
    return bool(asked and whole and values["intent"]["name"] == "yes")


def user_said(values: dict[str, Any]) -> bool:
    """This input is the user's turn (not a wait that ran out)."""
    return bool(values["turn"].get("said"))


def no_files(values: dict[str, Any]) -> bool:
    return not values.get("attachments")


def preference_answer(values: dict[str, Any]) -> Any:
    """What ``pref:ocr_blur_tolerance`` keeps on the user's yes: the value with its floor."""
    asked = values["context"]["ask_pref"]
    return {"value": asked["value"], "confidence_min": float(asked.get("floor", "0.7"))}


def review_passed(values: dict[str, Any]) -> dict[str, Any]:
    """The user's explicit "keep these": the tolerance they showed, and the validation."""
    context = values.get("context", {})
    materials = _materials(values)
    confidences = [float(i.get("confidence", 1.0)) for i in _invoices(values)] or [1.0]
    minimum = float(materials.get("confidence_min", min(confidences)))
    tolerance = {"user_tolerates_blur": True, "ocr_confidence_min": minimum}
    validation = {**(context.get("validation") or {}), "tolerated": True}
    return {"tolerance": tolerance, "validation": validation}


# -- S4: confirmation ----------------------------------------------------------------------

_GAVE_UP_ASKS: Final = ("gave_up", "upload_failed")


def asking_confirm(values: dict[str, Any]) -> bool:
    """S4 asks for the confirmation (not whether the user goes on uploading)."""
    return values.get("context", {}).get("ask") not in _GAVE_UP_ASKS


def confirm_turn(values: dict[str, Any]) -> str:
    """S4, anything but a confirmation: the "continue or give up?" answer, 修改, a cancel,
    files for a locked report, else the summary asked again."""
    intent, context = values["intent"]["name"], values.get("context", {})
    if context.get("ask") in _GAVE_UP_ASKS:
        return gave_up_turn(values)
    if intent == "modify":
        return "modify"
    if intent in ("cancel", "no"):
        return "cancel"
    if context.get("locked") and values.get("attachments"):
        return "locked"
    return "confirm_again"


def gave_up_turn(values: dict[str, Any]) -> str:
    """After the 5-minute wait or a failed pre-check: 继续上传 goes back to S2, 放弃 ends."""
    intent = values["intent"]["name"]
    if intent in ("cancel", "no"):
        return "gave_up"
    if values.get("attachments") or intent in ("upload", "yes", "expense_submit"):
        return "continue_upload"
    return "gave_up_again" if values["context"]["ask"] == "gave_up" else "upload_failed_again"


def report_id(session_id: str) -> str:
    """The expense report's id, from its session's."""
    return f"EXP-{derive_id(session_id, 'report')[:8]}"


def submission(values: dict[str, Any]) -> dict[str, Any]:
    """The report's id and the finance tool's submission arguments."""
    report = report_id(str(values["session"]["id"]))
    materials, context = _materials(values), values.get("context", {})
    arguments = {
        "action": "submit",
        "user_id": values["user"]["id"],
        "report_id": report,
        "amount": materials.get("total"),
        "approver": (context.get("validation") or {}).get("approver"),
        "invoices": [i.get("id") for i in materials.get("invoices") or []],
    }
    return {"report_id": report, "arguments": arguments}


def submit_result(values: dict[str, Any]) -> dict[str, Any]:
    """The finance tool's answer: submitted (the id and approver), or why not."""
    finance = values.get("results", {}).get("finance_tool") or {}
    facts, context = values.get("facts", {}), values.get("context", {})
    if finance.get("status") != "submitted":
        why = str(finance.get("status") or "unknown")
        return {
            "submitted": False,
            "code": why,
            "text": f"tool:finance_tool 暂时无法完成请求（{why}）。建议：请稍后重试。",
        }
    report = str(finance.get("report_id") or facts.get("report_id", ""))
    approver = str(
        finance.get("approver") or (context.get("validation") or {}).get("approver") or ""
    )
    return {
        "submitted": True,
        "facts": {"report_id": report, "approver": approver},
        "text": f"已提交报销单 {report}，审批人：{approver}。",
    }


def not_submitted(values: dict[str, Any]) -> bool:
    return not values["hooks"]["submit"]["submitted"]


def submit_verdict(values: dict[str, Any]) -> str:
    return "submitted"


# -- S5 and the snapshot -------------------------------------------------------------------


def cancel_text(values: dict[str, Any]) -> str:
    return HOLD if values.get("entities", {}).get("hold") else CANCELLED


def unfinished(values: dict[str, Any]) -> dict[str, Any] | None:
    """S5's record of an unfinished report (mid-term memory): where the session was, its
    facts and why it ended; a submitted report, or a session with no goal, keeps none."""
    outcome = _OUTCOMES.get(values["session"]["trigger"], ("", ""))[0]
    facts = values.get("facts", {})
    if outcome == "submitted" or not facts.get("goal"):
        return None
    value = {
        "label": UNFINISHED_LABEL,
        "snapshot": values["session"]["left"],
        "facts": facts,
        "reason": outcome,
    }
    key = f"unfinished:{values['session']['id']}"
    return {"key": key, "value": value, "importance": 0.8, "ttl_s": UNFINISHED_TTL_S}


def summary(values: dict[str, Any]) -> str:
    """The snapshot's <= 50-character progress line, by state."""
    state = values["session"]["state"]
    return _SUMMARIES.get(state, _s5)(values, values["session"]["trigger"])


def _s1(values: Mapping[str, Any], _: str) -> str:
    facts = values.get("facts", {})
    where = "，".join(v for v in (facts.get("city"), facts.get("period")) if v)
    return f"识别意图：差旅报销（{where}）" if where else "识别意图中"


def _s3(values: Mapping[str, Any], _: str) -> str:
    total = values.get("facts", {}).get("total", "?")
    return f"{len(_invoices(values))}张发票合计{total}，校验中"


def _s31(values: Mapping[str, Any], trigger: str) -> str:
    why = {"validation_timeout": "校验超时", "failed": "校验失败"}.get(trigger)
    if why is not None:
        return f"{why}，待人工复核"
    return f"{len(_low(_invoices(values)))}张发票金额模糊，待人工复核"


def _s4(values: Mapping[str, Any], trigger: str) -> str:
    asked = {
        "wait_expired": "等待材料超时，询问是否放弃",
        "failed": "材料预检失败，询问是否继续上传",
    }
    if trigger in asked:
        return asked[trigger]
    return "提交中" if values["session"]["pending"] else "校验通过，待用户确认提交"


def _s5(values: Mapping[str, Any], trigger: str) -> str:
    line = _OUTCOMES.get(trigger, ("", "会话结束"))[1]
    return line.format(report_id=values.get("facts", {}).get("report_id", ""))


def _s2(values: Mapping[str, Any], trigger: str) -> str:
    materials = _materials(values)
    files = materials.get("files") or []
    uploaded_in = values.get("context", {}).get("uploaded_in")
    if trigger == "upload" and uploaded_in != values["turn"]["id"]:
        files, invoices = values.get("attachments") or [], list[Any]()  # the upload's move
    else:
        invoices = materials.get("invoices") or []
    if files and not invoices:
        return f"已上传{len(files)}张发票，待OCR识别"
    return "待上传发票照片和行程单"


_SUMMARIES: Final = {"S1": _s1, "S2": _s2, "S3": _s3, "S3.1": _s31, "S4": _s4}

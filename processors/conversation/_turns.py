"""User turns, by state: what each answer of the user means where the conversation stands."""

from __future__ import annotations

import logging
from typing import Final

from hermesbus.contract.payloads import UserTurn
from hermesbus.errors import IntentError
from hermesbus.processors.conversation import _flow as flow
from hermesbus.processors.conversation import _texts as texts
from hermesbus.processors.conversation._confirm import is_confirmation
from hermesbus.processors.conversation._context import Step
from hermesbus.processors.conversation._intent import (
    Intent,
    IntentName,
    IntentParser,
    RuleIntentParser,
    negation,
)
from hermesbus.processors.conversation._machine import (
    GAVE_UP_WAIT,
    START,
    SUMMARY_WAIT,
    TERMINAL,
)
from hermesbus.processors.conversation._session import Session, canonical_json
from hermesbus.processors.conversation._settings import INTENT_PORT

__all__ = ["on_user_turn", "parse_intent", "start", "submit"]

log = logging.getLogger(__name__)

RULES: Final = RuleIntentParser()
_I = IntentName


async def parse_intent(step: Step, turn: UserTurn) -> Intent:
    """The configured parser's intent, or the rules' (in the port's zone) when it is absent
    or fails."""
    context = {"state": step.session.state or START, "attachments": len(turn.attachments)}
    parser: IntentParser | None = step.inp.ports.get(INTENT_PORT)
    rules = RULES
    if parser is not None:
        try:
            return await parser.parse(turn.text, now=step.env.timestamp, context=context)
        except IntentError as exc:
            log.warning("intent port failed, using the rules: %s", exc)
        rules = RuleIntentParser(parser.zone)
    return rules.parse_now(turn.text, now=step.env.timestamp, attachments=len(turn.attachments))


async def on_user_turn(step: Step, turn: UserTurn) -> None:
    if step.session.state == TERMINAL:  # a finished session starts over
        kept = step.session
        step.session = Session(preferences=kept.preferences, declined=kept.declined)
    step.record_turn(turn)
    intent = await parse_intent(step, turn)
    state = step.session.state
    if step.session.pending is not None:
        step.reply(texts.PENDING)
    elif state is None or state == "S1":
        start(step, intent)
    elif state == "S2":
        _in_s2(step, intent, turn)
    elif state == "S3.1":
        _in_review(step, intent)
    elif state == "S4":
        _in_s4(step, intent, turn)
    else:
        step.reply(texts.PENDING)


def start(step: Step, intent: Intent) -> None:
    """S1: an expense intent starts the budget check; anything else ends unclear (S5)."""
    if step.session.state is None:
        if intent.name is _I.EXPENSE_SUBMIT:
            period = intent.month or (
                f"{intent.period_start}~{intent.period_end}" if intent.period_start else None
            )
            step.fact(user=step.env.user_id, goal="差旅报销", city=intent.city, period=period)
        step.move("user_turn")
    if intent.name is not _I.EXPENSE_SUBMIT:
        flow.end(step, "unclear_intent", "unclear", texts.UNCLEAR)
        return
    user = step.env.user_id
    budget = {"action": "budget", "user_id": user}
    step.cycle("check_budget", [("org_tool", {"user_id": user}), ("finance_tool", budget)])


def _end_cancel(step: Step, intent: Intent) -> None:
    text = texts.HOLD if intent.hold else texts.CANCELLED
    flow.end(step, "cancel", "cancelled", text)


def _in_s2(step: Step, intent: Intent, turn: UserTurn) -> None:
    if intent.name is _I.CANCEL:
        _end_cancel(step, intent)
    elif turn.attachments:
        flow.upload(step, turn.attachments)
    elif intent.name in (_I.UPLOAD, _I.REUPLOAD):
        flow.ask_materials(step, texts.NO_ATTACHMENT)
    else:
        flow.ask_materials(step, texts.ask_materials(flow.checklist(step)))


def _in_review(step: Step, intent: Intent) -> None:
    """S3.1: only an explicit answer to the question asked moves on; else it is asked again."""
    ask = step.session.ask
    if intent.name is _I.CANCEL:
        _end_cancel(step, intent)
    elif intent.name is _I.REUPLOAD:
        step.update(materials={}, validation={}, ask_pref={})
        step.move("reupload")
        flow.ask_materials(step, texts.REUPLOAD)
    elif ask == "preference" and intent.name in (_I.YES, _I.NO):
        _answer_preference(step, intent)
    elif ask in _RETRIES and intent.name in _RETRIES[ask]:
        step.update(ask="", ask_pref={})
        step.move("retry")
        flow.start_validation(step)
    elif ask in ("review", "preference") and intent.name is _I.KEEP_MATERIALS:
        flow.review_passed(step)  # the low-confidence review only
    else:
        _ask_again(step)


_RETRIES: Final = {
    "review_timeout": (_I.RETRY, _I.KEEP_MATERIALS, _I.YES),
    "review_failed": (_I.RETRY, _I.KEEP_MATERIALS, _I.YES),
    "clarify": (_I.RETRY,),
}
"""The answers that re-run the validation, by the S3.1 question asked."""


def _ask_again(step: Step) -> None:
    ask = step.session.ask
    if ask in _REVIEW_AGAIN:
        step.reply(_REVIEW_AGAIN[ask], choices=texts.CHOICES_TIMEOUT)
    elif ask == "clarify":
        flow.ask_clarification(step, step.session.ask_pref.get("names", "").split("、"))
    else:
        flow.ask_review(step)


_REVIEW_AGAIN: Final = {
    "review_timeout": texts.VALIDATION_TIMEOUT,
    "review_failed": texts.VALIDATION_FAILED,
}
"""The S3.1 question asked again, by why validation stopped: it took over 30 s, or a tool
failed (then nothing timed out, and the question must not say so)."""


def _answer_preference(step: Step, intent: Intent) -> None:
    """ "是" writes the preference, confirmed by this message; "否" writes nothing."""
    session = step.session
    name, value = session.ask_pref["name"], session.ask_pref["value"]
    candidates = {k: v for k, v in session.candidates.items() if k != name}
    if intent.name is _I.NO:
        step.update(declined=(*session.declined, name), candidates=candidates, ask_pref={})
        flow.ask_review(step)
        return
    stored = flow.preference_value(name, value, session.ask_pref.get("floor", "0.7"))
    step.remember(f"pref:{name}", stored, confirmed_by=session.turn_id)
    shown = stored if isinstance(stored, str) else canonical_json(stored)  # as memory shows it
    step.update(preferences={**session.preferences, name: shown}, candidates=candidates)
    if name == flow.BLUR:
        flow.review_passed(step)
    else:
        flow.ask_review(step)


def _in_s4(step: Step, intent: Intent, turn: UserTurn) -> None:
    """S4: only an explicit confirmation submits (the button or a short affirmative answer,
    never a keyword inside a longer instruction, never negated); anything unclear re-asks."""
    if step.session.ask in _GAVE_UP_AGAIN:
        _answer_gave_up(step, intent, turn)
    elif _confirms(intent, turn):
        submit(step)
    elif intent.name is _I.MODIFY:
        step.update(materials={}, validation={}, locked=False)
        step.move("modify")
        flow.ask_materials(step, texts.MODIFY)
    elif intent.name in (_I.CANCEL, _I.NO):
        _end_cancel(step, intent)
    elif step.session.locked and turn.attachments:
        step.arm(SUMMARY_WAIT.purpose)
        step.reply(texts.LOCKED, choices=texts.CHOICES_CONFIRM)
    else:
        flow.ask_confirm(step)


_GAVE_UP_AGAIN: Final = {"gave_up": texts.GAVE_UP, "upload_failed": texts.UPLOAD_FAILED}
"""The S4 "continue or give up?" question asked again, by why it was asked: the 5-minute
wait expired, or the OCR pre-check failed (then no wait expired)."""


def _confirms(intent: Intent, turn: UserTurn) -> bool:
    """The parser's confirmation, and the user's own text is one as a whole (a port that
    reads an injected instruction as "confirm" cannot submit on its own)."""
    named = intent.name in (_I.CONFIRM, _I.YES)
    return named and not turn.attachments and is_confirmation(turn.text) and not negation(turn.text)


def _answer_gave_up(step: Step, intent: Intent, turn: UserTurn) -> None:
    """After the 5-minute wait or a failed pre-check: 继续上传 goes back to S2, 放弃 ends."""
    if intent.name is _I.CANCEL or intent.name is _I.NO:
        flow.end(step, "gave_up", "gave_up", texts.USER_GAVE_UP)
    elif turn.attachments or intent.name in (_I.UPLOAD, _I.YES, _I.EXPENSE_SUBMIT):
        step.update(ask="")
        step.move("continue_upload")
        if turn.attachments:
            flow.upload(step, turn.attachments)
        else:
            flow.ask_materials(step, texts.CONTINUE_UPLOAD)
    else:
        step.arm(GAVE_UP_WAIT.purpose)
        step.reply(_GAVE_UP_AGAIN[step.session.ask], choices=texts.CHOICES_GAVE_UP)


def submit(step: Step) -> None:
    """ "确认": submit the report to finance; S5 follows its answer."""
    session = step.session
    step.disarm(SUMMARY_WAIT.purpose)
    rid = flow.report_id(step.env.session_id)
    step.fact(report_id=rid)
    invoices = session.materials.get("invoices") or []
    arguments = {
        "action": "submit",
        "user_id": step.env.user_id,
        "report_id": rid,
        "amount": session.materials.get("total"),
        "approver": session.validation.get("approver"),
        "invoices": [i.get("id") for i in invoices],
    }
    step.update(ask="")
    step.cycle("submit_expense", [("finance_tool", arguments)])

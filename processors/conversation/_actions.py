"""The implementation of every action name the state table declares (``StateSpec.actions``).

The table names what each state does; this mapping says which function does it, and a
test checks that every declared name is here, so the table cannot promise an action the
code lacks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

from hermesbus.processors.conversation import _flow as flow
from hermesbus.processors.conversation._context import Step
from hermesbus.processors.conversation._results import TASKS
from hermesbus.processors.conversation._turns import parse_intent, start, submit

__all__ = ["ACTIONS"]

ACTIONS: Final[Mapping[str, Callable[..., Any]]] = MappingProxyType(
    {
        # S1
        "parse_intent": parse_intent,
        "pin_facts": Step.fact,
        "cycle:check_budget": start,
        # S2
        "ask_materials": flow.ask_materials,
        "cycle:ocr_precheck": flow.upload,
        "adjust_materials": TASKS["ocr_precheck"],  # names what is lacking and asks for it
        # S3
        "cycle:expense_validation": flow.start_validation,
        "check_confidence": flow.tolerated,
        # S3.1
        "ask_review": flow.ask_review,
        "ask_clarification": flow.ask_clarification,
        "record_tolerance": flow.review_passed,
        "ask_preference": flow.ask_preference,
        # S4
        "render_summary": flow.ask_confirm,
        "lock_session": flow.lock_session,
        "cycle:submit_expense": submit,
        # S5
        "cancel_timers": Step.disarm_all,
        "clear_working_data": flow.end,
        "write:unfinished": Step.unfinished,
    }
)
"""Action name -> the function that performs it."""

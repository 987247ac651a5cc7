"""The expense report's spec (``expense.yaml`` beside this module), read once at import.

It is the expense report: its states and what they do, moves, waits with their texts,
exception exits and what each failure says, budgets, the confirmation's short answers, and
its hooks (``expense_hooks.py``: what a spec cannot say). The conversation's engine runs it
as it runs any flow; the dispatcher checks an expense session's snapshots and budgets
against :data:`EXPENSE_MACHINE`, made from it as from any registered flow. It is built in:
a session named by no flow runs it, and no registry holds it.
"""

from __future__ import annotations

from dataclasses import replace
from importlib import resources
from typing import Final

from hermesbus.processors.flow._catalog import machine_of
from hermesbus.processors.flow._load import Lines, load_flow
from hermesbus.processors.flow._spec import FlowSpec

__all__ = ["EXPENSE_FILE", "EXPENSE_MACHINE", "EXPENSE_SPEC", "EXPENSE_TERMINAL"]

EXPENSE_FILE: Final = "expense.yaml"


def _read() -> tuple[FlowSpec, Lines]:
    text = resources.files(__package__).joinpath(EXPENSE_FILE).read_text(encoding="utf-8")
    return load_flow(text, EXPENSE_FILE)


EXPENSE_SPEC: Final = _read()[0]
EXPENSE_MACHINE: Final = replace(machine_of(EXPENSE_SPEC), name="the expense report (built in)")
"""The machine of a session whose snapshot names no flow: the expense report's."""
EXPENSE_TERMINAL: Final = next(s.id for s in EXPENSE_SPEC.states if s.kind == "terminal")
"""The expense report's one terminal state: its snapshot ends the session."""

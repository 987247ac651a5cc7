"""The diagnostics rollup: every envelope's diagnostics added up per component, tool and
flow state over tumbling and hopping windows (see ``_rollup``), and the alert rules that
judge its closed windows (``_alerts``); the faust-streaming app that runs the rollup is
composed in ``hermesbus.compose.diagnostics``, the alerts' reader and writer in
``hermesbus.compose.alerts``."""

from hermesbus.processors.diagnostics._alerts import (
    ALERT,
    FIGURES,
    TESTS,
    AlertBook,
    AlertedHealth,
    Change,
    Measure,
    OpenAlerts,
    Rule,
    Said,
    alert_envelope,
    change_of,
)
from hermesbus.processors.diagnostics._board import Board, Row, tally_of
from hermesbus.processors.diagnostics._rollup import (
    HOP_MS,
    HOPPING_MS,
    TUMBLING_MS,
    Figures,
    Tally,
    Window,
    Windows,
    contributions,
    dead_letter_figures,
    figures_of,
    keys_of,
    rollup_body,
    rollup_envelope,
    windows_of,
)
from hermesbus.processors.diagnostics._settings import RULES, DiagnosticsSettings

__all__ = [
    "ALERT",
    "FIGURES",
    "HOPPING_MS",
    "HOP_MS",
    "RULES",
    "TESTS",
    "TUMBLING_MS",
    "AlertBook",
    "AlertedHealth",
    "Board",
    "Change",
    "DiagnosticsSettings",
    "Figures",
    "Measure",
    "OpenAlerts",
    "Row",
    "Rule",
    "Said",
    "Tally",
    "Window",
    "Windows",
    "alert_envelope",
    "change_of",
    "contributions",
    "dead_letter_figures",
    "figures_of",
    "keys_of",
    "rollup_body",
    "rollup_envelope",
    "tally_of",
    "windows_of",
]

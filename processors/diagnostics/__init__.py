"""The diagnostics rollup: every envelope's diagnostics added up per component, tool and
flow state over tumbling and hopping windows (see ``_rollup``); the faust-streaming app
that runs it is composed in ``hermesbus.compose.diagnostics``."""

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
from hermesbus.processors.diagnostics._settings import DiagnosticsSettings

__all__ = [
    "HOPPING_MS",
    "HOP_MS",
    "TUMBLING_MS",
    "Board",
    "DiagnosticsSettings",
    "Figures",
    "Row",
    "Tally",
    "Window",
    "Windows",
    "contributions",
    "dead_letter_figures",
    "figures_of",
    "keys_of",
    "rollup_body",
    "rollup_envelope",
    "tally_of",
    "windows_of",
]

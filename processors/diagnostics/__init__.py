"""The diagnostics rollup: every envelope's diagnostics added up per component, tool and
flow state over tumbling and hopping windows (see ``_rollup``)."""

from hermesbus.processors.diagnostics._rollup import (
    HOP_MS,
    HOPPING_MS,
    TUMBLING_MS,
    Figures,
    Tally,
    Window,
    contributions,
    dead_letter_figures,
    figures_of,
    keys_of,
    windows_of,
)

__all__ = [
    "HOPPING_MS",
    "HOP_MS",
    "TUMBLING_MS",
    "Figures",
    "Tally",
    "Window",
    "contributions",
    "dead_letter_figures",
    "figures_of",
    "keys_of",
    "windows_of",
]

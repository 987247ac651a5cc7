"""Text from the log made safe for a terminal: every control character shown, none obeyed.

Keys, trace ids, tasks and replies are written by whoever can produce to a topic; an
``ESC [2J`` or an OSC sequence among them would clear a screen or retitle a window when
printed. Human output passes all of it through :func:`printable`; JSON output escapes
C0 controls itself and :func:`json_safe` the rest.
"""

from __future__ import annotations

import re

__all__ = ["json_safe", "printable"]

_BIDI = r"\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
"""The bidirectional marks and overrides: they reorder what is shown after them."""
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029" + _BIDI + "]")
"""C0 controls (ESC, BEL, newlines...), DEL, C1 controls (CSI and OSC openers among them),
line and paragraph separators and the bidirectional controls."""
_RAW_IN_JSON = re.compile(r"[\x7f-\x9f\u2028\u2029" + _BIDI + "]")
"""What JSON encoders leave as it is: the C0 controls they escape already."""


def printable(value: object) -> str:
    """``value`` as text with each control character written as its escape (``\\x1b``,
    ``\\u202e``): what a terminal shows instead of doing."""
    return _UNSAFE.sub(_escaped, str(value))


def json_safe(text: str) -> str:
    """JSON text with the characters encoders leave raw written as ``\\uXXXX`` (still the
    same JSON: they can only occur inside strings)."""
    return _RAW_IN_JSON.sub(_unicode_escaped, text)


_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(found: re.Match[str]) -> str:
    char = found.group()
    code = ord(char)
    if char in _SHORT:
        return _SHORT[char]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"  # noqa: PLR2004


def _unicode_escaped(found: re.Match[str]) -> str:
    return f"\\u{ord(found.group()):04x}"

"""What a tool said was wrong with a request (a 4xx result), in words safe to show the user.

A 4xx ``ToolResult`` is the caller's mistake, and its ``error`` says which, in one of the
tool processor's forms: a python tool's exception as ``<ExceptionClass>: <message>``, an
HTTP tool's answer as ``<tool> answered HTTP <status>: <start of the body>``, or the
processor's own sentence (``arguments: ...``, ``tool 'x' is not registered``). Only the
message itself reaches the user: one line of printable text, bounded, never a traceback,
markup or a JSON fragment. The full error stays in the logs and the session's problems.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Final

__all__ = ["REASON_CHARS", "tool_reason"]

REASON_CHARS: Final = 120
"""At most this many characters of a tool's reason are shown (longer ones end in "…")."""

_EXCEPTION: Final = re.compile(r"[A-Z][A-Za-z0-9_]*:(?: |$)")
"""The python worker's ``type(exc).__name__ + ": "`` (class names are CamelCase; the
processor's own ``arguments: ...`` is lower case and kept)."""
_HTTP: Final = re.compile(r"[a-z][a-z0-9_]{0,63} answered HTTP \d{3}: ")
_UNSAFE: Final = re.compile(r"Traceback|File \"|<[A-Za-z/!?]|\\n")
"""A traceback, markup (an HTML error page) or an escaped multi-line dump: not shown."""
_BODY_KEYS: Final = ("detail", "error", "message")
"""Where an HTTP tool's JSON error body puts its message (FastAPI, most APIs)."""


def tool_reason(error: str | None) -> str:
    """The tool's own message in ``error``, cleaned and bounded; ``""`` if none is safe."""
    lines = (error or "").strip().splitlines()
    text = lines[0] if lines else ""
    if _HTTP.match(text):
        text = _from_body(_HTTP.sub("", text, count=1))
    text = _EXCEPTION.sub("", text, count=1)
    text = "".join(c for c in text if not unicodedata.category(c).startswith("C"))
    text = " ".join(text.split()).rstrip("。. ")
    if not text or _UNSAFE.search(text) or text.startswith(("{", "[")):
        return ""
    if len(text) > REASON_CHARS:
        return text[: REASON_CHARS - 1].rstrip() + "…"
    return text


def _from_body(body: str) -> str:
    """An HTTP error body: a JSON object's message, else the body itself (checked later)."""
    if not body.lstrip().startswith("{"):
        return body
    try:
        value = json.loads(body)
    except ValueError:  # truncated or not JSON: no message to take
        return ""
    found = [value.get(k) for k in _BODY_KEYS] if isinstance(value, dict) else []
    return next((v for v in found if isinstance(v, str)), "")

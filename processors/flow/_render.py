"""Filling a spec's templates from a session's values: lookups, never evaluation.

``{root.path}`` is looked up key by key in the values (dicts only: no attribute, no
index, no call); a missing value renders as an empty text. In a tool's arguments, a
string that is one placeholder alone passes the value itself (a list stays a list).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from hermesbus.processors.flow._spec import placeholders

__all__ = ["MISSING", "lookup", "render", "resolve"]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()
"""What :func:`lookup` answers for a path with no value."""


def lookup(values: Mapping[str, Any], path: str) -> Any:
    """The value at ``root.key.key`` in ``values``; :data:`MISSING` when there is none."""
    current: Any = values
    for key in path.split("."):
        if not isinstance(current, Mapping) or key not in current:
            return MISSING
        current = current[key]
    return current


def _text(value: Any) -> str:
    if value is MISSING or value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return f"{value:g}" if isinstance(value, float) else str(value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def render(template: str, values: Mapping[str, Any]) -> str:
    """``template`` with each placeholder replaced by its value's text."""
    placeholders(template)  # a malformed template never reaches here: specs are checked
    out, i = [], 0
    while i < len(template):
        if template.startswith(("{{", "}}"), i):
            out.append(template[i])
            i += 2
        elif template[i] == "{":
            end = template.index("}", i)
            out.append(_text(lookup(values, template[i + 1 : end])))
            i = end + 1
        else:
            out.append(template[i])
            i += 1
    return "".join(out)


def resolve(value: Any, values: Mapping[str, Any]) -> Any:
    """JSON ``value`` with its strings rendered; a string that is exactly one placeholder
    becomes the value itself (None when missing)."""
    if isinstance(value, str):
        found = placeholders(value)
        if len(found) == 1 and value == "{" + found[0] + "}":
            got = lookup(values, found[0])
            return None if got is MISSING else got
        return render(value, values)
    if isinstance(value, Mapping):
        return {key: resolve(item, values) for key, item in value.items()}
    if isinstance(value, list):
        return [resolve(item, values) for item in value]
    return value

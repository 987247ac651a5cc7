"""What both halves of the generated codec share: names in its namespace, indentation."""

from __future__ import annotations

import itertools
from typing import Any

from ._kinds import RecordKind

__all__ = ["ONE_BYTE", "SHORT", "LineWriter", "indent", "located"]

ONE_BYTE = 128  # varint bytes below this end the varint
SHORT = 64  # lengths below this are one varint byte: _wire.LENGTHS


class LineWriter:
    """The generated module's namespace, fresh names in it, and the records written so far."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.namespace = namespace
        self._names = itertools.count()

    def const(self, value: Any, prefix: str) -> str:
        """Put ``value`` in the namespace under a fresh name, which is returned."""
        name = f"_{prefix}{next(self._names)}"
        self.namespace[name] = value
        return name

    def temp(self, prefix: str) -> str:
        """A fresh local variable name."""
        return f"{prefix}{next(self._names)}"

    def record(self, kind: RecordKind) -> int:
        """The number ``n`` of the record's functions ``_d<n>`` and ``_e<n>``."""
        raise NotImplementedError


def located(lines: list[str], where: str) -> list[str]:
    """``lines`` in a try that says where an error happened: each enclosing field, array
    index or map key adds itself to the path; a short body or bad UTF-8 becomes Malformed."""
    return [
        "try:",
        *indent(lines),
        "except _Located as err:",
        f"    err.at({where})",
        "    raise",
        "except (IndexError, _StructError):",
        f"    raise _Malformed('the body ends early', {where}) from None",
        "except UnicodeDecodeError:",
        f"    raise _Malformed('a string is not valid UTF-8', {where}) from None",
    ]


def indent(lines: list[str], levels: int = 1) -> list[str]:
    pad = "    " * levels
    return [pad + line for line in lines]

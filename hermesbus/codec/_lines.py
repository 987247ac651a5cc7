"""What both halves of the generated codec share: names in its namespace, indentation."""

from __future__ import annotations

import itertools
from typing import Any

from ._kinds import Array, Checks, Double, Kind, Long, Map, Millis, RecordKind, Str, Union

__all__ = ["ONE_BYTE", "SHORT", "LineWriter", "can_break", "indent", "prefixed"]

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


def can_break(kind: Kind) -> bool:
    """Whether reading a value of ``kind`` can raise a contract error."""
    if isinstance(kind, Str | Long | Double):
        return kind.checks != Checks()
    if isinstance(kind, Array):
        return can_break(kind.items)
    if isinstance(kind, Map):
        return can_break(kind.values)
    if isinstance(kind, Union):
        return any(can_break(branch) for branch in kind.branches)
    return isinstance(kind, Millis | RecordKind)


def prefixed(lines: list[str], where: str) -> list[str]:
    """``lines`` in a try that prefixes a contract error's path with ``where``."""
    return ["try:", *indent(lines), "except _Broken as err:", f"    err.at({where})", "    raise"]


def indent(lines: list[str], levels: int = 1) -> list[str]:
    pad = "    " * levels
    return [pad + line for line in lines]

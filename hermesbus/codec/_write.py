"""The encoding half of the generated codec: lines that append a model's Avro bytes."""

from __future__ import annotations

from hermesbus.contract.fields import EPOCH

from . import _wire
from ._kinds import (
    Array,
    Bool,
    Double,
    Enum,
    Kind,
    Long,
    Map,
    Millis,
    Null,
    RecordKind,
    Str,
    Union,
)
from ._lines import SHORT, LineWriter, indent

__all__ = ["WriteLines"]


class WriteLines(LineWriter):
    """Writes ``_e<n>(out, model)`` for each record, appending to the bytearray ``out``."""

    def encoder(self, kind: RecordKind, number: int) -> str:
        lines = [f"def _e{number}(out, m):", f"    # {kind.name}"]
        for index, (name, field) in enumerate(kind.fields):
            var = f"x{index}"
            lines += indent([f"{var} = m.{name}", *self.write(field, var, name)])
        if not kind.fields:
            lines.append("    pass")
        return "\n".join(lines)

    def write(self, kind: Kind, var: str, name: str) -> list[str]:  # noqa: PLR0911 - one per kind
        """Lines that append the Avro encoding of ``var`` (of ``kind``) to ``out``."""
        if isinstance(kind, Null):
            return []  # only inside unions, where the branch was chosen by `is None`
        if isinstance(kind, Bool):
            return [
                f"if {var} is True:",
                "    out += b'\\x01'",
                f"elif {var} is False:",
                "    out += b'\\x00'",
                "else:",
                f"    raise TypeError({name + ': expected a bool'!r})",
            ]
        if isinstance(kind, Long):
            return self._write_long(var, kind.bits)
        if isinstance(kind, Double):
            return [f"out += _pack_double({var})"]
        if isinstance(kind, Str):
            return self._write_string(var)
        if isinstance(kind, Millis):
            ms = self.temp("t")
            return [f"{ms} = ({var} - _EPOCH) // _MS", *self._write_long(ms, 64)]
        if isinstance(kind, Enum):
            indexes = {member: _wire.long_bytes(i) for i, member in enumerate(kind.members)}
            return [f"out += {self.const(indexes, 'I')}[{var}]"]
        if isinstance(kind, Array | Map):
            return self._write_blocks(kind, var, name)
        if isinstance(kind, Union):
            return self._write_union(kind, var, name)
        return [f"_e{self.record(kind)}(out, {var})"]

    def _write_long(self, var: str, bits: int) -> list[str]:
        return [
            f"if -{SHORT} <= {var} < {SHORT}:",
            f"    out += _SMALL[{var} + {SHORT}]",
            "else:",
            f"    out += _long_bytes({var}, {bits})",
        ]

    def _write_string(self, var: str) -> list[str]:
        return [
            f"b = {var}.encode()",
            "n = len(b)",
            f"out += _LENGTHS[n] if n < {SHORT} else _long_bytes(n)",
            "out += b",
        ]

    def _write_blocks(self, kind: Array | Map, var: str, name: str) -> list[str]:
        item = self.temp("y")
        if isinstance(kind, Array):
            loop = f"for {item} in {var}:"
            body = self.write(kind.items, item, name)
        else:
            key = self.temp("k")
            loop = f"for {key}, {item} in {var}.items():"
            body = self._write_string(key) + self.write(kind.values, item, name)
        return [
            f"n = len({var})",
            "if n:",
            f"    out += _LENGTHS[n] if n < {SHORT} else _long_bytes(n)",
            f"    {loop}",
            *indent(body, 2),
            "out += b'\\x00'",
        ]

    def _write_union(self, kind: Union, var: str, name: str) -> list[str]:
        lines: list[str] = []
        for number, branch in sorted(enumerate(kind.branches), key=lambda nb: _branch_order(nb[1])):
            test = self._branch_test(branch, var)
            lines.append(f"{'if' if not lines else 'elif'} {test}:")
            lines += indent(
                [f"out += {_wire.long_bytes(number)!r}", *self.write(branch, var, name)]
            )
        lines += [
            "else:",
            f"    raise TypeError({name + ': no union branch takes '!r} + type({var}).__name__)",
        ]
        return lines

    def _branch_test(self, kind: Kind, var: str) -> str:  # noqa: PLR0911 - one per kind
        if isinstance(kind, Null):
            return f"{var} is None"
        if isinstance(kind, Bool):
            return f"{var} is True or {var} is False"
        if isinstance(kind, RecordKind):  # a subclass is written as its model's record
            return f"isinstance({var}, _C{self.record(kind)})"
        if isinstance(kind, Enum):
            return f"isinstance({var}, {self.const(type(kind.members[0]), 'T')})"
        classes: dict[type, str] = {Long: "int", Double: "float", Str: "str", Map: "dict"}
        if isinstance(kind, Array):
            return f"isinstance({var}, (list, tuple))"
        if isinstance(kind, Millis):
            return f"isinstance({var}, {self.const(type(EPOCH), 'T')})"
        return f"isinstance({var}, {classes[type(kind)]})"


def _branch_order(kind: Kind) -> int:
    """Encode tries branches most specific first: bool before int, enum before str."""
    order = (Null, Bool, RecordKind, Enum, Long, Double, Str, Millis, Array, Map)
    return next(i for i, cls in enumerate(order) if isinstance(kind, cls))

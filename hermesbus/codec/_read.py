"""The decoding half of the generated codec: lines that read Avro bytes into models."""

from __future__ import annotations

from collections.abc import Callable

from pydantic_core import SchemaValidator, core_schema

from ._kinds import (
    Array,
    Bool,
    Checks,
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
from ._lines import ONE_BYTE, LineWriter, indent, located

__all__ = ["ReadLines"]


def _pattern_test(pattern: str) -> Callable[[str], bool]:
    """pydantic's own check of ``pattern`` (Rust regex: linear time, its ``$`` and classes)."""
    return SchemaValidator(core_schema.str_schema(pattern=pattern)).isinstance_python


class ReadLines(LineWriter):
    """Writes ``_d<n>(buf, pos) -> (model, pos)`` for each record."""

    def decoder(self, kind: RecordKind, number: int) -> str:
        lines = [f"def _d{number}(buf, pos):", f"    # {kind.name}", "    end = len(buf)"]
        values = []
        for index, (name, field) in enumerate(kind.fields):
            var = f"v{index}"
            lines += indent(located(self.read(field, var), repr(name)))
            values.append(f"{name!r}: {var}")
        names = ", ".join(repr(name) for name, _ in kind.fields)
        lines += indent(
            [  # built as model_construct builds an instance: every field is set
                f"m = _new(_C{number})",
                f"_set_dict(m, {{{', '.join(values)}}})",
                f"_set_fields(m, {{{names}}})" if names else "_set_fields(m, set())",
                "_set_extra(m, None)",
                "_set_private(m, None)",
                "return m, pos",
            ]
        )
        return "\n".join(lines)

    def read(self, kind: Kind, var: str) -> list[str]:  # noqa: PLR0911 - one per kind
        """Lines that read one value of ``kind`` at ``pos`` into ``var``."""
        if isinstance(kind, Null):
            return [f"{var} = None"]
        if isinstance(kind, Bool):
            return [
                "b = buf[pos]",
                "pos += 1",
                "if b > 1:",
                "    raise _Malformed('boolean byte ' + str(b))",
                f"{var} = b == 1",
            ]
        if isinstance(kind, Long):
            return self._read_long(var, kind.bits) + self._bounds(var, kind.checks)
        if isinstance(kind, Double):
            lines = [f"({var},) = _double(buf, pos)", "pos += 8"]
            if kind.checks.finite:  # inf - inf and nan - nan are nan, which is true
                lines += [f"if {var} - {var}:", "    raise _Broken('should be a finite number')"]
            return lines + self._bounds(var, kind.checks)
        if isinstance(kind, Str):
            return self._read_string(var) + self._lengths(var, kind.checks)
        if isinstance(kind, Millis):
            ms = self.temp("t")
            return [
                *self._read_long(ms, 64),
                "try:",
                f"    {var} = _EPOCH + _td(0, 0, 0, {ms})",
                "except OverflowError:",
                "    raise _Broken('timestamp is outside years 1-9999') from None",
            ]
        if isinstance(kind, Enum):
            members = self.const(kind.members, "E")
            return [*self._index(var, len(kind.members), "enum"), f"{var} = {members}[{var}]"]
        if isinstance(kind, Array | Map):
            return self._read_blocks(kind, var)
        if isinstance(kind, Union):
            return self._read_union(kind, var)
        return [f"{var}, pos = _d{self.record(kind)}(buf, pos)"]

    def _read_long(self, var: str, bits: int) -> list[str]:
        slow = "_read_long" if bits == 64 else "_read_int"  # noqa: PLR2004
        return [
            "b = buf[pos]",
            f"if b < {ONE_BYTE}:",
            "    pos += 1",
            f"    {var} = (b >> 1) ^ -(b & 1)",
            f"elif buf[pos + 1] < {ONE_BYTE}:",  # two bytes: 14 bits, any int or long
            f"    b = b & {ONE_BYTE - 1} | buf[pos + 1] << 7",
            "    pos += 2",
            f"    {var} = (b >> 1) ^ -(b & 1)",
            "else:",
            f"    {var}, pos = {slow}(buf, pos)",
        ]

    def _read_string(self, var: str) -> list[str]:
        return [
            "b = buf[pos]",
            f"if not b & {ONE_BYTE | 1}:",  # one byte, not negative: a length below 64
            "    e = pos + 1 + (b >> 1)",
            "    if e > end:",
            "        raise IndexError(e)",
            f"    {var} = buf[pos + 1:e].decode()",
            "    pos = e",
            "else:",
            f"    {var}, pos = _read_string(buf, pos)",
        ]

    def _index(self, var: str, count: int, what: str) -> list[str]:
        prefix, suffix = f"{what} index ", f" of {count}"
        return [
            *self._read_long(var, 32),
            f"if not 0 <= {var} < {count}:",
            f"    raise _Malformed({prefix!r} + str({var}) + {suffix!r})",
        ]

    def _bounds(self, var: str, checks: Checks) -> list[str]:
        """``not v >= bound`` rather than ``v < bound``: NaN fails every bound, as in pydantic."""
        lines = []
        for op, bound, words in (
            (">=", checks.ge, "greater than or equal to"),
            (">", checks.gt, "greater than"),
            ("<=", checks.le, "less than or equal to"),
            ("<", checks.lt, "less than"),
        ):
            if bound is not None:
                rule = f"should be {words} {bound}"
                lines += [
                    f"if not {var} {op} {self.const(bound, 'B')}:",
                    f"    raise _Broken({rule!r})",
                ]
        return lines

    def _lengths(self, var: str, checks: Checks) -> list[str]:
        lines = []
        if checks.min_length == 1:
            lines += [f"if not {var}:", "    raise _Broken('should have at least 1 character')"]
        elif checks.min_length:
            rule = f"should have at least {checks.min_length} characters"
            lines += [f"if len({var}) < {checks.min_length}:", f"    raise _Broken({rule!r})"]
        if checks.max_length is not None:
            rule = f"should have at most {checks.max_length} characters"
            lines += [f"if len({var}) > {checks.max_length}:", f"    raise _Broken({rule!r})"]
        if checks.pattern is not None:
            test = self.const(_pattern_test(checks.pattern), "P")
            rule = f"should match pattern {checks.pattern!r}"
            lines += [f"if not {test}({var}):", f"    raise _Broken({rule!r})"]
        return lines

    def _read_blocks(self, kind: Array | Map, var: str) -> list[str]:
        acc, count, item = self.temp("a"), self.temp("c"), self.temp("i")
        if isinstance(kind, Array):
            read = located(self.read(kind.items, item), f"len({acc})")
            store = [f"{acc}.append({item})"]
            empty, start = ("()" if kind.container is tuple else "[]"), "[]"
            done = f"tuple({acc})" if kind.container is tuple else acc
        else:
            key = self.temp("k")
            read = located(self._read_string(key), "'<key>'")
            read += located(self.read(kind.values, item), key)
            store, empty, start, done = [f"{acc}[{key}] = {item}"], "{}", "{}", acc
        return [
            "if buf[pos] == 0:",  # the common empty array or map: one zero byte
            "    pos += 1",
            f"    {var} = {empty}",
            "else:",
            f"    {acc} = {start}",
            "    while True:",
            "        b = buf[pos]",
            f"        if not b & {ONE_BYTE | 1}:",  # a count below 64, the usual block
            "            pos += 1",
            f"            {count} = b >> 1",
            f"            if {count} > end - pos:",
            f"                raise _Malformed(_too_many({count}, end - pos))",
            "        else:",
            f"            {count}, pos = _block(buf, pos)",
            f"        if not {count}:",
            "            break",
            f"        for _ in range({count}):",
            *indent(read + store, 3),
            f"    {var} = {done}",
        ]

    def _read_union(self, kind: Union, var: str) -> list[str]:
        index = self.temp("u")
        lines = self._index(index, len(kind.branches), "union")
        for number, branch in enumerate(kind.branches):
            lines.append(f"{'if' if number == 0 else 'elif'} {index} == {number}:")
            lines += indent(self.read(branch, var))
        return lines

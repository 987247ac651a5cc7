"""The decoding half of the generated codec: lines that read Avro bytes into models."""

from __future__ import annotations

import re
from collections.abc import Callable

from ._kinds import (
    Array,
    Bool,
    Checks,
    CompileError,
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
from ._lines import ONE_BYTE, LineWriter, can_break, indent, prefixed

__all__ = ["ReadLines"]


def _python_pattern(pattern: str, where: str) -> Callable[[str], object]:
    """pydantic matches patterns with Rust's regex, where a final ``$`` ends the text only."""
    body = pattern[:-1] if pattern.endswith("$") and not pattern.endswith("\\$") else pattern
    if "$" in body.replace("\\$", ""):
        raise CompileError(f"{where}: a '$' inside the pattern is not compiled")
    return re.compile(body + ("\\Z" if body != pattern else "")).search


class ReadLines(LineWriter):
    """Writes ``_d<n>(buf, pos) -> (model, pos)`` for each record."""

    def decoder(self, kind: RecordKind, number: int) -> str:
        lines = [f"def _d{number}(buf, pos):", f"    # {kind.name}", "    end = len(buf)"]
        values = []
        for index, (name, field) in enumerate(kind.fields):
            var = f"v{index}"
            body = self.read(field, var, name)
            if can_break(field):
                body = prefixed(body, repr(name))
            lines += indent(body)
            values.append(f"{name!r}: {var}")
        names = ", ".join(repr(name) for name, _ in kind.fields)
        lines += indent(
            [  # built as model_construct builds an instance: every field is set
                f"m = _new(_C{number})",
                f"_set(m, '__dict__', {{{', '.join(values)}}})",
                f"_set_fields(m, {{{names}}})" if names else "_set_fields(m, set())",
                "_set_extra(m, None)",
                "_set_private(m, None)",
                "return m, pos",
            ]
        )
        return "\n".join(lines)

    def read(self, kind: Kind, var: str, name: str) -> list[str]:  # noqa: PLR0911 - one per kind
        """Lines that read one value of ``kind`` at ``pos`` into ``var``."""
        if isinstance(kind, Null):
            return [f"{var} = None"]
        if isinstance(kind, Bool):
            return [
                "b = buf[pos]",
                "pos += 1",
                "if b > 1:",
                f"    raise _Malformed({name + ': boolean byte '!r} + str(b))",
                f"{var} = b == 1",
            ]
        if isinstance(kind, Long):
            return self._read_long(var, kind.bits) + self._bounds(var, name, kind.checks)
        if isinstance(kind, Double):
            unpack, size = ("_double", 8) if kind.bits == 64 else ("_float", 4)  # noqa: PLR2004
            lines = [f"({var},) = {unpack}(buf, pos)", f"pos += {size}"]
            if kind.checks.finite:
                lines += [f"if {var} - {var}:", "    raise _Broken('should be a finite number')"]
            return lines + self._bounds(var, name, kind.checks)
        if isinstance(kind, Str):
            return self._read_string(var, name) + self._lengths(var, name, kind.checks)
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
            return [*self._index(var, name, len(kind.members), "enum"), f"{var} = {members}[{var}]"]
        if isinstance(kind, Array | Map):
            return self._read_blocks(kind, var, name)
        if isinstance(kind, Union):
            return self._read_union(kind, var, name)
        return [f"{var}, pos = _d{self.record(kind)}(buf, pos)"]

    def _read_long(self, var: str, bits: int) -> list[str]:
        slow = "_read_long" if bits == 64 else "_read_int"  # noqa: PLR2004
        return [
            "b = buf[pos]",
            f"if b < {ONE_BYTE}:",
            "    pos += 1",
            f"    {var} = (b >> 1) ^ -(b & 1)",
            "else:",
            f"    {var}, pos = {slow}(buf, pos)",
        ]

    def _read_string(self, var: str, name: str) -> list[str]:
        return [
            "b = buf[pos]",
            f"if b < {ONE_BYTE} and not b & 1:",
            "    e = pos + 1 + (b >> 1)",
            "    if e > end:",
            "        raise IndexError(e)",
            f"    {var} = buf[pos + 1:e].decode()",
            "    pos = e",
            "else:",
            f"    {var}, pos = _read_string(buf, pos, {name!r})",
        ]

    def _index(self, var: str, name: str, count: int, what: str) -> list[str]:
        prefix, suffix = f"{name}: {what} index ", f" of {count}"
        return [
            *self._read_long(var, 32),
            f"if not 0 <= {var} < {count}:",
            f"    raise _Malformed({prefix!r} + str({var}) + {suffix!r})",
        ]

    def _bounds(self, var: str, name: str, checks: Checks) -> list[str]:
        """``not v >= bound`` rather than ``v < bound``: NaN fails every bound, as in pydantic."""
        lines = []
        for op, bound, words in (
            (">=", checks.ge, "greater than or equal to"),
            (">", checks.gt, "greater than"),
            ("<=", checks.le, "less than or equal to"),
            ("<", checks.lt, "less than"),
        ):
            if bound is None:
                continue
            lines += [
                f"if not {var} {op} {bound!r}:",
                f"    raise _Broken({f'should be {words} {bound}'!r})",
            ]
        return lines

    def _lengths(self, var: str, name: str, checks: Checks) -> list[str]:
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
            search = self.const(_python_pattern(checks.pattern, name), "P")
            rule = f"should match pattern {checks.pattern!r}"
            lines += [f"if {search}({var}) is None:", f"    raise _Broken({rule!r})"]
        return lines

    def _read_blocks(self, kind: Array | Map, var: str, name: str) -> list[str]:
        acc, count, item = self.temp("a"), self.temp("c"), self.temp("i")
        if isinstance(kind, Array):
            read = self.read(kind.items, item, name)
            store, where = [f"{acc}.append({item})"], f"len({acc})"
            empty, start = ("()" if kind.container is tuple else "[]"), "[]"
            done = f"tuple({acc})" if kind.container is tuple else acc
        else:
            key = self.temp("k")
            read = self._read_string(key, name) + self.read(kind.values, item, name)
            store, where, empty, start, done = [f"{acc}[{key}] = {item}"], key, "{}", "{}", acc
        if can_break(kind.items if isinstance(kind, Array) else kind.values):
            read = prefixed(read, where)
        return [
            "if buf[pos] == 0:",  # the common empty array or map: one zero byte
            "    pos += 1",
            f"    {var} = {empty}",
            "else:",
            f"    {acc} = {start}",
            "    while True:",
            "        b = buf[pos]",
            f"        if b < {ONE_BYTE} and not b & 1:",  # a count below 64, the usual block
            "            pos += 1",
            f"            {count} = b >> 1",
            f"            if {count} > end - pos:",
            f"                raise _Malformed({name + ': more items than bytes left'!r})",
            "        else:",
            f"            {count}, pos = _block(buf, pos, {name!r})",
            f"        if not {count}:",
            "            break",
            f"        for _ in range({count}):",
            *indent(read + store, 3),
            f"    {var} = {done}",
        ]

    def _read_union(self, kind: Union, var: str, name: str) -> list[str]:
        index = self.temp("u")
        lines = self._index(index, name, len(kind.branches), "union")
        for number, branch in enumerate(kind.branches):
            lines.append(f"{'if' if number == 0 else 'elif'} {index} == {number}:")
            lines += indent(self.read(branch, var, name))
        return lines

    # -- encode ---------------------------------------------------------------------------

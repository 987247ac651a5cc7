"""Write the codec of one schema and its models as Python: models straight to Avro bytes
and back, with the models' constraints checked inline.

fastavro walks a schema per datum and hands back dicts that pydantic then validates
field by field again; for the one schema the bus writes, both walks can be unrolled
ahead of time. The generated source is built only from the schema's names (Avro names
are identifiers) and ``repr`` of strings; every object it needs (model classes, enum
members, compiled patterns) is passed in its namespace, never spelled in the source.
"""

from __future__ import annotations

import itertools
import linecache
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from hermesbus._types import EPOCH, Record

from . import _wire
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
    pair_record,
)

__all__ = ["CompileError", "Compiled", "compile_codec"]

Decoder = Callable[[bytes, int], tuple[Any, int]]
Encoder = Callable[[bytearray, Any], None]

_ONE_BYTE = 128
_SHORT = 64  # lengths below this are one varint byte: _wire.LENGTHS


class Compiled:
    """The generated encoder and decoder of one record schema, and their source."""

    def __init__(self, decode: Decoder, encode: Encoder, source: str) -> None:
        self.decode = decode
        self.encode = encode
        self.source = source


def compile_codec(schema: dict[str, Any], model: type[Record]) -> Compiled:
    """Pair ``schema`` with ``model`` and generate their codec; CompileError if they differ."""
    root = pair_record(schema, model)
    writer = _Writer()
    writer.record(root)
    source = "\n\n".join(writer.functions) + "\n"
    filename = f"<hermesbus.codec: {root.name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    # S102: the source is generated from the shipped schema's identifiers, see the module doc.
    exec(compile(source, filename, "exec"), writer.namespace)  # noqa: S102
    return Compiled(writer.namespace["_d0"], writer.namespace["_e0"], source)


def _slot_setter(name: str) -> Callable[[Any, Any], None]:
    """The setter of one of BaseModel's instance slots."""
    slot = vars(BaseModel).get(name)
    if slot is None or not hasattr(slot, "__set__"):
        raise CompileError(f"pydantic's BaseModel has no slot {name}")
    setter: Callable[[Any, Any], None] = slot.__set__
    return setter


def _python_pattern(pattern: str, where: str) -> Callable[[str], object]:
    """pydantic matches patterns with Rust's regex, where a final ``$`` ends the text only."""
    body = pattern[:-1] if pattern.endswith("$") and not pattern.endswith("\\$") else pattern
    if "$" in body.replace("\\$", ""):
        raise CompileError(f"{where}: a '$' inside the pattern is not compiled")
    return re.compile(body + ("\\Z" if body != pattern else "")).search


class _Writer:
    """Accumulates one decoder and one encoder function per record, and their namespace."""

    def __init__(self) -> None:
        self.namespace: dict[str, Any] = {
            "_new": object.__new__,
            "_set": object.__setattr__,
            # the instance slots pydantic itself sets when it builds a model
            "_set_fields": _slot_setter("__pydantic_fields_set__"),
            "_set_extra": _slot_setter("__pydantic_extra__"),
            "_set_private": _slot_setter("__pydantic_private__"),
            "_Malformed": _wire.Malformed,
            "_Broken": _wire.Broken,
            "_read_long": _wire.read_long,
            "_read_int": _wire.read_int,
            "_read_string": _wire.read_string,
            "_block": _wire.block,
            "_long_bytes": _wire.long_bytes,
            "_SMALL": _wire.SMALL,
            "_LENGTHS": _wire.LENGTHS,
            "_double": _wire.DOUBLE.unpack_from,
            "_float": _wire.FLOAT.unpack_from,
            "_pack_double": _wire.DOUBLE.pack,
            "_pack_float": _wire.FLOAT.pack,
            "_EPOCH": EPOCH,
            "_MS": timedelta(milliseconds=1),
            "_td": timedelta,
        }
        self.functions: list[str] = []
        self.index: dict[str, int] = {}
        self._names = itertools.count()

    def const(self, value: Any, prefix: str) -> str:
        name = f"_{prefix}{next(self._names)}"
        self.namespace[name] = value
        return name

    def temp(self, prefix: str) -> str:
        return f"{prefix}{next(self._names)}"

    def record(self, kind: RecordKind) -> int:
        """The number of the record's functions ``_d<n>``/``_e<n>``, written on first use."""
        if kind.name in self.index:
            return self.index[kind.name]
        number = self.index[kind.name] = len(self.index)
        self.namespace[f"_C{number}"] = kind.model
        self.functions.append(self._decoder(kind, number))
        self.functions.append(self._encoder(kind, number))
        return number

    # -- decode ---------------------------------------------------------------------------

    def _decoder(self, kind: RecordKind, number: int) -> str:
        lines = [f"def _d{number}(buf, pos):", f"    # {kind.name}", "    end = len(buf)"]
        values = []
        for index, (name, field) in enumerate(kind.fields):
            var = f"v{index}"
            body = self.read(field, var, name)
            if _can_break(field):
                body = _prefixed(body, repr(name))
            lines += _indent(body)
            values.append(f"{name!r}: {var}")
        names = ", ".join(repr(name) for name, _ in kind.fields)
        lines += _indent(
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
            f"if b < {_ONE_BYTE}:",
            "    pos += 1",
            f"    {var} = (b >> 1) ^ -(b & 1)",
            "else:",
            f"    {var}, pos = {slow}(buf, pos)",
        ]

    def _read_string(self, var: str, name: str) -> list[str]:
        return [
            "b = buf[pos]",
            f"if b < {_ONE_BYTE} and not b & 1:",
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
        if _can_break(kind.items if isinstance(kind, Array) else kind.values):
            read = _prefixed(read, where)
        return [
            "if buf[pos] == 0:",  # the common empty array or map: one zero byte
            "    pos += 1",
            f"    {var} = {empty}",
            "else:",
            f"    {acc} = {start}",
            "    while True:",
            "        b = buf[pos]",
            f"        if b < {_ONE_BYTE} and not b & 1:",  # a count below 64, the usual block
            "            pos += 1",
            f"            {count} = b >> 1",
            f"            if {count} > end - pos:",
            f"                raise _Malformed({name + ': more items than bytes left'!r})",
            "        else:",
            f"            {count}, pos = _block(buf, pos, {name!r})",
            f"        if not {count}:",
            "            break",
            f"        for _ in range({count}):",
            *_indent(read + store, 3),
            f"    {var} = {done}",
        ]

    def _read_union(self, kind: Union, var: str, name: str) -> list[str]:
        index = self.temp("u")
        lines = self._index(index, name, len(kind.branches), "union")
        for number, branch in enumerate(kind.branches):
            lines.append(f"{'if' if number == 0 else 'elif'} {index} == {number}:")
            lines += _indent(self.read(branch, var, name))
        return lines

    # -- encode ---------------------------------------------------------------------------

    def _encoder(self, kind: RecordKind, number: int) -> str:
        lines = [f"def _e{number}(out, m):", f"    # {kind.name}"]
        for index, (name, field) in enumerate(kind.fields):
            var = f"x{index}"
            lines += _indent([f"{var} = m.{name}", *self.write(field, var, name)])
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
            return [f"out += {'_pack_double' if kind.bits == 64 else '_pack_float'}({var})"]  # noqa: PLR2004
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
            f"if -{_SHORT} <= {var} < {_SHORT}:",
            f"    out += _SMALL[{var} + {_SHORT}]",
            "else:",
            f"    out += _long_bytes({var}, {bits})",
        ]

    def _write_string(self, var: str) -> list[str]:
        return [
            f"b = {var}.encode()",
            "n = len(b)",
            f"out += _LENGTHS[n] if n < {_SHORT} else _long_bytes(n)",
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
            f"    out += _LENGTHS[n] if n < {_SHORT} else _long_bytes(n)",
            f"    {loop}",
            *_indent(body, 2),
            "out += b'\\x00'",
        ]

    def _write_union(self, kind: Union, var: str, name: str) -> list[str]:
        lines: list[str] = []
        for number, branch in sorted(enumerate(kind.branches), key=lambda nb: _branch_order(nb[1])):
            test = self._branch_test(branch, var)
            lines.append(f"{'if' if not lines else 'elif'} {test}:")
            lines += _indent(
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
        if isinstance(kind, RecordKind):
            return f"type({var}) is _C{self.record(kind)}"
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


def _can_break(kind: Kind) -> bool:
    """Whether reading a value of ``kind`` can raise a contract error."""
    if isinstance(kind, Str | Long | Double):
        return kind.checks != Checks()
    if isinstance(kind, Array):
        return _can_break(kind.items)
    if isinstance(kind, Map):
        return _can_break(kind.values)
    if isinstance(kind, Union):
        return any(_can_break(branch) for branch in kind.branches)
    return isinstance(kind, Millis | RecordKind)


def _prefixed(lines: list[str], where: str) -> list[str]:
    """``lines`` in a try that prefixes a contract error's path with ``where``."""
    return ["try:", *_indent(lines), "except _Broken as err:", f"    err.at({where})", "    raise"]


def _indent(lines: list[str], levels: int = 1) -> list[str]:
    pad = "    " * levels
    return [pad + line for line in lines]

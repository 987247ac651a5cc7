"""Write the codec of one schema and its models as Python: models straight to Avro bytes
and back, with the models' constraints checked inline.

fastavro walks a schema per datum and hands back dicts that pydantic then validates
field by field again; for the one schema the bus writes, both walks can be unrolled
ahead of time. The generated source is built only from the schema's names (Avro names
are identifiers) and ``repr`` of strings; every object it needs (model classes, enum
members, compiled patterns) is passed in its namespace, never spelled in the source.
``_read`` writes the decoding half, ``_write`` the encoding half.
"""

from __future__ import annotations

import itertools
import linecache
import struct
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from hermesbus.contract.fields import EPOCH, Record

from . import _wire
from ._kinds import CompileError, RecordKind, pair_record
from ._read import ReadLines
from ._write import WriteLines

__all__ = ["CompileError", "Compiled", "compile_codec"]

Decoder = Callable[[bytes, int], tuple[Any, int]]
Encoder = Callable[[bytearray, Any], None]


_COUNT = itertools.count()  # each generated module gets its own name in linecache


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
    filename = f"<hermesbus.codec {next(_COUNT)}: {root.name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    # S102: the source is generated from the shipped schema's identifiers, see the module doc.
    exec(compile(source, filename, "exec"), writer.namespace)  # noqa: S102
    return Compiled(writer.namespace["_d0"], writer.namespace["_e0"], source)


def _slot_setter(name: str) -> Callable[[Any, Any], None]:
    """The setter of one of BaseModel's instance slots (``__dict__`` is one of them)."""
    slot = vars(BaseModel).get(name)
    if slot is None or not hasattr(slot, "__set__"):
        raise CompileError(f"pydantic's BaseModel has no slot {name}")
    setter: Callable[[Any, Any], None] = slot.__set__
    return setter


def _namespace() -> dict[str, Any]:
    """What the generated functions refer to, besides their own constants."""
    return {
        "_new": object.__new__,
        # the instance slots pydantic itself sets when it builds a model
        "_set_dict": _slot_setter("__dict__"),
        "_set_fields": _slot_setter("__pydantic_fields_set__"),
        "_set_extra": _slot_setter("__pydantic_extra__"),
        "_set_private": _slot_setter("__pydantic_private__"),
        "_Located": _wire.Located,
        "_Malformed": _wire.Malformed,
        "_Broken": _wire.Broken,
        "_StructError": struct.error,
        "_read_long": _wire.read_long,
        "_read_int": _wire.read_int,
        "_read_string": _wire.read_string,
        "_block": _wire.block,
        "_too_many": _wire.too_many,
        "_long_bytes": _wire.long_bytes,
        "_SMALL": _wire.SMALL,
        "_LENGTHS": _wire.LENGTHS,
        "_double": _wire.DOUBLE.unpack_from,
        "_pack_double": _wire.DOUBLE.pack,
        "_EPOCH": EPOCH,
        "_MS": timedelta(milliseconds=1),
        "_td": timedelta,
    }


class _Writer(ReadLines, WriteLines):
    """Accumulates one decoder and one encoder function per record."""

    def __init__(self) -> None:
        super().__init__(_namespace())
        self.functions: list[str] = []
        self.index: dict[str, int] = {}

    def record(self, kind: RecordKind) -> int:
        """The number of the record's functions ``_d<n>``/``_e<n>``, written on first use."""
        if kind.name in self.index:
            return self.index[kind.name]
        number = self.index[kind.name] = len(self.index)
        self.namespace[f"_C{number}"] = kind.model
        self.functions.append(self.decoder(kind, number))
        self.functions.append(self.encoder(kind, number))
        return number

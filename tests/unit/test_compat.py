"""Avro resolution rules: what a reader can read of a writer's data."""

from __future__ import annotations

from typing import Any

import pytest

from hermesbus.codec.compat import Level, can_read, compare, named_types


def record(*fields: dict[str, Any], name: str = "R") -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "t", "fields": list(fields)}


def field(name: str, kind: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, **extra}


@pytest.mark.parametrize(
    ("writer", "reader"),
    [
        ("int", "long"),
        ("int", "float"),
        ("int", "double"),
        ("long", "float"),
        ("long", "double"),
        ("float", "double"),
        ("string", "bytes"),
        ("bytes", "string"),
    ],
)
def test_promotions(writer: str, reader: str) -> None:
    assert can_read(record(field("a", reader)), record(field("a", writer))) == []


@pytest.mark.parametrize(
    ("writer", "reader"), [("long", "int"), ("double", "float"), ("string", "int")]
)
def test_narrowing_is_refused_and_names_the_field(writer: str, reader: str) -> None:
    problems = can_read(record(field("amount", reader)), record(field("amount", writer)))
    assert [str(p) for p in problems] == [f"t.R.amount: type changed from {writer} to {reader}"]


def test_new_reader_field_needs_a_default() -> None:
    old = record(field("a", "string"))
    assert can_read(record(field("a", "string"), field("b", "int", default=0)), old) == []
    problems = can_read(record(field("a", "string"), field("b", "int")), old)
    assert [p.path for p in problems] == ["t.R.b"]
    assert "no default" in problems[0].reason


def test_removed_writer_field_is_ignored_by_the_reader() -> None:
    assert (
        can_read(record(field("a", "string")), record(field("a", "string"), field("b", "int")))
        == []
    )


def test_fields_match_by_reader_alias() -> None:
    reader = record(field("total_amount", "long", aliases=["amount"]))
    assert can_read(reader, record(field("amount", "int"))) == []


def test_enum_symbols_need_a_reader_default() -> None:
    def enum(*symbols: str, **extra: Any) -> dict[str, Any]:
        return {"type": "enum", "name": "E", "namespace": "t", "symbols": list(symbols), **extra}

    assert can_read(enum("a", "b"), enum("a")) == []
    problems = can_read(enum("a"), enum("a", "b"))
    assert "enum symbols ['b']" in problems[0].reason
    assert can_read(enum("a", default="a"), enum("a", "b")) == []


def test_unions() -> None:
    old = record(field("x", ["null", "string"], default=None))
    assert can_read(record(field("x", ["null", "string", "int"], default=None)), old) == []
    problems = can_read(record(field("x", ["null", "int"], default=None)), old)
    assert problems[0].path == "t.R.x<string>"
    assert (
        can_read(record(field("x", ["null", "string"], default=None)), record(field("x", "string")))
        == []
    )
    assert can_read(record(field("x", "string")), old)[0].reason.startswith(
        "type changed from null"
    )


def test_named_references_and_recursion() -> None:
    node = record(field("value", "int"), field("next", ["null", "t.R"], default=None))
    assert can_read(node, node) == []
    wider = record(field("value", "long"), field("next", ["null", "t.R"], default=None))
    assert can_read(wider, node) == []
    assert can_read(node, wider)[0].path == "t.R.value"


def test_arrays_maps_and_fixed() -> None:
    assert can_read({"type": "array", "items": "long"}, {"type": "array", "items": "int"}) == []
    assert can_read({"type": "map", "values": "int"}, {"type": "map", "values": "long"})
    fixed = {"type": "fixed", "name": "F", "size": 4}
    assert "fixed size changed" in can_read({**fixed, "size": 8}, fixed)[0].reason


def test_levels() -> None:
    old = record(field("a", "string"))
    added_default = record(field("a", "string"), field("b", "int", default=1))
    added_required = record(field("a", "string"), field("b", "int"))
    removed = record()

    def level(new: dict[str, Any]) -> Level:
        return compare("t.R", new, old, named_types(new), named_types(old)).level

    assert level(added_default) is Level.FULL
    assert level(added_required) is Level.FORWARD
    assert level(removed) is Level.BACKWARD
    assert level(record(field("a", "int"))) is Level.NONE
    assert Level.FULL.satisfies(Level.BACKWARD)
    assert not Level.FORWARD.satisfies(Level.BACKWARD)
    assert Level.NONE.satisfies(Level.NONE)


def test_references_resolve_in_the_namespace_the_type_was_defined_in() -> None:
    """x.A refers to B by its short name; y.C refers to x.A from another namespace."""
    top = {
        "type": "record",
        "name": "Top",
        "namespace": "x",
        "fields": [
            {"name": "kind", "type": {"type": "enum", "name": "B", "symbols": ["p", "q"]}},
            {
                "name": "a",
                "type": {"type": "record", "name": "A", "fields": [{"name": "b", "type": "B"}]},
            },
            {
                "name": "c",
                "type": {
                    "type": "record",
                    "name": "C",
                    "namespace": "y",
                    "fields": [{"name": "a2", "type": "x.A"}],
                },
            },
        ],
    }
    assert can_read(top, top) == []
    assert set(named_types(top)) == {"x.Top", "x.B", "x.A", "y.C"}


def test_compat_agrees_with_fastavro_resolution() -> None:
    """Where can_read says yes, fastavro reads; where it says no, fastavro refuses."""
    import io

    import fastavro

    writer = record(
        field("n", "int"), field("e", {"type": "enum", "name": "E", "symbols": ["a", "b"]})
    )
    readers = {
        "promoted": (
            record(
                field("n", "double"),
                field("e", {"type": "enum", "name": "E", "symbols": ["a", "b"]}),
            ),
            True,
        ),
        "new field with default": (
            record(
                field("n", "int"),
                field("x", "string", default="d"),
                field("e", {"type": "enum", "name": "E", "symbols": ["a", "b"]}),
            ),
            True,
        ),
        "new field without default": (
            record(
                field("n", "int"),
                field("x", "string"),
                field("e", {"type": "enum", "name": "E", "symbols": ["a", "b"]}),
            ),
            False,
        ),
        "narrowed": (
            record(
                field("n", "string"),
                field("e", {"type": "enum", "name": "E", "symbols": ["a", "b"]}),
            ),
            False,
        ),
    }
    data = io.BytesIO()
    fastavro.schemaless_writer(data, fastavro.parse_schema(writer), {"n": 1, "e": "b"})
    for label, (reader, readable) in readers.items():
        assert (can_read(reader, writer) == []) is readable, label
        data.seek(0)
        try:
            fastavro.schemaless_reader(
                data, fastavro.parse_schema(writer), fastavro.parse_schema(reader)
            )
            read = True
        except Exception:
            read = False
        assert read is readable, label

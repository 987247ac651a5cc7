"""Reading a flow spec file: YAML (safe: no tags, anchors or aliases) checked against the
published JSON Schema, every problem named by its line and field.

The YAML is composed into nodes first, so each value keeps the line it stands on; the
JSON Schema (``flow.schema.json``, generated from :mod:`._spec`) is what is enforced, so
an editor using the same schema agrees; the models then add what a schema cannot say
(templates, regular expressions).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Final

import jsonschema
import yaml
from pydantic import ValidationError

from hermesbus.errors import ConfigError
from hermesbus.processors.flow._spec import FlowSpec

__all__ = ["SCHEMA_FILE", "FlowSpecError", "Lines", "Problem", "load_flow", "parse", "schema"]

SCHEMA_FILE: Final = "flow.schema.json"
_BOOLS: Final = ("true", "false")
_SHORT: Final = 60
"""A value quoted in a message is cut to this many characters."""
_COLLECTIONS: Final = frozenset({"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"})
MAX_BYTES: Final = 256 * 1024
"""A larger spec file is refused before it is parsed."""
MAX_DEPTH: Final = 32
"""Deeper nesting is refused (no spec needs it; YAML's reader recurses)."""
MAX_PROBLEMS: Final = 50
"""At most this many problems are told; then how many more there are."""
_INT: Final = re.compile(r"[-+]?(0|[1-9][0-9]{0,17})")
_FLOAT: Final = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]{1,3})?")

Path_ = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Problem:
    """What is wrong, where: the line (1-based; 0 when the file as a whole) and the field
    (``states[1].waits[0].text``)."""

    line: int
    field: str
    message: str

    def shown(self, where: str) -> str:
        place = f"{where}:{self.line}" if self.line else where
        return (
            f"{place}: {self.field}: {self.message}" if self.field else f"{place}: {self.message}"
        )


class FlowSpecError(ConfigError):
    """A spec that is not a valid flow; ``problems`` says each thing wrong, by line (the
    first :data:`MAX_PROBLEMS`; ``more`` counts the rest)."""

    def __init__(self, where: str, problems: Sequence[Problem]) -> None:
        self.where = where
        self.problems = tuple(problems[:MAX_PROBLEMS])
        self.more = max(0, len(problems) - MAX_PROBLEMS)
        said = "\n".join(f"  {p.shown(where)}" for p in self.problems)
        rest = f"\n  ... and {self.more} more" if self.more else ""
        super().__init__(f"{where} is not a valid flow spec:\n{said}{rest}")


class Lines:
    """Where each value of the document stands: its path -> its line."""

    def __init__(self) -> None:
        self._at: dict[Path_, int] = {}

    def put(self, path: Path_, line: int) -> None:
        self._at[path] = line

    def of(self, path: Iterable[str | int]) -> int:
        """The line of ``path``, else of the nearest enclosing value that has one."""
        parts = tuple(path)
        while parts:
            if parts in self._at:
                return self._at[parts]
            parts = parts[:-1]
        return self._at.get((), 0)


def field_name(path: Iterable[str | int]) -> str:
    """``("states", 1, "waits")`` -> ``states[1].waits``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


@cache
def schema() -> dict[str, Any]:
    """The published JSON Schema of a flow spec."""
    text = resources.files(__package__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def parse(text: str) -> tuple[Any, Lines]:
    """The YAML document and where each of its values stands; FlowSpecError (without a
    place name yet) for what is not plain YAML data."""
    try:
        node = yaml.compose(text, Loader=_Loader)
    except RecursionError:
        raise _Refused([Problem(0, "", f"nested deeper than {MAX_DEPTH} levels")]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else 0
        reason = getattr(exc, "problem", None) or str(exc)
        raise _Refused([Problem(line, "", f"not YAML: {reason}")]) from exc
    lines = Lines()
    if node is None:
        return None, lines
    return _Builder(lines).value(node, ()), lines


class _Loader(yaml.SafeLoader):
    """The safe loader, marking each node written with a tag of its own (``!!int 5``)."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        node: yaml.Node | None = super().compose_node(parent, index)
        if getattr(event, "tag", None) not in (None, "!") and node is not None:
            node.tagged = True  # type: ignore[attr-defined]
        return node


class _Refused(Exception):
    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(problems)
        self.problems = problems


class _Builder:
    """Plain data from YAML nodes: mappings with string keys, sequences, scalars as the safe
    loader types them. Anchors, aliases and tags are refused: a spec is read by people, and
    an alias can make a small file expand without end."""

    def __init__(self, lines: Lines) -> None:
        self.lines = lines
        self.scalars = yaml.SafeLoader("")
        self.seen: set[int] = set()

    def value(self, node: yaml.Node, path: Path_) -> Any:
        if len(path) > MAX_DEPTH:
            deep = f"nested deeper than {MAX_DEPTH} levels"
            raise _Refused([Problem(self.lines.of(path), field_name(path), deep)])
        if id(node) in self.seen:  # an alias: the node of its anchor, met again
            at = self.lines.of(path)  # the line of its key (the node's is the anchor's)
            raise _Refused([Problem(at, field_name(path), "anchors and aliases are not allowed")])
        self.seen.add(id(node))
        line = node.start_mark.line + 1
        self.lines.put(path, line)
        if getattr(node, "tagged", False) or (
            isinstance(node, yaml.CollectionNode) and node.tag not in _COLLECTIONS
        ):
            where = field_name(path)
            raise _Refused([Problem(line, where, f"the tag {node.tag} is not allowed: plain data")])
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.value(item, (*path, i)) for i, item in enumerate(node.value)]
        return self._scalar(node, path, line)

    def _scalar(self, node: yaml.Node, path: Path_, line: int) -> Any:
        """Text, a decimal integer, a decimal number, true/false or null, as YAML 1.2's core
        schema reads a plain scalar; other forms of YAML 1.1 (010, 0x1f, 1:00, 1_000, yes,
        on, dates) stay text, and an explicit tag (``!!int``, ``!!python/...``) is refused."""
        value = str(node.value)
        plain = getattr(node, "style", None) is None
        implicit = self.scalars.resolve(  # type: ignore[no-untyped-call]
            yaml.ScalarNode, value, (plain, not plain)
        )
        if node.tag != implicit:
            where = field_name(path)
            raise _Refused([Problem(line, where, f"the tag {node.tag} is not allowed: plain data")])
        if not plain:
            return value
        kind = node.tag.rpartition(":")[2]
        if kind == "int" and _INT.fullmatch(value):
            return int(value)
        if kind == "float" and _FLOAT.fullmatch(value):
            return float(value)
        if kind == "bool" and value.lower() in _BOOLS:
            return value.lower() == "true"
        if kind == "null":
            return None
        return value

    def _mapping(self, node: yaml.MappingNode, path: Path_) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str):
                where = field_name(path)
                raise _Refused([Problem(line, where, "a key is plain text, not a list or mapping")])
            if key == "<<":
                raise _Refused([Problem(line, field_name(path), "merge keys (<<) are not allowed")])
            if key in found:
                where = field_name((*path, key))
                raise _Refused([Problem(line, where, "given twice (a key is given once)")])
            self.lines.put((*path, key), line)
            found[key] = self.value(value_node, (*path, key))
            self.lines.put((*path, key), line)  # the key's line, where the field is named
        return found


def load_flow(text: str, where: str) -> tuple[FlowSpec, Lines]:
    """The flow spec in ``text`` (read from ``where``) and its lines; FlowSpecError names
    every problem by line and field."""
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise FlowSpecError(where, [Problem(0, "", f"not UTF-8 text: {exc.reason}")]) from None
    if size > MAX_BYTES:
        raise FlowSpecError(where, [Problem(0, "", f"larger than {MAX_BYTES} bytes")])
    try:
        document, lines = parse(text)
    except _Refused as refused:
        raise FlowSpecError(where, refused.problems) from None
    problems = list(_schema_problems(document, lines))
    try:
        spec = FlowSpec.model_validate(document)
    except ValidationError as exc:
        # what the schema cannot say (templates, regular expressions) is told beside what
        # it can; the rest the schema has told already, in its own words
        problems += _model_problems(exc, lines, told=bool(problems))
    if problems:
        raise FlowSpecError(where, sorted(set(problems), key=lambda p: (p.line, p.field)))
    return spec, lines


def _schema_problems(document: Any, lines: Lines) -> Iterator[Problem]:
    validator = jsonschema.Draft202012Validator(schema())
    first = itertools.islice(validator.iter_errors(document), MAX_PROBLEMS * 4)
    errors = sorted(first, key=lambda e: (lines.of(e.absolute_path),))
    for error in errors:
        yield from _explained(error, lines)


def _explained(error: jsonschema.ValidationError, lines: Lines) -> Iterator[Problem]:
    """One problem per error, an ``anyOf`` (an action, a memory write) told by the branch
    the object meant (the one whose key it has), else by what it may be."""
    path = tuple(error.absolute_path)
    if error.validator == "anyOf" and error.context:
        meant = _meant(error)
        if meant:
            for inner in meant:
                yield from _explained(inner, lines)
            return
        yield Problem(lines.of(path), field_name(path), _not_one_of(error))
        return
    if error.validator == "required" and isinstance(error.instance, dict):
        for key in _value(error):
            if key not in error.instance:
                yield Problem(lines.of(path), field_name((*path, key)), "required, and missing")
        return
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(_schema_of(error).get("properties", {}))
        for key in sorted(set(error.instance) - allowed):
            where = (*path, key)
            known = ", ".join(sorted(allowed))
            yield Problem(lines.of(where), field_name(where), f"unknown field (known: {known})")
        return
    yield Problem(lines.of(path), field_name(path), _message(error))


def _meant(error: jsonschema.ValidationError) -> list[jsonschema.ValidationError]:
    """The errors of the one branch the instance meant: none of its errors says the
    instance itself lacks a required key or has one too many."""
    by_branch: dict[int, list[jsonschema.ValidationError]] = {}
    for inner in error.context or ():
        by_branch.setdefault(int(inner.schema_path[0]), []).append(inner)
    meant = [
        errors
        for errors in by_branch.values()
        if not any(
            e.validator in ("required", "additionalProperties", "type") and not e.path
            for e in errors
        )
    ]
    return meant[0] if len(meant) == 1 else []


def _not_one_of(error: jsonschema.ValidationError) -> str:
    """What a value that is none of an ``anyOf``'s forms must be: for objects told apart by
    their one key (actions, memory writes), which keys those are and which it has."""
    keys = [_resolve(b).get("required") or [] for b in _value(error)]
    if all(len(k) == 1 for k in keys) and isinstance(error.instance, dict):
        allowed = ", ".join(k[0] for k in keys)
        has = ", ".join(map(str, error.instance)) or "none"
        return f"an object with exactly one of {allowed} (it has: {has})"
    return f"must be {_choices(error)}"


def _choices(error: jsonschema.ValidationError) -> str:
    said = []
    for branch in _value(error):
        resolved = _resolve(branch)
        required = resolved.get("required") or []
        if resolved.get("type") == "object" and required:
            said.append("an object with " + " and ".join(required))
        elif "type" in resolved:
            said.append(f"a {resolved['type']}")
    return " or ".join(dict.fromkeys(said)) or "one of the forms the schema allows"


def _resolve(branch: dict[str, Any]) -> dict[str, Any]:
    ref = branch.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        resolved: dict[str, Any] = schema()["$defs"][ref.removeprefix("#/$defs/")]
        return resolved
    return branch


def _message(error: jsonschema.ValidationError) -> str:
    """jsonschema's message, without repeating a long instance."""
    if error.validator == "pattern":
        said = f"{error.instance!r} does not match {_value(error)}"
        described = _schema_of(error).get("description")
        return f"{said} ({described})" if described else said
    if error.validator == "type":
        return f"{_short(error.instance)} is not {_a(_value(error))}"
    return str(error.message)


def _a(kind: Any) -> str:
    kinds = kind if isinstance(kind, list) else [kind]
    return " or ".join(f"an {k}" if str(k)[0] in "aeiou" else f"a {k}" for k in kinds)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHORT else text[: _SHORT - 3] + "..."


def _value(error: jsonschema.ValidationError) -> Any:
    """What the failed keyword said (``required``: the keys; ``anyOf``: the branches)."""
    return error.validator_value


def _schema_of(error: jsonschema.ValidationError) -> Mapping[str, Any]:
    return error.schema if isinstance(error.schema, Mapping) else {}


def _model_problems(exc: ValidationError, lines: Lines, *, told: bool) -> list[Problem]:
    """The models' own checks (``value_error``: a template, a regular expression); the
    rest only when the schema ``told`` nothing (an action's other union branches would
    each say it is not them)."""
    errors = exc.errors(include_url=False)
    values = [e for e in errors if e["type"] == "value_error"]
    problems = []
    for error in values or ([] if told else errors):
        path = tuple(p for p in error["loc"] if isinstance(p, str | int))
        path = _document_path(path)
        message = str(error["msg"]).removeprefix("Value error, ")
        problems.append(Problem(lines.of(path), field_name(path), message))
    return problems


def _document_path(loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """A pydantic location as a document path: union branch names (``CallAction``,
    ``SymbolWrite``) are not keys of the document; ``source`` is written ``from``."""
    return tuple(
        "from" if part == "source" else part
        for part in loc
        if not (isinstance(part, str) and part[:1].isupper())
    )

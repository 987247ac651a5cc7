"""A flow spec file is read safely and checked against the published JSON Schema; each
problem names its line and field."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from hermesbus.processors.flow import (
    SCHEMA_FILE,
    FlowSpecError,
    duration_ms,
    generated_schema,
    load_flow,
    placeholders,
    schema,
)

from .specs import CONTRACT, changed, line_of


def problems(text: str) -> list[str]:
    with pytest.raises(FlowSpecError) as refused:
        load_flow(text, "f.yaml")
    return [p.shown("f.yaml") for p in refused.value.problems]


def test_a_valid_spec_is_read_into_its_models() -> None:
    spec, lines = load_flow(CONTRACT, "f.yaml")
    assert (spec.flow, spec.version, spec.start) == ("contract_lookup", 1, "ask")
    assert [s.id for s in spec.states] == ["ask", "look", "ended"]
    assert spec.states[0].waits[0].after == "5m" and duration_ms("5m") == 300_000
    assert spec.transitions[0].source == "ask" and spec.transitions[0].on == "lookup"
    assert lines.of(("states", 1, "timeout_ms")) == line_of(CONTRACT, "timeout_ms: 8000")


def test_the_published_schema_is_the_one_the_models_make() -> None:
    """``flow.schema.json`` is current: ``python -m hermesbus.processors.flow`` rewrites it."""
    published = json.loads(
        (Path(__file__).parents[4] / "processors" / "flow" / SCHEMA_FILE).read_text()
    )
    assert published == generated_schema() == schema()
    jsonschema.Draft202012Validator.check_schema(published)


def test_every_problem_is_named_by_its_line_and_field() -> None:
    bad = changed(CONTRACT, "version: 1", "version: 0")
    bad = changed(bad, "after: 5m", "after: 5 minutes")
    bad = changed(bad, "    timeout_ms: 8000", "    timeout_ms: 8000\n    colour: red")
    found = problems(bad)
    assert found == [
        "f.yaml:2: version: 0 is less than the minimum of 1",
        f"f.yaml:{line_of(bad, 'after: 5')}: states[0].waits[0].after: '5 minutes' does not "
        "match ^[1-9][0-9]{0,8}(ms|s|m|h)$ (A number and ms, s, m or h: 30s, 5m.)",
        f"f.yaml:{line_of(bad, 'colour')}: states[1].colour: unknown field (known: agent, confirm, "
        "exit, failure, id, kind, name, on_enter, on_timeout, on_turn, preload, snapshot, summary, "
        "timeout_ms, waits)",
    ]


def test_an_unknown_action_says_which_actions_there_are() -> None:
    bad = changed(
        CONTRACT,
        '      - reply:\n          text: "请告诉我',
        '      - rply:\n          text: "请告诉我',
    )
    (found,) = problems(bad)
    assert found == (
        f"f.yaml:{line_of(bad, 'rply')}: states[0].on_enter[0]: an object with exactly one of "
        "call, parallel, reply, remember, hook, decide, set, pin, arm, disarm, carry, fail (it "
        "has: rply)"
    )


def test_an_action_of_a_known_kind_is_told_by_its_own_fields() -> None:
    bad = changed(CONTRACT, 'text: "请告诉我合同号"', "text: 5")
    assert problems(bad) == [
        f"f.yaml:{line_of(bad, 'text: 5')}: states[0].on_enter[0].reply.text: 5 is not a string"
    ]


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("{os.environ}", "{os.environ} is not {root.path} with a root of"),
        ("{user.__class__.__mro__}", "is not {root.path}"),
        ("{0}", "{0} is not {root.path}"),
        ("{user.id!r}", "is not {root.path}"),
        ("a { b", "a lone '{'"),
    ],
)
def test_templates_only_read_values_of_the_context(template: str, why: str) -> None:
    bad = changed(CONTRACT, '"查询合同 {entities.contract_no}"', json.dumps(template))
    (found,) = problems(bad)
    assert found.startswith(f"f.yaml:{line_of(bad, 'summary')}: states[1].summary: ")
    assert why in found


def test_placeholders_and_braces() -> None:
    assert placeholders("{{x}} {user.id} and {results.t.a_b}") == ["user.id", "results.t.a_b"]


def test_a_regular_expression_that_does_not_compile_is_named() -> None:
    bad = changed(CONTRACT, '"(C-[0-9]{4})"', '"(C-[0-9"')
    (found,) = problems(bad)
    assert found.startswith(f"f.yaml:{line_of(bad, 'pattern')}: intents[0].entities[0].pattern:")
    assert "not a regular expression" in found


def test_yes_no_on_and_off_are_words_not_booleans() -> None:
    """YAML 1.1 reads ``on:`` and ``answers: [yes]`` as booleans; a flow means the words."""
    spec, _ = load_flow(changed(CONTRACT, 'phrases: ["取消", "cancel"]', "phrases: [no, off]"), "f")
    assert spec.intents[1].phrases == ["no", "off"]
    assert spec.transitions[0].on == "lookup"


def test_anchors_aliases_and_tags_are_refused() -> None:
    alias = changed(CONTRACT, 'phrases: ["取消", "cancel"]', "phrases: &p [x]\n    patterns: *p")
    assert problems(alias) == [
        f"f.yaml:{line_of(alias, 'patterns')}: intents[1].patterns: anchors and aliases are "
        "not allowed"
    ]
    tagged = changed(CONTRACT, "title: 合同查询", "title: !!python/name:os.system")
    assert problems(tagged) == [
        "f.yaml:3: title: the tag tag:yaml.org,2002:python/name:os.system is not allowed: "
        "plain data"
    ]
    applied = changed(CONTRACT, "title: 合同查询", "title: !!python/object/apply:os.system [ls]")
    assert problems(applied) == [
        "f.yaml:3: title: the tag tag:yaml.org,2002:python/object/apply:os.system is not allowed:"
        " plain data"
    ]


def test_a_key_given_twice_and_text_that_is_not_yaml() -> None:
    twice = changed(CONTRACT, "version: 1", "version: 1\nversion: 2")
    assert problems(twice) == ["f.yaml:3: version: given twice (a key is given once)"]
    (found,) = problems("flow: [unclosed\n")
    assert found.startswith("f.yaml:2: not YAML: ")


def test_a_document_that_is_no_mapping() -> None:
    assert problems("- a\n- b\n") == ["f.yaml:1: ['a', 'b'] is not an object"]
    assert problems("") == ["f.yaml: None is not an object"]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (("version: 1", "version: 010"), "version: '010' is not an integer"),
        (("version: 1", "version: 1:00"), "version: '1:00' is not an integer"),
        (("version: 1", "version: 0x1f"), "version: '0x1f' is not an integer"),
        (("version: 1", "version: " + "9" * 5000), "is not an integer"),
        (("version: 1", "version: !!int abc"), "version: the tag tag:yaml.org,2002:int is not"),
        (("title: 合同查询", "title: !!str 合同"), "title: the tag tag:yaml.org,2002:str is not"),
        (('"(C-[0-9]{4})"', '"a{99999999999}"'), "is not a regular expression"),
    ],
)
def test_yaml_1_1_forms_explicit_tags_and_huge_values_are_clear_problems(
    change: tuple[str, str], said: str
) -> None:
    (found,) = problems(changed(CONTRACT, *change))
    assert said in found


def test_nesting_too_deep_is_a_problem_not_a_crash() -> None:
    (deep,) = problems("flow: " + "[" * 2000 + "]" * 2000 + "\n")
    assert deep == "f.yaml: nested deeper than 32 levels"
    nested = changed(CONTRACT, 'user: "{user.id}"', "user: " + "{a: " * 40 + "1" + "}" * 40)
    (found,) = problems(nested)
    assert found.endswith(": nested deeper than 32 levels")


def test_text_that_is_not_utf8_and_too_many_problems() -> None:
    assert problems("flow: \ud800\n") == ["f.yaml: not UTF-8 text: surrogates not allowed"]
    many = "flow: x\nversion: 1\nstart: a\nstates:\n" + "  - {bogus: 1}\n" * 300
    with pytest.raises(FlowSpecError) as refused:
        load_flow(many, "f.yaml")
    assert len(refused.value.problems) == 50 and refused.value.more > 0
    assert str(refused.value).endswith(f"... and {refused.value.more} more")


def test_memory_writes_are_told_apart_by_their_key() -> None:
    spec, _ = load_flow(
        changed(
            CONTRACT,
            '      - reply:\n          text: "请告诉我合同号"\n',
            "      - remember: {preference: {name: city, value: '{entities.city}'}}\n"
            "      - remember: {symbol: {name: doc, value: '{entities.contract_no}', ttl_s: 60}}\n"
            "      - remember:\n          fact: {subject: '{user.id}', relation: OWNS,\n"
            "                 object: '{entities.contract_no}', verified_by: contract_tool}\n",
        ),
        "f.yaml",
    )
    kinds = [type(a.remember).__name__ for a in spec.states[0].on_enter]  # type: ignore[union-attr]
    assert kinds == ["RememberPreference", "RememberSymbol", "RememberFact"]


def test_a_bad_template_in_a_fact_or_an_argument_names_its_field() -> None:
    fact = changed(
        CONTRACT,
        '      - reply:\n          text: "请告诉我合同号"\n',
        "      - remember:\n          fact:\n            subject: '{user.id}'\n"
        "            relation: OWNS\n            object: '{bad}'\n"
        "            verified_by: contract_tool\n",
    )
    assert problems(fact) == [
        f"f.yaml:{line_of(fact, 'object:')}: states[0].on_enter[0].remember.fact.object: {{bad}} "
        "is not {root.path} with a root of attachments, context, entities, facts, failure, "
        "hooks, intent, memory, results, session, symbols, turn, user"
    ]
    args = changed(CONTRACT, 'user: "{user.id}"', 'user: ["{user.id}", {deep: "{nope}"}]')
    (found,) = problems(args)
    assert "states[1].on_enter[0].call.args: user[1].deep: {nope} is not {root.path}" in found


def test_a_move_names_where_it_goes_or_what_it_does() -> None:
    empty = changed(CONTRACT, "{from: look, on: done, to: ended}", "{from: look, on: done}")
    assert problems(empty) == [
        f"f.yaml:{line_of(empty, '{from: look, on: done}')}: transitions[3]: a move names the "
        "state it enters (to:) or what it does (do:)"
    ]


def test_an_answer_that_is_only_punctuation_is_refused() -> None:
    empty = changed(CONTRACT, '    phrases: ["取消", "cancel"]', '    answers: ["。"]')
    assert problems(empty) == [
        f"f.yaml:{line_of(empty, 'answers:')}: intents[1].answers: answer '。' is only "
        "punctuation: it would match anything"
    ]

"""The lint: what a schema cannot check about a flow's machine, each finding by line."""

from __future__ import annotations

from hermesbus.processors.flow import Finding, lint, load_flow, tools_of
from hermesbus.processors.tool import DEMO_MODULES

from .specs import CONTRACT, changed, line_of

MODULES = (DEMO_MODULES,)


def said(text: str, marker: str, finding: str, severity: str = "error") -> str:
    """A finding as the lint words it, on the line of ``text`` that holds ``marker``."""
    return f"{severity}: f.yaml:{line_of(text, marker)}: {finding}"


def findings(text: str, registered: set[str] | None = None) -> list[str]:
    spec, lines = load_flow(text, "f.yaml")
    found: list[Finding] = lint(spec, lines, modules=MODULES, registered=registered)
    return [f.shown("f.yaml") for f in found]


def test_a_sound_flow_has_no_finding() -> None:
    assert findings(CONTRACT, registered={"contract_tool"}) == []
    assert findings(CONTRACT) == []  # tools not known: not checked


def test_tools_not_registered_are_named_where_they_are_called() -> None:
    assert findings(CONTRACT, registered=set()) == [
        f"error: f.yaml:{line_of(CONTRACT, 'tool: contract_tool')}: "
        "states[1].on_enter[0].call.tool: tool 'contract_tool' is not registered "
        "(hermesbus tools list)"
    ]
    spec, _ = load_flow(CONTRACT, "f")
    assert [tool for _, tool in tools_of(spec)] == ["contract_tool"]


def test_unreachable_states_and_states_with_no_way_out() -> None:
    lonely = CONTRACT + ("  - {from: island, on: lookup, to: ended}\n")
    lonely = changed(
        lonely,
        "  - id: ended\n",
        "  - id: island\n    name: 孤岛\n    exit: ended\n  - id: ended\n",
    )
    lonely = changed(lonely, "  - {from: look, on: done, to: ended}\n", "")
    at = line_of(lonely, "id: island")
    assert findings(lonely) == [
        f"error: f.yaml:{line_of(lonely, 'id: look')}: states[1]: state 'look' has no way out "
        "(no transition from it)",
        f"error: f.yaml:{at}: states[2]: state 'island' cannot be reached from 'ask'",
    ]


def test_unknown_states_triggers_and_exits() -> None:
    bad = changed(
        CONTRACT, "{from: ask, on: cancel, to: ended}", "{from: ask, on: cancle, to: end}"
    )
    bad = changed(bad, "    exit: ended\n    summary", "    exit: gone\n    summary")
    t = line_of(bad, "cancle")
    assert findings(bad) == [
        f"error: f.yaml:{line_of(bad, 'exit: gone')}: states[1].exit: exit 'gone' is not a state",
        f"error: f.yaml:{t}: transitions[2].on: 'cancle' never fires in 'ask' (there: any, cancel, "
        "done, invalid, lookup, no_answer)",
        f"error: f.yaml:{t}: transitions[2].to: to 'end': not a state",
    ]


def test_waits_with_no_text_and_no_transition() -> None:
    bad = changed(CONTRACT, '        text: "还在吗？"\n', "")
    bad = changed(bad, "  - {from: ask, on: no_answer, to: ended}\n", "")
    wait = line_of(bad, "- id: ask_wait")
    assert findings(bad) == [
        f"error: f.yaml:{wait}: states[0].waits[0]: wait 'ask_wait' has no text: the user is "
        "told nothing",
        f"error: f.yaml:{line_of(bad, 'trigger: no_answer')}: states[0].waits[0].trigger: "
        "'no_answer' has no transition from 'ask'",
    ]


def test_every_state_but_a_terminal_one_has_an_exception_exit() -> None:
    bad = changed(CONTRACT, "    name: 询问合同号\n    exit: ended\n", "    name: 询问合同号\n")
    assert findings(bad) == [
        said(bad, "id: ask", "states[0]: state 'ask' has no exception exit (exit:)")
    ]


def test_the_failure_trigger_is_the_exit_not_a_transition() -> None:
    bad = CONTRACT + "  - {from: look, on: failed, to: ask}\n"
    exit_ = "transitions[4].on: 'failed' leads to the state's exit: set exit: instead"
    assert findings(bad) == [said(bad, "on: failed", exit_)]


def test_nothing_leaves_a_terminal_state_and_one_must_exist() -> None:
    bad = CONTRACT + "  - {from: ended, on: lookup, to: ask}\n"
    assert findings(bad) == [
        said(bad, "{from: ended", "transitions[4].from: 'ended' is terminal: nothing leaves it")
    ]
    none = changed(CONTRACT, "    kind: terminal\n", "    exit: ended\n")
    assert (
        f"error: f.yaml:{line_of(none, 'states:')}: states: no terminal state: no session can end"
        in findings(none)
    )


def test_the_same_move_twice_is_ambiguous() -> None:
    move = "{from: look, on: done, to: ask}"
    twice = "transitions[4]: the same move as transitions[3]: which one is taken?"
    assert findings(CONTRACT + f"  - {move}\n") == [said(CONTRACT + f"  - {move}\n", move, twice)]


def test_confirmation_states_say_what_passes_them() -> None:
    bad = changed(
        CONTRACT, "    timeout_ms: 8000\n", "    timeout_ms: 8000\n    kind: confirmation\n"
    )
    assert findings(bad) == [
        said(bad, "id: look", "states[1]: a confirmation state says what passes it (confirm:)")
    ]
    ok = changed(
        bad,
        "    kind: confirmation\n",
        "    kind: confirmation\n    confirm: {buttons: [确认], answers: [确认, 是, ok, yes]}\n",
    )
    ok = changed(ok, "{from: look, on: done, to: ended}", "{from: look, on: confirmed, to: ended}")
    assert findings(ok) == []
    spec, _ = load_flow(ok, "f")
    assert spec.states[1].confirm is not None and spec.states[1].confirm.answers[-1] == "yes"


def test_a_summary_says_at_most_fifty_characters_of_its_own() -> None:
    bad = changed(CONTRACT, '"查询合同 {entities.contract_no}"', '"' + "长" * 51 + '"')
    assert findings(bad) == [
        said(bad, "summary", "states[1].summary: its fixed text is over 50 characters")
    ]


def test_hooks_come_from_allowed_modules_and_are_declared() -> None:
    hooked = changed(
        CONTRACT,
        "start: ask\n",
        "start: ask\nhooks:\n  known: hermesbus.processors.tool.demo.tools:nothing\n"
        "  shell: os:system\n  hidden: hermesbus.processors.tool.demo._x:y\n"
        "  gone: hermesbus.processors.tool.demo.nowhere:f\n",
    )
    hooked = changed(
        hooked,
        "{from: look, on: done, to: ended}",
        "{from: look, on: done, to: ended, when: unknown}",
    )
    assert findings(hooked) == [
        f"error: f.yaml:{line_of(hooked, '  shell:')}: hooks.shell: module 'os' is not on "
        f"HERMES_TOOL_MODULES ({DEMO_MODULES})",
        f"error: f.yaml:{line_of(hooked, '  hidden:')}: hooks.hidden: "
        "'hermesbus.processors.tool.demo._x:y' names the private '_x'",
        f"error: f.yaml:{line_of(hooked, '  gone:')}: hooks.gone: module "
        "'hermesbus.processors.tool.demo.nowhere' cannot be found",
        f"error: f.yaml:{line_of(hooked, 'when: unknown')}: transitions[3].when: hook 'unknown' is "
        "not declared under hooks: (gone, hidden, known, shell)",
    ]


def test_a_parallel_budget_over_the_state_timeout_is_a_warning() -> None:
    call = (
        "      - call:\n          tool: contract_tool\n"
        '          args: {number: "{entities.contract_no}", user: "{user.id}"}\n'
    )
    parallel = (
        "      - parallel:\n          budget_ms: 9000\n          calls:\n"
        "            - {tool: a_tool}\n            - {tool: b_tool}\n"
    )
    bad = changed(CONTRACT, call, parallel)
    bad = changed(
        bad, "{results.contract_tool.number}：{results.contract_tool.status}", "{results.a_tool.n}"
    )
    over = "over the state's timeout_ms (8000): the dispatcher ends the cycle first"
    where = "states[1].on_enter[0].parallel.budget_ms"
    assert findings(bad) == [said(bad, "budget_ms", f"{where}: {over}", "warning")]


def test_a_terminal_state_has_no_exit_and_every_state_can_end() -> None:
    bad = changed(CONTRACT, "    kind: terminal\n", "    kind: terminal\n    exit: ask\n")
    assert findings(bad) == [
        said(
            bad,
            "exit: ask",
            "states[2].exit: a terminal state has no exception exit: nothing fails there",
        )
    ]
    trap = changed(CONTRACT, "{from: look, on: done, to: ended}", "{from: look, on: done, to: ask}")
    trap = changed(
        trap, "{from: ask, on: no_answer, to: ended}", "{from: ask, on: no_answer, to: look}"
    )
    trap = changed(trap, "{from: ask, on: cancel, to: ended}", "{from: ask, on: cancel, to: look}")
    trap = trap.replace("    exit: ended\n", "    exit: look\n")
    found = findings(trap)
    ask, ended = line_of(trap, "id: ask"), line_of(trap, "id: ended")
    never = "no terminal state can be reached from 'ask': a session there never ends"
    assert f"error: f.yaml:{ask}: states[0]: {never}" in found
    assert f"error: f.yaml:{ended}: states[2]: state 'ended' cannot be reached from 'ask'" in found


def test_the_engines_own_triggers_are_not_a_waits_or_a_confirmations() -> None:
    bad = changed(CONTRACT, "trigger: no_answer", "trigger: failed")
    bad = changed(bad, "  - {from: ask, on: no_answer, to: ended}\n", "")
    assert findings(bad) == [
        said(
            bad,
            "trigger: failed",
            "states[0].waits[0].trigger: 'failed' "
            "is a trigger of the engine's own: name this one otherwise",
        )
    ]


def test_an_entity_declared_twice() -> None:
    bad = changed(
        CONTRACT,
        '        pattern: "(C-[0-9]{4})"\n',
        '        pattern: "(C-[0-9]{4})"\n      - {name: contract_no, builtin: number}\n',
    )
    assert findings(bad) == [
        said(
            bad,
            "builtin: number",
            "intents[0].entities[1].name: entity 'contract_no' is declared twice",
        )
    ]


def test_exits_that_lead_back_to_themselves_are_refused() -> None:
    own = changed(CONTRACT, "    exit: ended\n    summary", "    exit: look\n    summary")
    assert said(own, "exit: look", "states[1].exit: exits go round in a circle (look -> look)") in (
        findings(own)
    )
    both = changed(
        own,
        "    exit: ended\n    on_enter:\n      - reply",
        "    exit: look\n    on_enter:\n      - reply",
    )
    both = changed(both, "    exit: look\n    summary", "    exit: ask\n    summary")
    found = findings(both)
    assert (
        said(both, "exit: look", "states[0].exit: exits go round in a circle (ask -> look -> ask)")
        in found
    )
    assert (
        said(both, "exit: ask", "states[1].exit: exits go round in a circle (look -> ask -> look)")
        in found
    )


def test_a_parallel_group_calls_each_tool_once() -> None:
    group = changed(
        CONTRACT,
        "      - call:\n          tool: contract_tool\n",
        "      - parallel:\n          budget_ms: 5000\n          calls:\n"
        "            - {tool: contract_tool, into: first}\n"
        "            - {tool: contract_tool, into: second}\n"
        "      - call:\n          tool: contract_tool\n",
    )
    assert said(
        group,
        "into: second",
        "states[1].on_enter[0].parallel.calls[1].tool: 'contract_tool' twice in one group: "
        "one call per tool a cycle",
    ) in findings(group)


CONFIRMING = """\
flow: confirm_demo
version: 1
start: confirm
intents:
  - name: confirmed
    phrases: ["确认"]
states:
  - id: confirm
    name: 确认
    kind: confirmation
    exit: done_state
    confirm: {buttons: ["确认"], trigger: confirmed}
    waits:
      - {id: w, after: 5m, trigger: confirmed, text: 还在吗}
  - {id: done_state, name: 完成, kind: terminal}
transitions:
  - {from: confirm, on: confirmed, to: done_state}
"""


def test_no_intent_and_no_wait_may_fire_a_confirmation_trigger() -> None:
    found = findings(CONFIRMING)
    assert (
        said(
            CONFIRMING,
            "- name: confirmed",
            "intents[0].name: intent 'confirmed' is the confirmation trigger of 'confirm': "
            "a phrase would confirm",
        )
        in found
    )
    assert (
        said(
            CONFIRMING,
            "trigger: confirmed, text",
            "states[0].waits[0].trigger: 'confirmed' is the confirmation trigger of "
            "'confirm': time would confirm",
        )
        in found
    )


def test_an_intent_named_like_a_trigger_of_the_engine_is_refused() -> None:
    named = changed(CONTRACT, "  - name: cancel\n", "  - name: invalid\n")
    named = named.replace("on: cancel,", "on: invalid,")
    assert said(
        named,
        "- name: invalid",
        "intents[1].name: 'invalid' is a trigger of the engine's own: name this one otherwise",
    ) in findings(named)


DECIDING = changed(
    CONTRACT,
    '      - reply:\n          text: "合同 {results',
    "      - decide: {hook: status, moves: [lapsed, done, confirmed, nowhere]}\n"
    '      - reply:\n          text: "合同 {results',
)
DECIDING = changed(
    DECIDING, "states:\n", "hooks:\n  status: hermesbus.processors.tool.demo:x\nstates:\n"
)
DECIDING = changed(
    DECIDING,
    "  - {from: look, on: done, to: ended}\n",
    "  - {from: look, on: done, to: ended}\n  - {from: look, on: lapsed, to: ended}\n",
)


def test_a_hooks_decision_is_a_move_of_its_state_never_an_engine_or_confirmation_trigger() -> None:
    spec = changed(DECIDING, "    name: 查询\n", "    name: 查询\n    kind: confirmation\n")
    spec = changed(
        spec, "    timeout_ms: 8000\n", "    timeout_ms: 8000\n    confirm: {buttons: [好]}\n"
    )
    at = line_of(spec, "decide:")
    assert [f for f in findings(spec) if f"f.yaml:{at}:" in f] == [
        said(
            spec,
            "decide:",
            "states[1].on_enter[1].decide.moves[1]: 'done' is a trigger of "
            "the engine's own: name this one otherwise",
        ),
        said(
            spec,
            "decide:",
            "states[1].on_enter[1].decide.moves[2]: 'confirmed' is the "
            "confirmation trigger of 'look': a hook would confirm",
        ),
        said(
            spec,
            "decide:",
            "states[1].on_enter[1].decide.moves[3]: 'nowhere' has no transition from 'look'",
        ),
    ]


def test_a_decided_move_fires_and_a_terminal_state_decides_nothing() -> None:
    sound = changed(DECIDING, "[lapsed, done, confirmed, nowhere]", "[lapsed]")
    assert findings(sound) == []  # lapsed fires: the hook names it
    undeclared = changed(sound, "{hook: status,", "{hook: state,")
    assert findings(undeclared) == [
        said(
            undeclared,
            "decide:",
            "states[1].on_enter[1].decide.hook: hook 'state' is not declared under hooks: (status)",
        )
    ]
    terminal = changed(
        sound,
        "    kind: terminal\n",
        "    kind: terminal\n    on_enter:\n      - decide: {hook: status, moves: [lapsed]}\n",
    )
    assert [f for f in findings(terminal) if "terminal" in f] == [
        f"error: f.yaml:{line_of(terminal, 'kind: terminal') + 2}: states[2].on_enter[0].decide: "
        "nothing leaves a terminal state"
    ]


def test_a_move_that_stays_is_no_way_out_and_does_only_what_is_done_at_once() -> None:
    stays = changed(
        CONTRACT,
        "  - {from: look, on: done, to: ended}\n",
        "  - from: look\n    on: done\n    do:\n      - hook: {name: nowhere}\n"
        "      - remember: {fact: {subject: a, relation: R, object: b, verified_by: t}}\n",
    )
    assert findings(stays) == [
        said(stays, "id: look", "states[1]: state 'look' has no way out (no transition from it)"),
        said(
            stays,
            "hook: {name: nowhere}",
            "transitions[3].do[0].hook.name: hook 'nowhere' is not declared under hooks: (none)",
        ),
        said(
            stays,
            "remember: {fact",
            "transitions[3].do[1].remember.fact: a fact waits for "
            "its verifying tool: remember it on entering a state",
        ),
    ]


def test_a_preference_is_kept_as_confirmed_only_on_the_users_answer() -> None:
    write = "{remember: {preference: {name: seat, value: a, confirmed: true}}}"
    entering = changed(
        CONTRACT,
        '      - reply:\n          text: "请告诉我',
        f'      - {write}\n      - reply:\n          text: "请告诉我',
    )
    on_time = changed(
        CONTRACT,
        "{from: ask, on: no_answer, to: ended}",
        f"{{from: ask, on: no_answer, to: ended, do: [{write}]}}",
    )
    on_a_phrase = changed(
        CONTRACT,
        "{from: ask, on: cancel, to: ended}",
        f"{{from: ask, on: cancel, to: ended, do: [{write}]}}",
    )
    on_an_answer = changed(
        on_a_phrase, '    phrases: ["取消", "cancel"]', '    answers: ["取消", "cancel"]'
    )
    why = (
        "a preference is kept only on the user's own yes: write it in the do: of a move on an "
        "intent with answers: (a whole short answer) or on a confirmation's trigger"
    )
    assert findings(entering) == [
        said(entering, write, f"states[0].on_enter[0].remember.preference.confirmed: {why}")
    ]
    assert findings(on_time) == [
        said(on_time, write, f"transitions[1].do[0].remember.preference.confirmed: {why}")
    ]
    assert findings(on_a_phrase) == [  # "不取消" holds the phrase too
        said(on_a_phrase, write, f"transitions[2].do[0].remember.preference.confirmed: {why}")
    ]
    assert findings(on_an_answer) == []


def test_a_parser_hook_is_declared() -> None:
    parsed = changed(CONTRACT, "start: ask\n", "start: ask\nparser: reads\n")
    assert findings(parsed) == [
        said(parsed, "parser: reads", "parser: hook 'reads' is not declared under hooks: (none)")
    ]


def test_a_decided_move_is_named_like_no_intent_or_wait_and_does_not_loop() -> None:
    sound = changed(DECIDING, "[lapsed, done, confirmed, nowhere]", "[lapsed]")
    named = changed(sound, "[lapsed]", "[lookup, no_answer_x]")
    named = changed(
        named,
        "  - {from: look, on: lapsed, to: ended}\n",
        "  - {from: look, on: lookup, to: ended}\n",
    )
    assert [f for f in findings(named) if "decide.moves" in f] == [
        said(
            named,
            "decide:",
            "states[1].on_enter[1].decide.moves[0]: 'lookup' is an intent: "
            "the user's words would take it too",
            "warning",
        ),
        said(
            named,
            "decide:",
            "states[1].on_enter[1].decide.moves[1]: 'no_answer_x' has no transition from 'look'",
        ),
    ]
    looping = changed(
        sound,
        "      - call:\n          tool: contract_tool\n",
        "      - call:\n          tool: contract_tool\n",
    )
    looping = changed(
        looping,
        "  - {from: look, on: lapsed, to: ended}\n",
        "  - {from: look, on: lapsed, to: look}\n",
    )
    assert [f for f in findings(looping) if "loop" in f] == []  # a call comes first
    first = changed(
        looping,
        "      - decide: {hook: status, moves: [lapsed]}\n",
        "",
    )
    first = changed(
        first,
        "    on_enter:\n      - call:",
        "    on_enter:\n      - decide: {hook: status, moves: [lapsed]}\n      - call:",
    )
    assert [f for f in findings(first) if "loop" in f] == [
        said(
            first,
            "decide:",
            "states[1].on_enter[0].decide.moves[0]: 'lapsed' leads back to "
            "'look', whose actions run and decide again with no call in between: a loop "
            "unless the hook then says null",
            "warning",
        )
    ]


def test_a_call_in_a_group_is_named_by_its_group() -> None:
    grouped = changed(
        CONTRACT,
        "      - call:\n          tool: contract_tool\n"
        '          args: {number: "{entities.contract_no}", user: "{user.id}"}\n',
        "      - parallel:\n          budget_ms: 5000\n          calls:\n"
        "            - {tool: contract_tool, task: lookup}\n            - {tool: org_tool}\n",
    )
    assert findings(grouped) == [
        said(
            grouped,
            "task: lookup",
            "states[1].on_enter[0].parallel.calls[0].task: a group is "
            "one cycle: name it on parallel: (task:)",
        )
    ]


def test_a_flow_begins_with_no_wait_to_arm() -> None:
    arming = changed(CONTRACT, "start: ask\n", "start: ask\nbegin: [{arm: ask_wait}]\n")
    assert findings(arming) == [
        said(arming, "begin:", "begin[0]: no state is entered yet: no wait to arm or disarm")
    ]

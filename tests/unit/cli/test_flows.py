"""``hermesbus flows check|schema`` as a user runs them: exit 0 for a sound flow, 1 with each
problem by line for a broken one, 2 for a file that is not there; nothing is created."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_process import clean_env, hermesbus
from tests.unit.processors.flow.specs import CONTRACT, changed, line_of


def _check(tmp_path: Path, text: str, *args: str) -> tuple[int, str, str]:
    spec = tmp_path / "flow.yaml"
    spec.write_text(text, encoding="utf-8")
    home = tmp_path / "home"
    ran = hermesbus("flows", "check", str(spec), *args, env=clean_env(home), cwd=tmp_path)
    assert not home.exists()  # checking reads no state into being
    return ran.code, ran.out, ran.err


def test_a_sound_flow_passes_without_its_tools_checked(tmp_path: Path) -> None:
    code, out, err = _check(tmp_path, CONTRACT, "--no-tools")
    assert (code, err) == (0, "")
    assert out == (
        f"{tmp_path / 'flow.yaml'}: flow contract_lookup version 1: 3 states, 4 transitions: "
        "ok (tools not checked against a registry)\n"
    )


def test_tools_are_checked_against_the_registry(tmp_path: Path) -> None:
    code, out, err = _check(tmp_path, CONTRACT)
    assert code == 1
    where = tmp_path / "flow.yaml"
    assert err == (
        f"error: {where}:{line_of(CONTRACT, 'tool: contract_tool')}: "
        "states[1].on_enter[0].call.tool: tool 'contract_tool' is not registered (hermesbus "
        "tools list)\n"
    )
    assert "3 states, 4 transitions: 1 error, 0 warnings" in out
    assert f"tools are checked against the registry at {tmp_path / 'home'}; --no-tools" in out


def test_a_broken_spec_names_each_problem_and_exits_1(tmp_path: Path) -> None:
    bad = changed(CONTRACT, "version: 1", "version: one")
    bad = changed(bad, "after: 5m", "after: soon")
    code, out, err = _check(tmp_path, bad, "--no-tools")
    where = tmp_path / "flow.yaml"
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f"error: {where}:2: version: 'one' is not an integer",
        f"error: {where}:{line_of(bad, 'after: soon')}: states[0].waits[0].after: 'soon' does "
        "not match ^[1-9][0-9]{0,8}(ms|s|m|h)$ (A number and ms, s, m or h: 30s, 5m.)",
        f"{where}: not a valid flow spec (2 problems)",
    ]
    assert "Traceback" not in err


def test_json_for_scripts(tmp_path: Path) -> None:
    code, out, _ = _check(tmp_path, CONTRACT, "--json")
    report = json.loads(out)
    assert code == 1 and report["valid"] is False and report["tools_checked"] is True
    assert report["states"] == ["ask", "look", "ended"]
    (problem,) = report["problems"]
    assert problem["line"] == line_of(CONTRACT, "tool: contract_tool")
    code, out, _ = _check(tmp_path, "flow: x\n", "--json")
    broken = json.loads(out)
    assert code == 1 and broken["valid"] is False
    assert [(p["field"], p["message"]) for p in broken["problems"]] == [
        ("flow", "'x' does not match ^[a-z][a-z0-9_]{1,39}$"),
        ("start", "required, and missing"),
        ("states", "required, and missing"),
        ("version", "required, and missing"),
    ]


def test_a_missing_file_is_a_bad_argument(tmp_path: Path) -> None:
    ran = hermesbus(
        "flows", "check", str(tmp_path / "nope.yaml"), env=clean_env(None), cwd=tmp_path
    )
    assert ran.code == 2 and "does not exist" in ran.err


def test_the_schema_is_printed_as_published(tmp_path: Path) -> None:
    from hermesbus.processors.flow import schema

    ran = hermesbus("flows", "schema", env=clean_env(None), cwd=tmp_path)
    assert ran.code == 0 and json.loads(ran.out) == schema()


def test_the_built_in_expense_spec_shows_without_a_broker(tmp_path: Path) -> None:
    """Nothing to read from a registry: its machine, its diagram, and the shipped file;
    any other flow still needs the registry, and says so."""
    from importlib import resources

    from hermesbus.processors.flow import EXPENSE_FILE

    home = tmp_path / "home"
    shown = hermesbus("flows", "show", "expense", env=clean_env(home), cwd=tmp_path)
    assert shown.code == 0, shown.output
    assert shown.out.startswith("expense version 1: 差旅报销\nbuilt in (")
    assert "no broker configured, so no registry was read" in shown.out
    assert "  ├─ wait_expired -> S4 (set, arm)\n" in shown.out
    source = hermesbus("flows", "show", "expense", "--source", env=clean_env(home), cwd=tmp_path)
    shipped = resources.files("hermesbus.processors.flow").joinpath(EXPENSE_FILE)
    assert source.out == shipped.read_text(encoding="utf-8")
    other = hermesbus("flows", "show", "parcel", env=clean_env(home), cwd=tmp_path)
    assert other.code == 1 and "no Kafka bootstrap" in other.err


def test_the_diagram_shows_moves_that_stay_and_what_moves_do() -> None:
    from hermesbus.cli._flows import diagram
    from hermesbus.processors.flow import load_flow

    text = changed(
        CONTRACT,
        "  - {from: ask, on: cancel, to: ended}\n",
        "  - {from: ask, on: cancel, to: ended, do: [{reply: {text: 再见}}]}\n"
        "  - {from: ask, on: no_answer, do: [{set: {nudged: yes}}], when: first}\n",
    )
    text = changed(text, "states:\n", "hooks: {first: hermesbus.processors.tool.demo:x}\nstates:\n")
    lines = diagram(load_flow(text, "f.yaml")[0])
    assert lines[:6] == [
        "ask [step] (start)",
        "  ├─ lookup -> look",
        "  ├─ no_answer -> ended",
        "  ├─ cancel -> ended (reply)",
        "  ├─ no_answer when first -> (stays) (set)",
        "  └─ failed -> ended (exception exit)",
    ]

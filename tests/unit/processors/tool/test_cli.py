"""``hermesbus tools register|list|health`` against a tmp HERMES_HOME."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from .conftest import ECHO_IN, ECHO_OUT, SAMPLES, run


def test_register_from_a_yaml_spec_then_list(home: Path) -> None:
    spec = {
        "name": "yaml_echo",
        "kind": "python",
        "target": f"{SAMPLES}:echo",
        "input_schema": ECHO_IN,
        "output_schema": ECHO_OUT,
        "health": f"{SAMPLES}:probe",
        "verifier": f"{SAMPLES}:verify",
        "fallback": {"strategy": "cache", "stale_after_s": 300},
    }
    path = home / "tool.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True))
    code, out = run("tools", "register", str(path))
    assert (code, out.strip()) == (0, "registered yaml_echo")
    assert (home / "tools.sqlite3").exists()
    code, out = run("tools", "list")
    assert code == 0
    assert "yaml_echo" in out and "python" in out and "cache" in out


def test_register_from_flags(home: Path) -> None:
    schemas = home / "schemas.json"
    schemas.write_text(json.dumps({"input": ECHO_IN, "output": ECHO_OUT}))
    mock = home / "mock.json"
    mock.write_text(json.dumps({"echo": "mocked"}))
    code, out = run(
        "tools", "register", "--name", "flag_echo", "--python", f"{SAMPLES}:echo",
        "--schema-file", str(schemas), "--verifier", f"{SAMPLES}:verify",
        "--health", f"{SAMPLES}:probe", "--fallback", "mock", "--mock-file", str(mock),
        "--sign-alg", "hmac-sha256", "--key-env", "SOME_KEY", "--timeout", "3",
    )  # fmt: skip
    assert (code, out.strip()) == (0, "registered flag_echo")
    code, out = run("tools", "list")
    assert "flag_echo" in out and "mock" in out and "hmac-sha256" in out and "3 s" in out


def test_a_refused_tool_exits_1_naming_what_is_missing(home: Path) -> None:
    code, out = run("tools", "register", "--name", "bare", "--python", f"{SAMPLES}:echo")
    assert code == 1
    assert "tool 'bare' refused" in out
    assert "no input schema" in out and "no verifier" in out and "no fallback strategy" in out
    schemas = home / "s.json"
    schemas.write_text(json.dumps({"input": ECHO_IN, "output": ECHO_OUT}))
    code, out = run(
        "tools", "register", "--name", "nofb", "--python", f"{SAMPLES}:echo",
        "--schema-file", str(schemas), "--verifier", f"{SAMPLES}:verify",
        "--health", f"{SAMPLES}:probe", "--fallback", "none",
    )  # fmt: skip
    assert code == 1 and "only admitted in debug mode" in out
    code, _ = run(
        "tools", "register", "--name", "nofb", "--python", f"{SAMPLES}:echo",
        "--schema-file", str(schemas), "--verifier", f"{SAMPLES}:verify",
        "--health", f"{SAMPLES}:probe", "--fallback", "none", "--debug",
    )  # fmt: skip
    assert code == 0


def test_an_invalid_spec_file_exits_1(home: Path) -> None:
    path = home / "bad.yaml"
    path.write_text("name: x\nkind: carrier-pigeon\ntarget: y\n")
    code, out = run("tools", "register", str(path))
    assert code == 1 and "invalid tool spec" in out


def test_health_probes_and_prints_the_demo_tools(home: Path) -> None:
    code, out = run("tools", "register", "--demo")
    assert code == 0 and out.count("registered") == 6
    code, out = run("tools", "health")
    assert code == 0, out
    lines = {line.split("│")[1].strip(): line for line in out.splitlines() if "_tool" in line}
    assert sorted(lines) == [
        "finance_tool", "ocr_tool", "org_tool", "rule_engine_tool", "table_tool", "trip_tool",
    ]  # fmt: skip
    assert "1200 ms" in lines["ocr_tool"] and "98%" in lines["ocr_tool"]
    assert "500" in lines["ocr_tool"]
    ocr = [cell.strip() for cell in lines["ocr_tool"].split("│")]
    assert ocr[5:7] == ["yes", "yes"]  # healthy, slow
    org = [cell.strip() for cell in lines["org_tool"].split("│")]
    assert org[5:7] == ["yes", "no"]


def test_health_without_tools_exits_1(home: Path) -> None:
    code, out = run("tools", "health")
    assert code == 1 and "no tools are registered" in out

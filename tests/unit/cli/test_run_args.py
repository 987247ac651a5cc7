"""``hermesbus run``'s bad arguments: exit 2, one line naming what is wrong, no traceback."""

from __future__ import annotations

from pathlib import Path

from tests.cli_process import clean_env, hermesbus


def test_an_unknown_processor_is_named_with_the_ones_there_are(tmp_path: Path) -> None:
    ran = hermesbus(
        "run", "conversation", "planner", "--bootstrap", "127.0.0.1:9", env=clean_env(tmp_path),
        cwd=tmp_path,
    )  # fmt: skip
    assert ran.code == 2, ran.output
    assert "no processor planner (processors: conversation, dispatcher, tool, memory, " in ran.err
    assert "indexer, diagnostics)" in ran.err and "Traceback" not in ran.output


def test_run_needs_a_configured_broker(tmp_path: Path) -> None:
    ran = hermesbus("run", "dispatcher", env=clean_env(tmp_path), cwd=tmp_path)
    assert ran.code == 2, ran.output
    assert "run needs a broker every instance reaches: pass --bootstrap" in ran.err
    assert "Traceback" not in ran.output


def test_run_without_a_processor_is_a_usage_error(tmp_path: Path) -> None:
    ran = hermesbus("run", "--bootstrap", "127.0.0.1:9", env=clean_env(tmp_path), cwd=tmp_path)
    assert ran.code == 2, ran.output
    assert "Missing argument 'PROCESSOR...'" in ran.err


def test_run_diagnostics_while_diagnostics_are_off_is_refused(tmp_path: Path) -> None:
    env = clean_env(tmp_path, HERMES_DIAGNOSTICS_ENABLED="false")
    ran = hermesbus("run", "diagnostics", "--bootstrap", "127.0.0.1:9", env=env, cwd=tmp_path)
    assert ran.code == 2, ran.output
    assert "diagnostics is off (HERMES_DIAGNOSTICS_ENABLED=false)" in ran.err
    assert "Traceback" not in ran.output

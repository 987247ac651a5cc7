"""``hermesbus schemas check|freeze|fingerprint`` on the shipped schemas and on edited copies."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hermesbus.cli import app
from hermesbus.codec.frozen import History, same_data
from hermesbus.schemas import ENVELOPE, SCHEMAS_DIR

FROZEN = len(History(SCHEMAS_DIR / "history").versions(ENVELOPE))
"""How many versions of the shipped envelope are frozen; the latest is the current one."""

runner = CliRunner()


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


@pytest.fixture
def schemas(tmp_path: Path) -> Path:
    folder = tmp_path / "schemas"
    shutil.copytree(SCHEMAS_DIR, folder, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return folder


def edit(folder: Path, name: str, change: Any) -> None:
    path = folder / f"{name}.avsc"
    schema = json.loads(path.read_text())
    change(schema)
    path.write_text(json.dumps(schema, indent=2))


def rename_text_field(schema: dict[str, Any]) -> None:
    """A breaking change: UserTurn.text becomes body, with no default."""
    schema["fields"][0] = {"name": "body", "type": "string"}


def add_tenant(schema: dict[str, Any]) -> None:
    schema["fields"].append({"name": "tenant", "type": "string", "default": ""})


def test_check_passes_on_the_shipped_schemas() -> None:
    code, output = run("schemas", "check")
    assert code == 0, output
    assert "hermes.mcp.Envelope" in output
    assert "ok: every schema is BACKWARD compatible" in output


def test_a_breaking_edit_fails_and_names_the_field(schemas: Path) -> None:
    edit(schemas, "hermes.mcp.UserTurn", rename_text_field)
    code, output = run("schemas", "check", "--schemas", str(schemas))
    assert code == 1
    assert "BREAK hermes.mcp.UserTurn" in output
    assert "hermes.mcp.UserTurn.body: field is missing from the writer and has no default" in output
    assert "BREAK hermes.mcp.Envelope" in output  # the envelope contains UserTurn


def test_a_doc_edit_needs_no_new_version_but_a_default_does(schemas: Path) -> None:
    """Docs change neither the bytes nor their resolution; a default changes resolution."""

    def reword(schema: dict[str, Any]) -> None:
        schema["doc"] = "Reworded."
        schema["fields"][0]["doc"] = "Reworded too."

    edit(schemas, ENVELOPE, reword)
    code, output = run("schemas", "check", "--schemas", str(schemas))
    assert code == 0, output
    assert "UNFROZEN" not in output

    def new_default(schema: dict[str, Any]) -> None:
        field = next(f for f in schema["fields"] if "default" in f)
        field["default"] = _another(field["default"])

    edit(schemas, ENVELOPE, new_default)
    code, output = run("schemas", "check", "--schemas", str(schemas))
    assert code == 1
    assert "UNFROZEN hermes.mcp.Envelope" in output


def test_a_default_that_holds_a_doc_key_is_data_not_a_doc() -> None:
    """``doc`` is stripped where Avro defines it (types and fields), not inside defaults."""

    def record(default: dict[str, str], **docs: str) -> dict[str, Any]:
        field = {"name": "m", "type": {"type": "map", "values": "string"}, "default": default}
        if "field" in docs:
            field["doc"] = docs["field"]
        schema: dict[str, Any] = {"type": "record", "name": "R", "fields": [field]}
        if "record" in docs:
            schema["doc"] = docs["record"]
        return schema

    assert not same_data(record({"doc": "v1"}), record({"doc": "v2"}))
    assert same_data(record({"doc": "v1"}), record({"doc": "v1"}, record="R.", field="A map."))


def test_freeze_records_no_version_for_a_doc_edit(schemas: Path) -> None:
    edit(schemas, ENVELOPE, lambda schema: schema.update(doc="Reworded."))
    code, output = run("schemas", "freeze", "--schemas", str(schemas))
    assert code == 0, output
    assert not (schemas / "history" / ENVELOPE / f"v{FROZEN + 1}.avsc").exists()


def _another(default: Any) -> Any:
    """A different default of the same type."""
    if isinstance(default, bool):
        return not default
    if isinstance(default, int | float):
        return default + 1
    if isinstance(default, str):
        return default + "x"
    return None if default is not None else "x"


def test_a_compatible_edit_must_be_frozen_then_passes(schemas: Path) -> None:
    edit(schemas, ENVELOPE, add_tenant)
    code, output = run("schemas", "check", "--schemas", str(schemas))
    assert code == 1
    assert "UNFROZEN hermes.mcp.Envelope" in output
    assert "BREAK" not in output

    code, output = run("schemas", "freeze", "--schemas", str(schemas))
    assert code == 0, output
    assert (schemas / "history" / ENVELOPE / f"v{FROZEN + 1}.avsc").is_file()
    code, output = run("schemas", "check", "--schemas", str(schemas))
    assert code == 0, output
    assert f"hermes.mcp.Envelope v{FROZEN}" in output  # the new version vs. the one before
    code, output = run("schemas", "freeze", "--schemas", str(schemas))
    assert "unchanged" in output


def test_required_level_full_refuses_a_backward_only_change(schemas: Path) -> None:
    def drop_component(schema: dict[str, Any]) -> None:
        schema["fields"] = [f for f in schema["fields"] if f["name"] != "component"]

    edit(schemas, "hermes.mcp.ErrorReport", drop_component)
    code, output = run("schemas", "check", "--schemas", str(schemas), "--against", str(SCHEMAS_DIR))
    assert code == 0, output
    code, output = run(
        "schemas",
        "check",
        "--schemas",
        str(schemas),
        "--against",
        str(SCHEMAS_DIR),
        "--level",
        "FULL",
    )
    assert code == 1
    assert "old schema cannot read new data" in output
    assert "hermes.mcp.ErrorReport.component: field is missing from the writer" in output


def test_check_against_a_git_revision(schemas: Path) -> None:
    repo = schemas.parent

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)

    git("init", "-q")
    git("-c", "user.email=t@example.invalid", "-c", "user.name=t", "add", ".")
    git("-c", "user.email=t@example.invalid", "-c", "user.name=t", "commit", "-qm", "v1")
    edit(schemas, "hermes.mcp.UserTurn", rename_text_field)
    code, output = run("schemas", "check", "--schemas", str(schemas), "--against", "HEAD")
    assert code == 1
    assert "git HEAD" in output
    assert "hermes.mcp.UserTurn.body" in output
    code, output = run("schemas", "check", "--schemas", str(schemas), "--against", "no-such-rev")
    assert code == 2  # a bad argument, not a break
    assert "'no-such-rev' is neither a folder nor a git revision" in output


def test_fingerprint_prints_the_single_object_fingerprint() -> None:
    code, output = run("schemas", "fingerprint")
    assert code == 0
    assert output == "hermes.mcp.Envelope 0b8afc6ded36f95f\n"
    code, output = run("schemas", "fingerprint", "--canonical")
    assert output.splitlines()[1].startswith('{"name":"hermes.mcp.Envelope","type":"record"')


def test_every_frozen_version_stays_readable(schemas: Path) -> None:
    """One version drops a field, the next brings it back with another type: v1 data would
    not decode."""

    def drop_retryable(schema: dict[str, Any]) -> None:
        schema["fields"] = [f for f in schema["fields"] if f["name"] != "retryable"]

    def string_retryable(schema: dict[str, Any]) -> None:
        schema["fields"].append({"name": "retryable", "type": "string", "default": "no"})

    edit(schemas, "hermes.mcp.ErrorReport", drop_retryable)
    assert run("schemas", "freeze", "--schemas", str(schemas))[0] == 0
    edit(schemas, "hermes.mcp.ErrorReport", string_retryable)
    code, output = run("schemas", "check", "--schemas", str(schemas))
    assert code == 1
    assert "UNREADABLE data written with hermes.mcp.Envelope v1" in output
    assert "retryable: type changed from boolean to string" in output
    code, output = run("schemas", "freeze", "--schemas", str(schemas))
    assert code == 1
    assert "not frozen" in output
    assert not (schemas / "history" / ENVELOPE / f"v{FROZEN + 2}.avsc").exists()


def test_a_schema_that_is_not_valid_avro_is_refused(schemas: Path) -> None:
    def bad_default(schema: dict[str, Any]) -> None:
        schema["fields"].append({"name": "n", "type": "int", "default": "abc"})

    edit(schemas, "hermes.mcp.Continue", bad_default)
    code, output = run("schemas", "check", "--schemas", str(schemas))
    assert code == 1
    assert "hermes.mcp.Continue: invalid Avro schema" in output
    code, output = run("schemas", "freeze", "--schemas", str(schemas))
    assert code == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s["fields"][0].pop("type"), "every field needs a name and a type"),
        (lambda s: s["fields"].append({"name": "a", "type": {"type": "array"}}), "needs 'items'"),
        (lambda s: s.update(fields="none"), "needs a list of fields"),
    ],
)
def test_malformed_schema_files_name_the_problem(schemas: Path, change: Any, message: str) -> None:
    edit(schemas, "hermes.mcp.Continue", change)
    code, output = run("schemas", "check", "--schemas", str(schemas))
    assert code == 1
    assert message in output
    assert "Traceback" not in output


def test_a_frozen_version_edited_in_place_is_refused(schemas: Path) -> None:
    frozen = schemas / "history" / ENVELOPE / "v1.avsc"
    schema = json.loads(frozen.read_text())
    schema["fields"][0]["doc"] = "edited after release"
    frozen.write_text(json.dumps(schema, indent=2))
    code, output = run("schemas", "check", "--schemas", str(schemas))
    assert code == 1
    assert f"TAMPERED history/{ENVELOPE}/v1.avsc was edited after it was frozen" in output
    frozen.unlink()
    code, output = run("schemas", "check", "--schemas", str(schemas))
    assert f"{ENVELOPE}/v1.avsc was removed after it was frozen" in output

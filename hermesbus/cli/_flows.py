"""``hermesbus flows check|schema``: flow spec files from the command line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ._common import HomeOption, console, err_console, errors, fail, program_settings, shown

if TYPE_CHECKING:
    from hermesbus.compose.settings import Settings
    from hermesbus.processors.flow import Finding, FlowSpec, FlowSpecError

app = typer.Typer(help="Flows: check a flow spec file, print the spec's JSON Schema.")

SpecFile = Annotated[
    Path, typer.Argument(help="A flow spec (YAML).", exists=True, dir_okay=False, readable=True)
]


@app.command("check")
def check_command(
    spec_file: SpecFile,
    no_tools: Annotated[
        bool,
        typer.Option(
            "--no-tools", help="Do not check that its tools are registered (no registry here)."
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON document, for scripts.")
    ] = False,
    home: HomeOption = None,
) -> None:
    """Check a flow spec: its JSON Schema, then its machine (unreachable states, states with
    no way out, waits with no text, unknown states and triggers, hooks off the allow-list,
    tools not registered). Each problem names its line; exit 1 when any is an error."""
    from hermesbus.processors.flow import FlowSpecError, lint, load_flow

    where = str(spec_file)
    with errors():
        settings = program_settings()
        try:
            text = spec_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise fail(f"cannot read {where}: {exc}", 2) from exc
        try:
            spec, lines = load_flow(text, where)
        except FlowSpecError as exc:
            _refused(exc, as_json)
            raise typer.Exit(1) from exc
        registered = None if no_tools else asyncio.run(_registered(settings))
        findings = lint(spec, lines, modules=settings.tool.modules, registered=registered)
    failed = any(f.severity == "error" for f in findings)
    if as_json:
        console.print_json(data=_json(spec, where, findings, checked_tools=not no_tools))
    else:
        _print(spec, where, findings, settings, checked_tools=not no_tools)
    if failed:
        raise typer.Exit(1)


async def _registered(settings: Settings) -> set[str]:
    """The registered tools' names (none when nothing was ever registered here)."""
    from hermesbus.compose.backends import tool_store, tool_store_exists

    if not tool_store_exists(settings):
        return set()
    async with tool_store(settings) as store:
        return {spec.name for spec in await store.list_specs()}


def _refused(exc: FlowSpecError, as_json: bool) -> None:
    if as_json:
        told = [{"line": p.line, "field": p.field, "message": p.message} for p in exc.problems]
        console.print_json(data={"file": exc.where, "valid": False, "problems": told})
        return
    for problem in exc.problems:
        err_console.print(f"[red]error:[/red] {shown(problem.shown(exc.where))}", soft_wrap=True)
    count = len(exc.problems)
    said = f"{exc.where}: not a valid flow spec ({count} problem{'s' * (count > 1)})"
    err_console.print(shown(said), soft_wrap=True)


def _print(
    spec: FlowSpec, where: str, findings: list[Finding], settings: Settings, *, checked_tools: bool
) -> None:
    for finding in findings:
        colour = "red" if finding.severity == "error" else "yellow"
        said = shown(finding.problem.shown(where))
        err_console.print(f"[{colour}]{finding.severity}:[/{colour}] {said}", soft_wrap=True)
    errors_ = sum(f.severity == "error" for f in findings)
    warnings = len(findings) - errors_
    what = (
        f"{where}: flow {spec.flow} version {spec.version}: {len(spec.states)} states, "
        f"{len(spec.transitions)} transitions"
    )
    tools = "" if checked_tools else " (tools not checked against a registry)"
    if errors_:
        said = f"{what}: {errors_} error{'s' * (errors_ > 1)}, {warnings} warnings"
    else:
        said = f"{what}: ok{tools}" + (f", {warnings} warnings" if warnings else "")
    console.print(shown(said), soft_wrap=True)
    if errors_ and any("is not registered" in f.problem.message for f in findings):
        home = shown(str(settings.home))
        console.print(
            f"(tools are checked against the registry at {home}; --no-tools)", soft_wrap=True
        )


def _json(
    spec: FlowSpec, where: str, findings: list[Finding], *, checked_tools: bool
) -> dict[str, object]:
    return {
        "file": where,
        "valid": not any(f.severity == "error" for f in findings),
        "flow": spec.flow,
        "version": spec.version,
        "states": [s.id for s in spec.states],
        "tools_checked": checked_tools,
        "problems": [
            {
                "severity": f.severity,
                "line": f.problem.line,
                "field": f.problem.field,
                "message": f.problem.message,
            }
            for f in findings
        ],
    }


@app.command("schema")
def schema_command() -> None:
    """Print the flow spec's JSON Schema (draft 2020-12), as published with the package:
    point an editor at it to check a spec while it is written."""
    from hermesbus.processors.flow import schema

    typer.echo(json.dumps(schema(), indent=2, ensure_ascii=False))

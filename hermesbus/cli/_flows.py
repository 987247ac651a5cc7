"""``hermesbus flows check|register|list|show|schema``: flows from the command line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ._common import (
    BootstrapOption,
    HomeOption,
    PrefixOption,
    console,
    err_console,
    errors,
    fail,
    kafka_with,
    program_settings,
    shown,
)

if TYPE_CHECKING:
    from hermesbus.compose.settings import Settings
    from hermesbus.processors.flow import Finding, FlowSpec, FlowSpecError, FlowVersion, Registered

app = typer.Typer(
    help="Flows: check a spec file, register it, list and show the registered versions.",
    no_args_is_help=True,
)

SpecFile = Annotated[
    Path, typer.Argument(help="A flow spec (YAML).", exists=True, dir_okay=False, readable=True)
]
NoToolsOption = Annotated[
    bool,
    typer.Option(
        "--no-tools", help="Do not check that its tools are registered (no registry here)."
    ),
]


@app.command("check")
def check_command(
    spec_file: SpecFile,
    no_tools: NoToolsOption = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON document, for scripts.")
    ] = False,
    home: HomeOption = None,
) -> None:
    """Check a flow spec: its JSON Schema, then its machine (unreachable states, states with
    no way out, waits with no text, unknown states and triggers, hooks off the allow-list,
    tools not registered). Each problem names its line; exit 1 when any is an error."""
    where = str(spec_file)
    with errors():
        settings = program_settings()
        _, spec, findings = _checked(spec_file, settings, no_tools=no_tools, as_json=as_json)
    failed = any(f.severity == "error" for f in findings)
    if as_json:
        console.print_json(data=_json(spec, where, findings, checked_tools=not no_tools))
    else:
        _print(spec, where, findings, settings, checked_tools=not no_tools)
    if failed:
        raise typer.Exit(1)


def _checked(
    spec_file: Path, settings: Settings, *, no_tools: bool, as_json: bool
) -> tuple[bytes, FlowSpec, list[Finding]]:
    """The file's bytes, its spec and the lint's findings; an invalid spec is told (each
    problem by line) and exits 1."""
    from hermesbus.processors.flow import FlowSpecError, lint, load_flow

    raw = _read(spec_file)
    try:
        spec, lines = load_flow(raw.decode("utf-8"), str(spec_file))
    except FlowSpecError as exc:
        _refused(exc, as_json)
        raise typer.Exit(1) from exc
    registered = None if no_tools else asyncio.run(_registered(settings))
    return raw, spec, lint(spec, lines, modules=settings.tool.modules, registered=registered)


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
        data = {"file": exc.where, "valid": False, "problems": told, "more_problems": exc.more}
        console.print_json(data=data)
        return
    for problem in exc.problems:
        err_console.print(f"[red]error:[/red] {shown(problem.shown(exc.where))}", soft_wrap=True)
    if exc.more:
        err_console.print(f"... and {exc.more} more")
    count = len(exc.problems) + exc.more
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


@app.command("register")
def register_command(
    spec_file: SpecFile,
    no_tools: NoToolsOption = False,
    bootstrap: BootstrapOption = None,
    prefix: PrefixOption = "",
    home: HomeOption = None,
) -> None:
    """Check a flow spec (as ``flows check``), then register it on the bus's flow registry
    topic as its version, signed by the conversation, for every processor to read. A version
    is immutable: the same text again changes nothing, other text needs a higher version."""
    from hermesbus.compose.flows import register_flow

    where = str(spec_file)
    with errors():
        settings = program_settings(bootstrap)
        raw, spec, findings = _checked(spec_file, settings, no_tools=no_tools, as_json=False)
        if any(f.severity == "error" for f in findings):
            _print(spec, where, findings, settings, checked_tools=not no_tools)
            raise fail(f"{where}: not registered: fix the errors above first")
        kafka = kafka_with(settings, bootstrap)
        done = asyncio.run(register_flow(kafka, prefix, settings.keys.load(), raw, where))
    version = done.version
    what = f"flow {version.spec.flow} version {version.spec.version}"
    if done.outcome == "already":
        console.print(shown(f"{what} is registered already, with this text (unchanged)"))
        return
    console.print(
        shown(f"registered {what} (digest {version.digest[:16]}, offset {version.offset})"),
        soft_wrap=True,
    )


def _read(spec_file: Path) -> bytes:
    """The file's bytes, UTF-8 text of at most the spec's size limit (read no further)."""
    from hermesbus.processors.flow import MAX_BYTES

    try:
        with spec_file.open("rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
        raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"cannot read {spec_file}: {exc}", 2) from exc
    if len(raw) > MAX_BYTES:
        raise fail(f"{spec_file} is larger than {MAX_BYTES} bytes: no flow spec is", 1)
    return raw


@app.command("list")
def list_command(
    bootstrap: BootstrapOption = None, prefix: PrefixOption = "", home: HomeOption = None
) -> None:
    """Every registered flow: its versions, the newest's states and when it was registered."""
    from rich.table import Table

    with errors():
        settings = program_settings(bootstrap)
        registered = asyncio.run(_flows(settings, bootstrap, prefix))
    from hermesbus.processors.flow import EXPENSE_SPEC

    _problems_of(registered)
    if not registered.flows():
        console.print(f"no flow is registered on {registered.topic}", soft_wrap=True)
    table = Table(title=f"flows ({registered.topic})")
    for column in ("flow", "versions", "newest", "title", "states", "registered", "digest"):
        table.add_column(column)
    for flow in registered.flows():
        versions = registered.versions[flow]
        newest = versions[max(versions)]
        table.add_row(
            flow, ", ".join(str(v) for v in sorted(versions)), str(newest.spec.version),
            shown(newest.spec.title or "-"), str(len(newest.spec.states)),
            _when(newest.registered_at_ms), newest.digest[:16],
        )  # fmt: skip
    if EXPENSE_SPEC.flow not in registered.versions:  # a registered one takes its place
        table.add_row(
            EXPENSE_SPEC.flow, "built in", str(EXPENSE_SPEC.version),
            shown(EXPENSE_SPEC.title or "-"), str(len(EXPENSE_SPEC.states)), "-", "-",
        )  # fmt: skip
    console.print(table)


@app.command("show")
def show_command(
    flow: Annotated[str, typer.Argument(help="The flow's id.")],
    version: Annotated[
        int | None, typer.Option(help="A registered version (default: the newest).", min=1)
    ] = None,
    source: Annotated[bool, typer.Option("--source", help="Print its spec as registered.")] = False,
    bootstrap: BootstrapOption = None,
    prefix: PrefixOption = "",
    home: HomeOption = None,
) -> None:
    """A registered flow's machine: its states as a table, and as a diagram of the moves
    out of each state (trigger, guard, target; its exception exit; its waits)."""
    with errors():
        settings = program_settings(bootstrap)
        if not kafka_with(settings, bootstrap).bootstrap and _built_in(flow, version, None):
            _show_built_in(source, "no broker configured, so no registry was read")
            return
        registered = asyncio.run(_flows(settings, bootstrap, prefix))
    found = registered.get(flow, version)
    if found is None and _built_in(flow, version, registered):
        _show_built_in(source, "not registered")
        return
    if found is None:
        known = registered.versions.get(flow)
        if known:
            listed = ", ".join(str(v) for v in sorted(known))
            raise fail(f"flow {flow} has no version {version} (registered: {listed})")
        names = ", ".join(registered.flows()) or "none"
        raise fail(f"no flow {flow!r} is registered on {registered.topic} (registered: {names})")
    if source:
        typer.echo(found.text.decode("utf-8"), nl=False)
        return
    _show(found)


async def _flows(settings: Settings, bootstrap: str | None, prefix: str) -> Registered:
    from hermesbus.compose.flows import read_flows

    return await read_flows(kafka_with(settings, bootstrap), prefix, settings.keys.load())


def _problems_of(registered: Registered) -> None:
    for refused in (*registered.refused, *registered.conflicts):
        said = (
            f"warning: {registered.topic} offset {refused.offset} ({refused.key}): {refused.reason}"
        )
        err_console.print(shown(said), soft_wrap=True)


def _when(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _built_in(flow: str, version: int | None, registered: Registered | None) -> bool:
    """Whether ``flows show`` means the built-in expense report (none registered takes
    its place; ``registered`` None: not known)."""
    from hermesbus.processors.flow import EXPENSE_SPEC

    ours = flow == EXPENSE_SPEC.flow and version in (None, EXPENSE_SPEC.version)
    return ours and (registered is None or flow not in registered.versions)


def _show_built_in(source: bool, why: str) -> None:
    from importlib import resources

    from hermesbus.processors.flow import EXPENSE_FILE, EXPENSE_SPEC

    spec_file = resources.files("hermesbus.processors.flow").joinpath(EXPENSE_FILE)
    if source:
        typer.echo(spec_file.read_text(encoding="utf-8"), nl=False)
        return
    said = (
        f"built in ({spec_file}), {why}: a session whose turn names no flow and that no "
        f"registered flow's intent begins runs it; starts at {EXPENSE_SPEC.start}"
    )
    _show_spec(EXPENSE_SPEC, said)


def _show(found: FlowVersion) -> None:
    said = (
        f"registered {_when(found.registered_at_ms)}, digest {found.digest[:16]}, "
        f"starts at {found.spec.start}"
    )
    _show_spec(found.spec, said)


def _show_spec(spec: FlowSpec, said: str) -> None:
    from rich.table import Table

    title = f"{spec.flow} version {spec.version}" + (f": {spec.title}" if spec.title else "")
    console.print(shown(title), soft_wrap=True)
    console.print(shown(said), soft_wrap=True)
    table = Table(title="states")
    for column in ("state", "name", "kind", "timeout", "on enter", "waits", "exit"):
        table.add_column(column)
    for state in spec.states:
        acts = ", ".join(next(iter(a.model_dump(exclude_none=True))) for a in state.on_enter)
        waits = ", ".join(f"{w.id} {w.after}: {w.trigger}" for w in state.waits)
        timeout = spec.budget_of(state.id)
        table.add_row(
            state.id, shown(state.name), state.kind,
            "-" if state.kind == "terminal" else f"{timeout} ms",
            acts or "-", waits or "-", state.exit or "-",
        )  # fmt: skip
    console.print(table)
    console.print("moves:")
    for line in diagram(spec):
        console.print(shown(line), soft_wrap=True, highlight=False)


def diagram(spec: FlowSpec) -> list[str]:
    """The machine in lines of text: each state, then each move out of it."""
    lines = []
    for state in spec.states:
        mark = " (start)" if state.id == spec.start else ""
        lines.append(f"{state.id} [{state.kind}]{mark}")
        moves = [m for m in spec.transitions if m.source == state.id]
        outs = []
        for move in moves:
            guard = f" when {move.when}" if move.when else ""
            guard += f" unless {move.unless}" if move.unless else ""
            does = f" ({', '.join(next(iter(a.model_dump(exclude_none=True))) for a in move.do)})"
            target = move.to or "(stays)"
            outs.append(f"{move.on}{guard} -> {target}" + (does if move.do else ""))
        if state.exit:
            outs.append(f"failed -> {state.exit} (exception exit)")
        for n, out in enumerate(outs):
            lines.append(("  └─ " if n == len(outs) - 1 else "  ├─ ") + out)
    return lines

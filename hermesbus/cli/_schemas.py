"""``hermesbus schemas check|freeze|fingerprint``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hermesbus.codec.compat import Compatibility, Level
from hermesbus.codec.evolution import CheckReport, check, previous_from, unreadable
from hermesbus.codec.frozen import History
from hermesbus.codec.schemaset import SchemaSet, canonical_form, fingerprint
from hermesbus.errors import ConfigError
from hermesbus.schemas import ENVELOPE, SCHEMAS_DIR

from ._common import console, errors, fail

app = typer.Typer(
    help="Avro schemas: compatibility checks and frozen versions.", no_args_is_help=True
)

SchemasOption = Annotated[
    Path, typer.Option("--schemas", help="The schemas folder.", file_okay=False)
]


@app.command("check")
def check_command(
    against: Annotated[
        str | None,
        typer.Option(help="A schemas folder or a git revision; default: schemas/history."),
    ] = None,
    level: Annotated[Level, typer.Option(help="The compatibility required.")] = Level.BACKWARD,
    schemas: SchemasOption = SCHEMAS_DIR,
) -> None:
    """Report BACKWARD / FORWARD / FULL compatibility of every schema with its previous version.

    Exits 1 when a schema breaks the required level (the message names the field) or
    when a changed top-level schema has not been frozen into history/; 2 when --against
    names neither a folder nor a git revision (nothing was checked).
    """
    with errors():
        current = SchemaSet.from_dir(schemas)
        try:
            previous = previous_from(current, schemas, against)
        except ConfigError as exc:
            raise fail(str(exc), 2) from exc
        report = check(current, previous, level)
    _print(report)
    if not report.ok:
        raise typer.Exit(1)


@app.command("freeze")
def freeze_command(
    name: Annotated[str, typer.Option(help="The top-level schema to freeze.")] = ENVELOPE,
    schemas: SchemasOption = SCHEMAS_DIR,
) -> None:
    """Record the current version of a top-level schema in history/ (once per change).

    Refuses when the current schema cannot read data written with a frozen version.
    """
    with errors():
        current, history = SchemaSet.from_dir(schemas), History(schemas / "history")
        problems = unreadable(current, history.versions(name))
        if problems:
            raise fail(f"not frozen: the current {name} cannot read {problems[0]}")
        version = history.freeze(current, name)
    if version is None:
        console.print(f"{name}: unchanged since its latest frozen version")
    else:
        console.print(f"{name}: frozen as v{version.number} in {version.path}")


@app.command("fingerprint")
def fingerprint_command(
    name: Annotated[str, typer.Argument(help="Full name of a schema.")] = ENVELOPE,
    canonical: Annotated[bool, typer.Option(help="Also print the canonical form.")] = False,
    schemas: SchemasOption = SCHEMAS_DIR,
) -> None:
    """Print the CRC-64-AVRO fingerprint, in the byte order of the single-object header."""
    with errors():
        expanded = SchemaSet.from_dir(schemas).expanded(name)
        console.print(f"{name} {fingerprint(expanded).hex()}")
        if canonical:
            console.print(canonical_form(expanded), soft_wrap=True)


def _print(report: CheckReport) -> None:
    table = Table(title=f"schemas against {report.against} (required: {report.required})")
    for column in ("schema", "compatibility", "problem"):
        table.add_column(column)
    for result in report.results:
        ok = result.level.satisfies(report.required)
        problems = _required_problems(report, result)
        table.add_row(
            result.name,
            f"[{'green' if ok else 'red'}]{result.level}[/]",
            problems[0] if problems and not ok else "",
        )
    for name in report.added:
        table.add_row(name, "[green]new[/]", "")
    for name in report.removed:
        table.add_row(name, "[yellow]removed[/]", "")
    console.print(table)
    for failure in report.failures:
        for problem in _required_problems(report, failure):
            console.print(f"[red]BREAK[/red] {failure.name}: {problem}", soft_wrap=True)
    for line in report.tampered:
        console.print(f"[red]TAMPERED[/red] history/{line}: frozen versions never change")
    for line in report.unreadable:
        console.print(
            f"[red]UNREADABLE[/red] data written with {line} "
            "(the codec reads every frozen version with the current schema)",
            soft_wrap=True,
        )
    for name in report.unfrozen:
        console.print(
            f"[red]UNFROZEN[/red] {name} changed since its latest version in history/: "
            "run `hermesbus schemas freeze` to record it, so data written with it "
            "stays decodable after the next change",
            soft_wrap=True,
        )
    if report.ok:
        console.print(f"[green]ok[/green]: every schema is {report.required} compatible")


def _required_problems(report: CheckReport, failure: Compatibility) -> list[str]:
    wanted = report.required
    problems = []
    if wanted in (Level.BACKWARD, Level.FULL):
        problems += [f"new schema cannot read old data: {p}" for p in failure.backward]
    if wanted in (Level.FORWARD, Level.FULL):
        problems += [f"old schema cannot read new data: {p}" for p in failure.forward]
    return problems

"""``hermesbus topics list|apply``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hermesbus.topics import CATALOG_FILE, Catalog
from hermesbus.topics.provision import ApplyResult, apply

from ._common import PrefixOption, console, errors, kafka_with, program_settings

app = typer.Typer(help="The topic catalog and its provisioning.", no_args_is_help=True)

CatalogOption = Annotated[Path, typer.Option("--catalog", help="The catalog file.", dir_okay=False)]
PartitionsOption = Annotated[
    int | None, typer.Option(min=1, help="Partitions of every session-keyed topic.")
]
ReplicationOption = Annotated[int | None, typer.Option(min=1, help="Replication factor.")]


def _catalog(
    path: Path, prefix: str, partitions: int | None, replication_factor: int | None
) -> Catalog:
    return Catalog.load(path).with_overrides(
        prefix=prefix, partitions=partitions, replication_factor=replication_factor
    )


@app.command("list")
def list_command(
    catalog: CatalogOption = CATALOG_FILE,
    prefix: PrefixOption = "",
    partitions: PartitionsOption = None,
    replication_factor: ReplicationOption = None,
) -> None:
    """Print the catalog: every topic with its partitions, retention, cleanup, key and value."""
    with errors():
        topics = _catalog(catalog, prefix, partitions, replication_factor)
    table = Table(title=f"topic catalog ({catalog})")
    for column in ("topic", "partitions", "replicas", "retention", "cleanup", "key", "value"):
        table.add_column(column)
    for spec in topics:
        table.add_row(
            spec.name,
            str(spec.partitions),
            str(spec.replication_factor),
            _duration(spec.retention_ms),
            spec.cleanup_policy,
            spec.key,
            spec.value_schema or "raw bytes",
        )
    console.print(table)


@app.command("apply")
def apply_command(
    bootstrap: Annotated[
        str | None,
        typer.Option(help="HOST:PORT of the cluster; default: HERMES_KAFKA_BOOTSTRAP."),
    ] = None,
    catalog: CatalogOption = CATALOG_FILE,
    prefix: PrefixOption = "",
    partitions: PartitionsOption = None,
    replication_factor: ReplicationOption = None,
    dry_run: Annotated[bool, typer.Option(help="Only report what would change.")] = False,
) -> None:
    """Create the catalog's missing topics and report drift of existing ones (idempotent).

    Exits 0 when every topic exists as declared, 2 when an existing topic drifted
    (apply never changes partitions: that would move sessions between partitions).
    """
    with errors():
        topics = _catalog(catalog, prefix, partitions, replication_factor)
        config = kafka_with(program_settings(bootstrap), bootstrap)
        result = asyncio.run(apply(topics, config, dry_run=dry_run))
    _report(result, dry_run)
    if not result.ok:
        raise typer.Exit(2)


def _report(result: ApplyResult, dry_run: bool) -> None:
    verb = "would create" if dry_run else "created"
    plans = [result.plan] + ([result.late] if result.late else [])
    for spec in result.plan.create:
        if dry_run or spec.name in result.created:
            console.print(f"[green]{verb}[/green] {spec.name} ({spec.partitions} partitions)")
    in_sync = [name for p in plans for name in p.in_sync]
    for name in in_sync:
        console.print(f"ok {name}")
    for name in (name for p in plans for name in p.unverified):
        console.print(f"[yellow]unverified[/yellow] {name}: the broker does not describe configs")
    for drift in result.drift:
        console.print(f"[red]drift[/red] {drift}", soft_wrap=True)
    to_create = len(result.created) if not dry_run else len(result.plan.create)
    drifted = len({d.topic for d in result.drift})
    console.print(
        f"{to_create} {'to create' if dry_run else 'created'}, {len(in_sync)} in sync, "
        f"{drifted} drifted"
    )


def _duration(ms: int) -> str:
    if ms < 0:
        return "forever"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"

"""The graph store's mark (:mod:`hermesbus.base.storemark`): one ``(:StoreMark {ns, mark})`` node
per namespace (unique: ``hermes_mark`` in the graph's ``SCHEMA``), read at start, every
``CHECK_EVERY_S`` and after an error (the driver reconnects on its own, unseen), never per
query."""

from __future__ import annotations

from typing import TYPE_CHECKING, LiteralString

from hermesbus.base.storemark import Mark, MarkBook, MarkGuard
from hermesbus.connectors.neo4j.client import connect, translated
from hermesbus.connectors.neo4j.config import Neo4jConfig

if TYPE_CHECKING:
    from neo4j import AsyncDriver

__all__ = [
    "CLAIM",
    "READ",
    "REPLACE",
    "Mark",
    "guard_for",
    "peek",
    "query_mark",
]

READ: LiteralString = "MATCH (m:StoreMark {ns: $ns}) RETURN m.mark AS mark"
CLAIM: LiteralString = (
    "MERGE (m:StoreMark {ns: $ns}) ON CREATE SET m.mark = $mark RETURN m.mark AS mark"
)
"""Writes the mark only where there is none; returns the one there."""
REPLACE: LiteralString = "MERGE (m:StoreMark {ns: $ns}) SET m.mark = $mark RETURN m.mark AS mark"


def guard_for(config: Neo4jConfig, book: MarkBook | None) -> MarkGuard:
    """The graph store's guard, its mark expected in ``book`` (None: it refuses to start)."""
    database = config.database or "default"
    store = f"neo4j {config.shown_url} {database} {config.namespace} graph"
    where = (
        f"the Neo4j graph store at {config.shown_url} (database {database}, "
        f"namespace {config.namespace})"
    )
    held = "memory's long-term graph (entities, facts, reviews, its change ledger)"
    return MarkGuard(store, where, held, book=book)


async def query_mark(
    driver: AsyncDriver, config: Neo4jConfig, query: LiteralString, mark: Mark | None = None
) -> Mark | None:
    """Run ``query`` (one of this module's) and the mark it returns."""
    params = {"ns": config.namespace, "mark": mark.dumps().decode() if mark else None}
    result = await driver.execute_query(query, parameters_=params, database_=config.database)
    return Mark.loads(result.records[0]["mark"]) if result.records else None


async def peek(config: Neo4jConfig) -> Mark | None:
    """The mark in the store now, on a driver of its own (``doctor``)."""
    driver = connect(config)
    try:
        async with translated(config, "reading its mark"):
            return await query_mark(driver, config, READ)
    finally:
        await driver.close()

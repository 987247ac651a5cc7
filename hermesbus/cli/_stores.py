"""``hermesbus stores check|adopt``: has a store come back empty (its mark gone), and the
operator's acceptance of one that has (:mod:`hermesbus.base.storemark`).

A store whose mark is gone pauses every processor that uses it (``StoreLost``, retried in
place) until ``stores adopt`` writes a new mark into it and records it in the state
folder's ``store-marks.json``; a running ``up`` sees the record change and resumes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Protocol, cast

import typer

from hermesbus.base.storemark import Mark, MarkedStore, MarkGuard
from hermesbus.errors import HermesError

from ._check import Check
from ._common import HomeOption, console, errors, program_settings

if TYPE_CHECKING:
    from hermesbus.compose.settings import Settings

__all__ = ["app", "store_checks"]

app = typer.Typer(
    help="Store marks: which store came back empty, and accepting one that did.",
    no_args_is_help=True,
)


class _Store(MarkedStore, Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def _stores(settings: Settings) -> list[tuple[str, _Store]]:
    """The stores ``up`` would use, by role, from the settings (none opened yet)."""
    from hermesbus.compose.backends import memory_stores, state_store, tool_store

    memory = memory_stores(settings)
    found = [
        ("state", state_store(settings)),
        ("tools", tool_store(settings)),
        ("memory", memory.preferences),
        ("graph", memory.graph),
    ]
    return [(role, cast(_Store, store)) for role, store in found]


async def _status(store: _Store, guard: MarkGuard) -> tuple[Mark | None, Mark | None]:
    """The mark the state folder expects of ``store`` and the one it carries now."""
    expected = guard.book.expected(guard.store)
    return expected, (await store.peek() if expected is not None else None)


async def store_checks(settings: Settings) -> list[Check]:
    """One ``doctor`` line per store: its mark there, or gone (read only: nothing written)."""
    checks = []
    for role, store in _stores(settings):
        guard = store.marks
        if guard is None:
            continue
        name = f"store {role}"
        try:
            expected, found = await _status(store, guard)
        except HermesError as exc:
            checks.append(Check(name, "FAIL", f"{guard.where}: {exc}"))
            continue
        if expected is None:
            said = f"{guard.where}: no mark recorded yet (the first `up` writes one)"
            checks.append(Check(name, "ok", said))
        elif found == expected:
            checks.append(Check(name, "ok", f"{guard.where}: its mark is there ({found})"))
        else:
            checks.append(Check(name, "FAIL", _lost(guard, expected, found), _FIX))
    return checks


_FIX = (
    "`hermesbus stores adopt` accepts the loss (a running bus resumes, its sessions "
    "starting afresh); or restore the store's data (e.g. Redis's AOF) and it resumes by itself"
)


def _lost(guard: MarkGuard, expected: Mark, found: Mark | None) -> str:
    what = (
        "its mark is gone: it came back empty"
        if found is None
        else f"its mark is {found}: another store answers there"
    )
    return f"{guard.where}: {what} (expected {expected}); lost with it: {guard.held}"


@app.command("check")
def check_command(home: HomeOption = None) -> None:
    """Say for each store whether it still carries its mark; exit 1 if one came back empty."""
    with errors():
        checks = asyncio.run(store_checks(program_settings()))
    for check in checks:
        console.print(f"{check.status:<4}  {check.name}: {check.said}", soft_wrap=True)
        if check.fix:
            console.print(f"      fix: {check.fix}", soft_wrap=True)
    if any(check.status == "FAIL" for check in checks):
        raise typer.Exit(1)


@app.command("adopt")
def adopt_command(home: HomeOption = None) -> None:
    """Accept every store that came back empty: write a new mark into it, and record it.

    What the store held is not brought back: a running bus resumes, its sessions starting
    afresh. Stores that still carry their mark are left as they are.
    """
    logging.getLogger("hermesbus.base.storemark").setLevel(logging.CRITICAL)  # said below instead
    with errors():
        lines = asyncio.run(_adopt(program_settings()))
    for line in lines:
        console.print(line, soft_wrap=True)


async def _adopt(settings: Settings) -> list[str]:
    lines, adopted = [], 0
    for role, store in _stores(settings):
        guard = store.marks
        if guard is None:
            continue
        expected, found = await _status(store, guard)
        if expected is None:  # never used here: nothing to accept (a home given by mistake?)
            lines.append(f"kept     {role}: {guard.where}: no mark recorded yet")
            continue
        if found == expected:
            lines.append(f"kept     {role}: {guard.where}: its mark is there")
            continue
        await store.start()
        try:
            mark = await store.adopt()
        finally:
            await store.stop()
        adopted += 1
        lines.append(f"adopted  {role}: {guard.where}: new mark {mark}; lost: {guard.held}")
    done = f"{adopted} adopted" if adopted else "nothing to adopt: every store has its mark"
    lines.append(f"stores: {done}")
    return lines

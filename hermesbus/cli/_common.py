"""What every command shares: the consoles and turning HermesError into a clean exit."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import typer
from rich.console import Console

from hermesbus.errors import HermesError

__all__ = ["console", "errors", "fail"]

_WIDTH = None if sys.stdout.isatty() else 160  # pipes and CI logs get whole table rows
console = Console(highlight=False, width=_WIDTH)
err_console = Console(stderr=True, highlight=False, width=_WIDTH)


def fail(message: str, code: int = 1) -> typer.Exit:
    err_console.print(f"[red]error:[/red] {message}", soft_wrap=True)
    return typer.Exit(code)


@contextmanager
def errors() -> Iterator[None]:
    """Print a HermesError as one line and exit 1, instead of a traceback."""
    try:
        yield
    except HermesError as exc:
        raise fail(str(exc)) from exc

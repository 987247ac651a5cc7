"""``hermesbus keys init|rotate|list``: the components' signing keys (never printed)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hermesbus.base.config import writable_home
from hermesbus.compose.settings import Settings
from hermesbus.identity import Keyring
from hermesbus.processors.protocol import IDENTITIES

from ._common import HomeOption, console, errors, fail, program_settings

__all__ = ["app"]

app = typer.Typer(help="The components' signing keys.", no_args_is_help=True)


@app.command("init")
def init_command(home: HomeOption = None) -> None:
    """Create the keyring file (HERMES_KEYS_FILE, else $HERMES_HOME/keys.json), or add the
    identities it lacks; existing keys are kept."""
    with errors():
        settings = program_settings()
        path = settings.keys.file
        _home_of(settings, path)
        keys = Keyring.ensure(IDENTITIES, path)
        console.print(f"keyring {path}: {', '.join(keys.identities)} (mode 0600)")


@app.command("rotate")
def rotate_command(
    identity: Annotated[str, typer.Argument(help=f"One of {', '.join(IDENTITIES)}.")],
    home: HomeOption = None,
) -> None:
    """Sign as IDENTITY with a new key; the previous key stays live for verification.

    Roll the new file out to every process that reads IDENTITY's records before the ones
    that sign as IDENTITY; rotating again drops the older key.
    """
    with errors():
        if identity not in IDENTITIES:
            raise fail(f"unknown identity {identity!r}: use one of {', '.join(IDENTITIES)}", 2)
        settings = program_settings()
        path = settings.keys.file
        if not path.exists():
            raise fail(f"no keyring at {path}: run `hermesbus keys init` first", 2)
        rotated = Keyring.read(path).rotated(identity)
        _home_of(settings, path)
        rotated.write(path)
        console.print(f"{identity} now signs with {rotated.signing(identity).kid} ({path})")


def _home_of(settings: Settings, path: Path) -> None:
    """A keyring in the state folder: the folder must be writable (said as everywhere)."""
    home = settings.home
    if path.absolute().parent == home:
        writable_home(home)


@app.command("list")
def list_command(home: HomeOption = None) -> None:
    """Each identity's live key ids (the first signs); secrets are never shown."""
    with errors():
        settings = program_settings()
        path = settings.keys.file
        keys = settings.keys.load()
    if not keys.identities:
        console.print(
            f"no keys yet: no keyring at {path} and no HERMES_KEY_* variables; "
            "`hermesbus keys init` makes one",
            soft_wrap=True,
        )
        return
    console.print(f"keys from {keys.source}")
    for identity in IDENTITIES:
        kids = keys.kids(identity)
        console.print(f"{identity:<13} {', '.join(kids) if kids else '(none)'}")

"""``doctor``'s look at the keyring file's mode: its secrets sign as every component.

Another user who can read the file can forge any component's records; one who can write
it can swap the keys. Group read alone is a warning (a service group may share the file
on purpose); any other access by others is a failure.
"""

from __future__ import annotations

import stat
from pathlib import Path

from ._check import Check

__all__ = ["key_file_check"]

_GROUP_READ = stat.S_IRGRP
_OTHERS = 0o066
"""The read and write bits of the group and of other users (execute grants nothing here)."""


def key_file_check(path: Path) -> Check | None:
    """A warn or FAIL line when the keyring file at ``path`` is open to other users; else
    None."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return None  # absent or unreadable: the keyring check says so
    loose = mode & _OTHERS
    if not loose:
        return None
    fix = f"chmod 600 {path} (`hermesbus keys init` writes it so)"
    if loose == _GROUP_READ:
        said = f"{path} is mode {mode:04o}: its group can read the signing secrets"
        return Check("signing keys", "warn", said, fix)
    said = (
        f"{path} is mode {mode:04o}: {_who(loose)} can {_what(loose)} the signing secrets "
        "and sign as any component"
    )
    return Check("signing keys", "FAIL", said, fix)


def _who(loose: int) -> str:
    group, others = bool(loose & 0o070), bool(loose & 0o007)
    if group and others:
        return "its group and every user"
    return "every user" if others else "its group"


def _what(loose: int) -> str:
    reads = bool(loose & (stat.S_IRGRP | stat.S_IROTH))
    writes = bool(loose & (stat.S_IWGRP | stat.S_IWOTH))
    return "read and replace" if reads and writes else "replace" if writes else "read"

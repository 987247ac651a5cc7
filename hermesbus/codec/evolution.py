"""``hermesbus schemas check``: every named type against its previous version.

The previous versions come from ``schemas/history`` (the default), another
schemas folder, or the ``schemas/`` folder of a git revision.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermesbus.codec.compat import Compatibility, Level, can_read, compare, named_types
from hermesbus.codec.frozen import History, Version, same_data
from hermesbus.codec.schemaset import SchemaSet
from hermesbus.errors import ConfigError, SchemaError

__all__ = ["CheckReport", "Previous", "check", "previous_from", "unreadable"]


@dataclass(frozen=True, slots=True)
class Previous:
    """The previous version of every named type, as a name -> definition table."""

    label: str
    types: Mapping[str, Any]
    unfrozen: tuple[str, ...] = ()
    """Top-level schemas whose current form is not yet recorded in history/."""
    frozen: tuple[Version, ...] = ()
    """Every frozen version: the codec reads data written with any of them."""
    tampered: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CheckReport:
    against: str
    required: Level
    results: tuple[Compatibility, ...]
    added: tuple[str, ...]
    removed: tuple[str, ...]
    unfrozen: tuple[str, ...] = field(default=())
    unreadable: tuple[str, ...] = field(default=())
    """Frozen versions whose data the current schema cannot read, with the reason."""
    tampered: tuple[str, ...] = field(default=())
    """Frozen files changed after freezing."""

    @property
    def failures(self) -> tuple[Compatibility, ...]:
        return tuple(r for r in self.results if not r.level.satisfies(self.required))

    @property
    def ok(self) -> bool:
        return not (self.failures or self.unfrozen or self.unreadable or self.tampered)


def check(current: SchemaSet, previous: Previous, required: Level) -> CheckReport:
    new_types = {name: current.definition(name) for name in current.names()}
    results = [
        compare(name, new_types[name], previous.types[name], new_types, previous.types)
        for name in current.names()
        if name in previous.types
    ]
    return CheckReport(
        against=previous.label,
        required=required,
        results=tuple(results),
        added=tuple(n for n in current.names() if n not in previous.types),
        removed=tuple(sorted(n for n in previous.types if n not in new_types)),
        unfrozen=previous.unfrozen,
        unreadable=tuple(unreadable(current, previous.frozen)),
        tampered=previous.tampered,
    )


def unreadable(current: SchemaSet, frozen: Sequence[Version]) -> list[str]:
    """Transitive BACKWARD: the current schema must read data of every frozen version."""
    found = []
    for version in frozen:
        problems = can_read(current.expanded(version.name), version.load())
        if problems:
            found.append(f"{version.name} v{version.number}: {problems[0]}")
    return found


def previous_from(current: SchemaSet, schemas_dir: Path, against: str | None) -> Previous:
    """Resolve ``--against``: None = history/, an existing folder, or a git revision.

    ConfigError when ``against`` is neither (a bad argument, not a broken schema).
    """
    if against is None:
        return _from_history(current, History(schemas_dir / "history"))
    if Path(against).is_dir():
        return _from_set(SchemaSet.from_dir(Path(against)), f"folder {against}")
    return _from_set(_from_git(schemas_dir, against), f"git {against}")


def _from_set(schemas: SchemaSet, label: str) -> Previous:
    return Previous(label, {name: schemas.definition(name) for name in schemas.names()})


def _from_history(current: SchemaSet, history: History) -> Previous:
    types: dict[str, Any] = {}
    labels, unfrozen, frozen = [], [], []
    for name in history.names():
        versions = history.versions(name)
        if not versions or name not in current:
            continue
        latest = versions[-1]
        base = latest
        if same_data(latest.load(), current.expanded(name)):
            base = versions[-2] if len(versions) > 1 else latest
        else:
            unfrozen.append(name)
        labels.append(f"{name} v{base.number}")
        types.update(named_types(base.load()))
        frozen.extend(versions)
    tampered = history.tampered()
    if not labels:
        detail = f" ({tampered[0]})" if tampered else ""
        raise SchemaError(f"{history.folder}: no frozen versions to check against{detail}")
    return Previous(
        "history " + ", ".join(labels),
        types,
        tuple(unfrozen),
        tuple(frozen),
        tuple(tampered),
    )


def _from_git(schemas_dir: Path, revision: str) -> SchemaSet:
    neither = f"--against {revision!r} is neither a folder nor a git revision"
    if revision.startswith("-"):
        raise ConfigError(neither)
    if not _git_ok(schemas_dir, "rev-parse", "--is-inside-work-tree"):
        raise ConfigError(f"{neither} ({schemas_dir} is not in a git repository)")
    if not _git_ok(schemas_dir, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"):
        raise ConfigError(f"{neither}: no folder of that name, and git knows no such revision")
    top = Path(_git(schemas_dir, "rev-parse", "--show-toplevel").strip()).resolve()
    prefix = schemas_dir.resolve().relative_to(top).as_posix()
    if not _git_ok(top, "cat-file", "-e", f"{revision}:{prefix}"):
        raise ConfigError(f"--against {revision!r}: that revision has no {prefix}/ folder")
    listing = _git(top, "ls-tree", "--name-only", f"{revision}:{prefix}")
    texts = {
        name: _git(top, "show", f"{revision}:{prefix}/{name}")
        for name in listing.split()
        if name.endswith(".avsc")
    }
    return SchemaSet.from_texts(texts, origin=f"{revision}:{prefix}")


def _git_ok(cwd: Path, *args: str) -> bool:
    """Whether a git query succeeds (its output and git's own message are not wanted)."""
    return _run_git(cwd, *args).returncode == 0


def _git(cwd: Path, *args: str) -> str:
    done = _run_git(cwd, *args)
    if done.returncode != 0:
        raise SchemaError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _run_git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(  # noqa: S603 - fixed executable, arguments as a list
            ["git", *args],  # noqa: S607 - git from PATH, as every developer runs it
            cwd=cwd,
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SchemaError(f"cannot run git: {exc}") from exc

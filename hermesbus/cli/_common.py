"""What every command shares: the consoles and turning failures into one clean line.

No traceback reaches a user for an expected failure (a broker down, a topic missing,
a bad file or flag); ``HERMES_DEBUG=1`` lets the traceback through, for a bug report.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from hermesbus.base.printable import json_safe, printable
from hermesbus.errors import HermesError, SettingError

if TYPE_CHECKING:
    from pydantic_settings import BaseSettings

    from hermesbus.compose.settings import Settings
    from hermesbus.connectors.kafka import KafkaConfig

__all__ = [
    "COMPONENTS",
    "BootstrapOption",
    "HomeOption",
    "PrefixOption",
    "ServingBootstrapOption",
    "check_component",
    "console",
    "debug",
    "err_console",
    "errors",
    "fail",
    "json_safe",
    "kafka_with",
    "printable",
    "problems",
    "program_settings",
    "shown",
    "variables",
]

BootstrapOption = Annotated[
    str | None, typer.Option(help="Kafka bootstrap; default HERMES_KAFKA_BOOTSTRAP.")
]
ServingBootstrapOption = Annotated[
    str | None,
    typer.Option(help="Kafka bootstrap; default HERMES_KAFKA_BOOTSTRAP, else the embedded broker."),
]
"""``--bootstrap`` of the commands that start the embedded broker when none is given."""


def _home(value: str | None) -> str | None:
    """``--home``: the state folder for everything the command reads, as ``HERMES_HOME``
    (every settings model reads that variable, so they all see the same folder)."""
    if value:
        os.environ["HERMES_HOME"] = value
    return value


HomeOption = Annotated[
    str | None,
    typer.Option(
        "--home",
        callback=_home,
        help="State folder (keys, stores, trace index); default HERMES_HOME, else the "
        "user data folder.",
    ),
]
PrefixOption = Annotated[
    str, typer.Option(envvar="HERMES_TOPIC_PREFIX", help="Prefix of every topic name.")
]

_WIDTH = None if sys.stdout.isatty() else 160  # pipes and CI logs get whole table rows
console = Console(highlight=False, width=_WIDTH)
err_console = Console(stderr=True, highlight=False, width=_WIDTH)

COMPONENTS = ("app", "conversation", "dispatcher", "tool", "memory")
"""What ``--component`` takes: the component part of a source (the dispatcher's too)."""
_SHORT = 60
_TRUE = {"1", "true", "yes", "on"}
_WORDS = {"missing": "missing", "extra_forbidden": "unknown field"}
_TYPER = (typer.Exit, typer.Abort, typer.exceptions.TyperException)


def program_settings(bootstrap: str | None = None) -> Settings:
    """The program's settings, read from the environment where the command starts (after
    its options: ``--home`` has set ``HERMES_HOME``), and handed down from there.
    ``--bootstrap``, when given, is the broker's address instead of
    ``HERMES_KAFKA_BOOTSTRAP`` (which is then not read: a flag mends a bad variable)."""
    from hermesbus.compose.settings import Settings

    if not bootstrap:
        return Settings.from_environment()
    return Settings.from_environment(kafka=_flagged(bootstrap))


def kafka_with(settings: Settings, bootstrap: str | None) -> KafkaConfig:
    """The settings' Kafka part (``HERMES_KAFKA_*``), with ``--bootstrap`` over the
    bootstrap when it is given; a malformed ``--bootstrap`` is a bad argument (exit 2) that
    names it."""
    from hermesbus.connectors.kafka import KafkaConfig

    if not bootstrap:
        return settings.kafka
    if settings.kafka.origin == "--bootstrap" and settings.kafka.bootstrap == bootstrap:
        return settings.kafka  # program_settings(bootstrap) put it there
    try:
        given = {**settings.kafka.model_dump(), "bootstrap": bootstrap}
        return KafkaConfig.model_validate(given).given_by("--bootstrap")
    except ValidationError as exc:
        raise _bad_bootstrap(bootstrap, exc) from None


def _flagged(bootstrap: str) -> KafkaConfig:
    """``HERMES_KAFKA_*`` but the bootstrap, which ``--bootstrap`` gives."""
    from hermesbus.connectors.kafka import KafkaConfig

    try:
        return KafkaConfig(bootstrap=bootstrap).given_by("--bootstrap")
    except ValidationError as exc:
        raise _bad_bootstrap(bootstrap, exc) from None


def _bad_bootstrap(bootstrap: str, exc: ValidationError) -> BaseException:
    """A malformed ``--bootstrap``: exit 2 naming it; another variable's error as it is."""
    wrong = [e for e in exc.errors(include_url=False) if tuple(e["loc"]) == ("bootstrap",)]
    if not wrong:
        return exc  # another HERMES_KAFKA_* variable: errors() names it
    reason = str(wrong[0]["msg"]).removeprefix("Value error, ")
    return fail(f"invalid --bootstrap {bootstrap!r}: {reason}", 2)


def check_component(component: str | None) -> None:
    """``--component`` is one of :data:`COMPONENTS` (or not given); else exit 2 naming them."""
    if component is not None and component not in COMPONENTS:
        raise fail(f"--component {component!r}: use one of {', '.join(COMPONENTS)}", 2)


def shown(value: object) -> str:
    """Data from the log (a key, a trace id, a reply) inside a line ``console.print``
    renders: every control character escaped (:func:`printable`), then rich's markup."""
    return escape(printable(value))


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``error: message`` (which may quote the log: shown escaped); the exit to raise."""
    err_console.print(f"[red]error:[/red] {shown(message)}", soft_wrap=True)
    return typer.Exit(code)


def debug() -> bool:
    """``HERMES_DEBUG`` is set to a true value: show tracebacks (and admit fallback none)."""
    return os.environ.get("HERMES_DEBUG", "").strip().lower() in _TRUE


def problems(exc: ValidationError, hints: Mapping[str, str] | None = None) -> list[str]:
    """One line per invalid field, ``field: what is wrong`` (a missing one: + how to pass
    it, from ``hints`` by top-level field), without pydantic's links."""
    lines, given = [], set()
    for error in exc.errors(include_url=False):
        field = ".".join(str(part) for part in error["loc"]) or "(the whole value)"
        message = _WORDS.get(error["type"]) or str(error["msg"]).removeprefix("Value error, ")
        if error["type"] != "missing" and not isinstance(error.get("input"), dict | list):
            message += f" (got {_short(error.get('input'))})"
        missing = error["type"] == "missing" and error["loc"]
        hint = (hints or {}).get(str(error["loc"][0])) if missing else None
        if hint in given:
            hint = None  # kind and target share one: said once
        given.add(hint)
        lines.append(f"{field}: {message}" + (f"; {hint}" if hint else ""))
    return lines


def variables(title: str, lines: list[str]) -> list[str]:
    """``lines`` with each field of a settings model named as its variable
    (``session_timeout_ms: ...`` of RuntimeSettings: ``HERMES_RUNTIME_SESSION_TIMEOUT_MS: ...``)."""
    model = _settings_models().get(title)
    if model is None:
        return lines
    prefix = str(model.model_config.get("env_prefix", ""))
    named = []
    for line in lines:
        field, _, rest = line.partition(":")
        top = field.split(".", 1)[0]
        known = top in model.model_fields
        named.append(f"{prefix}{top}".upper() + field[len(top) :] + ":" + rest if known else line)
    return named


def _settings_models() -> dict[str, type[BaseSettings]]:
    """Every settings model by name (they are all imported by the time a command runs)."""
    from pydantic_settings import BaseSettings

    found: dict[str, type[BaseSettings]] = {}
    todo = list(BaseSettings.__subclasses__())
    while todo:
        model = todo.pop()
        found.setdefault(model.__name__, model)
        todo.extend(model.__subclasses__())
    return found


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHORT else text[: _SHORT - 1] + "…"


@contextmanager
def errors() -> Iterator[None]:
    """Print a HermesError, an invalid setting or any other failure as one line, instead of
    a traceback, and exit 1 (2 for an invalid setting: a bad argument given by a variable);
    with ``HERMES_DEBUG=1`` the traceback is shown as well."""
    try:
        yield
    except _TYPER:
        raise
    except SettingError as exc:
        _trace_if_debugging()
        raise fail(str(exc), 2) from exc
    except HermesError as exc:
        _trace_if_debugging()
        raise fail(str(exc)) from exc
    except ValidationError as exc:
        _trace_if_debugging()
        said = "; ".join(variables(exc.title, problems(exc)))
        where = f"{exc.title}, from HERMES_* variables or flags"
        raise fail(f"invalid setting ({where}): {said}", 2) from exc
    except Exception as exc:
        _trace_if_debugging()
        what = f"{type(exc).__name__}: {exc}"
        raise fail(f"unexpected {what} (HERMES_DEBUG=1 shows where)") from exc


def _trace_if_debugging() -> None:
    if debug():
        err_console.print_exception()

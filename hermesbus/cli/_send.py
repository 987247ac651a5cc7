"""``hermesbus send [FILE|-]``: envelopes as JSON lines, all checked first, then sent signed.

One envelope a line, in the JSON form the models read (bodies named, as
``{"hermes.mcp.UserTurn": {...}}``); blank lines are passed over. Every line is checked
against the contract and against what the sending identity may write before anything
is sent: one bad line and nothing is sent (exit 2, each bad line named).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from hermesbus.client import Client
from hermesbus.contract.envelope import Envelope
from hermesbus.errors import HermesError
from hermesbus.identity import APP

from ._bus import (
    BAD_ARGUMENT,
    cli_client,
    connect,
    one_line,
    unknown_identity,
)
from ._common import (
    BootstrapOption,
    HomeOption,
    PrefixOption,
    err_console,
    errors,
    fail,
    program_settings,
    shown,
)

__all__ = [
    "BAD_INPUT",
    "RESEND_NOTE",
    "Line",
    "Problem",
    "check_lines",
    "parse_lines",
    "send_command",
]

BAD_INPUT = BAD_ARGUMENT
"""Exit code of ``send`` when a line or ``--identity`` is bad: nothing was sent."""
RESEND_NOTE = (
    "note: a processor skips an envelope whose message_id it already applied in that "
    "session, so sending the same lines again does nothing; give them new message ids"
)
"""Said when ids were sent before: the broker takes a re-sent file, the processors ignore it."""
SENT_IDS = "sent-ids.txt"
"""The message ids ``send`` sent from this state folder, newest last (at most :data:`KEEP_SENT`)."""
KEEP_SENT = 10_000
_SHOWN = 20
_SHOWN_IDS = 3
"""Bad lines named one by one; past these, only counted."""


@dataclass(frozen=True, slots=True)
class Line:
    """An envelope of the input and the line it came from (1-based)."""

    number: int
    envelope: Envelope


@dataclass(frozen=True, slots=True, order=True)
class Problem:
    """What is wrong with a line of the input."""

    number: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.number}: {self.reason}"


def parse_lines(lines: Iterable[str]) -> tuple[list[Line], list[Problem]]:
    """The envelopes of the non-blank lines, and what is wrong with every bad one.

    A message id seen on an earlier line is bad too: the processors would skip the second
    as a redelivery of the first.
    """
    good: list[Line] = []
    bad: list[Problem] = []
    seen: dict[str, int] = {}
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            envelope = Envelope.model_validate_json(text)
        except ValidationError as exc:
            bad.append(Problem(number, one_line(exc)))
            continue
        first = seen.setdefault(envelope.message_id, number)
        if first != number:
            again = f"message_id {envelope.message_id!r} is on line {first} too"
            bad.append(Problem(number, again))
            continue
        good.append(Line(number, envelope))
    return good, bad


def check_lines(client: Client, lines: Iterable[Line]) -> list[Problem]:
    """Why ``client`` would refuse to send an envelope (its topic, identity or encoding)."""
    bad = []
    for line in lines:
        try:
            client.check(line.envelope)
            client.codec.encode(line.envelope)
        except HermesError as exc:
            bad.append(Problem(line.number, str(exc)))
    return bad


def send_command(
    file: Annotated[
        str, typer.Argument(help="JSON lines of envelopes; '-' (the default) reads stdin.")
    ] = "-",
    identity: Annotated[
        str,
        typer.Option(help="Sign as this identity (its key needed): an app sends only user turns."),
    ] = APP,
    bootstrap: BootstrapOption = None,
    prefix: PrefixOption = "",
    home: HomeOption = None,
) -> None:
    """Send each line's envelope to its target's topic, keyed by session, signed; print its id.

    Every line is checked before any is sent; a bad one (not an envelope, a target no
    topic serves, a source this identity may not speak for) is named by its line number,
    nothing is sent, and the exit code is 2 (an unknown --identity too). Ids of sent
    envelopes go to stdout, the count to stderr.
    """
    unknown = unknown_identity(identity)
    if unknown:
        raise fail(unknown, BAD_INPUT)
    with errors():
        settings = program_settings(bootstrap)
        client = cli_client(settings, bootstrap, prefix, identity)
        lines = _read(file)
        good, bad = parse_lines(lines)
        bad += check_lines(client, good)
    if bad:
        _report(sorted(bad), total=sum(1 for text in lines if text.strip()))
        raise typer.Exit(BAD_INPUT)
    if not good:  # nothing to send: no broker needed to say so
        err_console.print("sent 0 envelopes: the input has no envelope", soft_wrap=True)
        return
    ids = [line.envelope.message_id for line in good]
    sent = settings.home / SENT_IDS
    before = _sent_before(sent, ids)
    with errors():
        asyncio.run(_send(client, good))
    _remember(sent, ids)
    err_console.print(f"sent {len(good)} envelope{'' if len(good) == 1 else 's'}", soft_wrap=True)
    if before:
        ids_shown = ", ".join(before[:_SHOWN_IDS]) + (", ..." if len(before) > _SHOWN_IDS else "")
        said = f"{len(before)} of them were sent before from here ({ids_shown})"
        err_console.print(shown(said), soft_wrap=True)
        err_console.print(RESEND_NOTE, soft_wrap=True)


def _sent_before(path: Path, ids: list[str]) -> list[str]:
    """Which of ``ids`` ``send`` already sent from this state folder (none if unreadable)."""
    try:
        sent = set(path.read_text(encoding="utf-8").split())
    except OSError:
        return []
    return [i for i in ids if i in sent]


def _remember(path: Path, ids: list[str]) -> None:
    """Add ``ids`` to the record, keeping the newest; a folder that cannot be written
    only costs the note next time, never the send."""
    try:
        old = path.read_text(encoding="utf-8").split() if path.exists() else []
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join([*old, *ids][-KEEP_SENT:]) + "\n", encoding="utf-8")
    except OSError:
        return


def _read(file: str) -> list[str]:
    """The input's lines: stdin for ``-``; a missing or non-UTF-8 file is a clear error."""
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    except OSError as exc:
        raise fail(f"cannot read {file}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise fail(f"{file} is not UTF-8 text: {exc.reason} at byte {exc.start}") from exc
    return text.splitlines()


def _report(bad: list[Problem], total: int) -> None:
    for problem in bad[:_SHOWN]:
        err_console.print(shown(str(problem)), soft_wrap=True)
    if len(bad) > _SHOWN:
        err_console.print(f"... and {len(bad) - _SHOWN} more bad lines", soft_wrap=True)
    if any(problem.reason.startswith("identity.") for problem in bad):
        err_console.print(
            "hint: --identity COMPONENT signs as a component whose key you hold", soft_wrap=True
        )
    err_console.print(
        f"[red]error:[/red] {len(bad)} of {total} lines are bad; nothing was sent",
        soft_wrap=True,
    )


async def _send(client: Client, lines: list[Line]) -> None:
    """Send in input order, each acknowledged before the next; print each id once it is."""
    await connect(client, {client.check(line.envelope) for line in lines})
    try:
        for done, line in enumerate(lines):
            try:
                await client.send(line.envelope)
            except HermesError as exc:
                raise fail(
                    f"line {line.number}: {exc}; {done} of {len(lines)} sent before it "
                    "(their ids are on stdout), none after"
                ) from exc
            typer.echo(line.envelope.message_id)
    finally:
        await client.stop()

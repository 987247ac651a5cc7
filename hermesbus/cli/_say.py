"""``hermesbus say SESSION TEXT [--wait]``: one user turn from a shell, and its replies."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from hermesbus.errors import EncodeError

from ._common import (
    BootstrapOption,
    HomeOption,
    PrefixOption,
    console,
    err_console,
    errors,
    fail,
    program_settings,
    shown,
)

if TYPE_CHECKING:
    from hermesbus.client import Client, Replies, Unverified
    from hermesbus.contract.envelope import Envelope

__all__ = ["DEFAULT_WAIT_S", "NO_ANSWER", "say_command"]

DEFAULT_WAIT_S = 30.0
"""How long ``--wait`` waits for the answer when no ``--timeout`` is given."""
NO_ANSWER = 3
"""Exit code of ``say --wait`` when the turn was sent but no answer came in time."""
DEMO_USER = "u_xyz789"
"""``--user``'s default: :data:`hermesbus.demo.expense.DEMO_USER` (a unit test checks), written
here so that ``say --help`` does not import the demo (and with it the client)."""


def say_command(
    session: Annotated[str, typer.Argument(help="The session of the turn (its Kafka key).")],
    text: Annotated[str, typer.Argument(help="What the user says.")],
    user: Annotated[
        str,
        typer.Option(help="The user's id; the default is the demo company's employee 张三."),
    ] = DEMO_USER,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait", help="Print the turn's replies as they come, up to the conversation's answer."
        ),
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option(
            min=0.1,
            help=f"Seconds --wait waits for the answer ({DEFAULT_WAIT_S:g}); implies --wait.",
        ),
    ] = None,
    flow: Annotated[
        str | None,
        typer.Option(
            help="The registered flow a new session starts in (hermesbus flows list); "
            "default: the one the turn's intent matches. A session under way keeps its own."
        ),
    ] = None,
    bootstrap: BootstrapOption = None,
    prefix: PrefixOption = "",
    home: HomeOption = None,
) -> None:
    """Send TEXT as a user turn of SESSION from app:cli; print its message id, or its replies.

    With --wait (or --timeout), each reply of the turn is printed as it arrives, notices
    too, until the conversation's answer; exit code 3 if none came in time. Only replies
    whose signature verifies with the bus's public keys (public-keys.json beside the
    keyring, or HERMES_PUBLIC_KEYS_FILE) are shown; anything else on the replies topic is
    dropped with a warning, never taken for an answer. Exit code 2: a bad argument (empty
    text or session), nothing sent; 1: nothing was sent (no broker, no key, no such topic,
    no public keys for --wait).
    """
    import asyncio

    from hermesbus.identity import APP

    from ._bus import BAD_ARGUMENT, cli_client

    if not text.strip():
        raise fail(
            "nothing to say: TEXT is empty or blank; give the words of the user's turn",
            BAD_ARGUMENT,
        )
    seconds = timeout if timeout is not None else (DEFAULT_WAIT_S if wait else None)
    with errors():
        settings = program_settings(bootstrap)
        client = cli_client(settings, bootstrap, prefix, APP, on_unverified=_dropped)
    turn = _turn(client, session, user, text, flow)
    with errors():
        answered = asyncio.run(_say(client, turn, seconds))
    if seconds is None:
        typer.echo(turn.message_id)
    elif not answered:
        raise fail(_no_answer(turn, seconds, prefix), NO_ANSWER)


def _turn(client: Client, session: str, user: str, text: str, flow: str | None) -> Envelope:
    """The user turn to send; a bad session, user or text is one line naming the field (exit 2)."""
    from pydantic import ValidationError

    from ._bus import BAD_ARGUMENT, one_line

    try:
        return client.turn(session, user, text, flow=flow)
    except EncodeError as exc:
        cause = exc.__cause__
        said = one_line(cause) if isinstance(cause, ValidationError) else str(exc)
        raise fail(f"invalid turn: {said}", BAD_ARGUMENT) from exc


def _no_answer(turn: Envelope, seconds: float, prefix: str) -> str:
    """The two usual causes of a silent bus, and how to tell them apart."""
    from hermesbus.topics import DLQ

    trace = f"hermesbus trace {turn.trace_id} --session {turn.session_id}"
    trace += f" --prefix {prefix}" if prefix else ""
    return (
        f"no answer to the turn within {seconds:g} s (trace {turn.trace_id}): are the "
        "processors running? Or the bus refused the turn: signed with a key it does not know "
        f"(not its keyring), it went to {prefix}{DLQ} as identity.unknown_key and the bus's "
        f"log says so. `{trace}` shows how far it got"
    )


async def _say(client: Client, turn: Envelope, seconds: float | None) -> bool:
    """Send ``turn``; with ``seconds``, print its replies and say whether the answer came."""
    from hermesbus.topics import CONVERSATION_OUT

    from ._bus import connect

    topics = [client.check(turn)]
    if seconds is not None:
        topics.append(client.topic_prefix + CONVERSATION_OUT)  # where the replies come from
    await connect(client, topics)
    try:
        if seconds is None:
            await client.send(turn)
            _sent(client, turn)
            return True
        async with client.replies(turn.session_id) as replies:  # listen first: replies are fast
            await client.send(turn)
            _sent(client, turn)
            return await _answer(replies, turn, seconds)
    finally:
        await client.stop()


async def _answer(replies: Replies, turn: Envelope, seconds: float) -> bool:
    """Print the replies of ``turn``'s trace until the conversation's answer, or time is up."""
    import asyncio

    try:
        async with asyncio.timeout(seconds):
            async for reply in replies:
                if reply.trace_id != turn.trace_id:
                    continue  # an earlier turn's late reply, or another trace's timer
                if _text(reply):  # a reply with no text only ends a flow's turn
                    _show(reply)
                if reply.source.startswith("conversation:") and not _more(reply):
                    return True  # the answer; notices come from mcp:dispatcher
    except TimeoutError:
        return False
    return False


def _text(reply: Envelope) -> str:
    return str(getattr(reply.payload.body, "text", "") or "")


def _more(reply: Envelope) -> bool:
    """A flow's reply after which more replies to the same turn follow."""
    from hermesbus.client import says_more

    return says_more(reply)


def _sent(client: Client, turn: Envelope) -> None:
    _aside(
        f"sent {turn.message_id} from {turn.source} to {client.check(turn)}"
        f" (session {turn.session_id}, trace {turn.trace_id})"
    )


def _dropped(record: Unverified) -> None:
    """Say that a record on the replies topic was not believed, and why."""
    _aside(
        f"warning: dropped a record on {record.topic} (partition {record.partition}, offset "
        f"{record.offset}) that the bus did not sign: {record.reason}"
    )


def _aside(text: str) -> None:
    """A line on stderr (stdout keeps the replies), its untrusted parts shown safely."""
    err_console.print(shown(text), soft_wrap=True)


def _show(reply: Envelope) -> None:
    """A reply as ``hermesbus up --demo`` prints it: who, the text, its source."""
    from hermesbus.demo.expense import reply_text

    who = "hermes" if reply.source.startswith("conversation:") else "notice"
    console.print(
        f"[bold]{who}[/bold]  {shown(reply_text(reply))}  [dim]({shown(reply.source)})[/dim]",
        soft_wrap=True,
    )

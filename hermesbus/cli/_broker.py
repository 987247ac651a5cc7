"""``hermesbus broker``: the embedded Kafka-protocol broker, until Ctrl-C or SIGTERM."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Annotated

import typer

from hermesbus.base.config import writable_home
from hermesbus.compose.broker import EmbeddedBroker

from ._common import HomeOption, err_console, errors, fail, program_settings

__all__ = ["broker_command"]

_POLL_S = 0.5
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def broker_command(
    port: Annotated[
        int | None,
        typer.Option(min=1, max=65535, help="Port on 127.0.0.1; default: a free one."),
    ] = None,
    home: HomeOption = None,
) -> None:
    """Run the embedded broker (tansu, in memory) and print KAFKA_BOOTSTRAP=HOST:PORT.

    That line is the only stdout output, for scripts and for `--bootstrap` of other
    commands; the rest goes to stderr. Topics live as long as the broker does.
    """
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    with errors():
        state = writable_home(program_settings().home)  # its log is kept there
    previous = {sig: signal.signal(sig, on_signal) for sig in _STOP_SIGNALS}
    broker = EmbeddedBroker(port, home=state)
    try:
        with errors():
            broker.start()
        typer.echo(f"KAFKA_BOOTSTRAP={broker.bootstrap}")
        err_console.print(
            f"embedded broker (tansu, in-memory storage) at {broker.bootstrap}; "
            f"log: {broker.log_path}; Ctrl-C stops it",
            soft_wrap=True,
        )
        while not stopping.wait(_POLL_S):
            if not broker.running:
                raise fail(f"the embedded broker exited; see {broker.log_path}")
    finally:
        broker.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    err_console.print("embedded broker stopped")

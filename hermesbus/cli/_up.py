"""``hermesbus up [--demo] [--once]``: run the stack until Ctrl-C (or once through the demo)."""

from __future__ import annotations

import asyncio
import signal
from typing import Annotated

import typer

from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.runtime import RuntimeSettings
from hermesbus.stack import Stack, demo, stack

from ._common import console, err_console, errors

__all__ = ["up_command"]


def up_command(
    run_demo: Annotated[
        bool, typer.Option("--demo", help="Send the expense-report conversation and print replies.")
    ] = False,
    once: Annotated[
        bool,
        typer.Option("--once", help="Stop after starting (and after the demo) instead of serving."),
    ] = False,
    bootstrap: Annotated[
        str | None,
        typer.Option(
            help="Kafka bootstrap; default HERMES_KAFKA_BOOTSTRAP, else the embedded broker."
        ),
    ] = None,
    prefix: Annotated[
        str, typer.Option(envvar="HERMES_TOPIC_PREFIX", help="Prefix of every topic name.")
    ] = "",
    exactly_once: Annotated[
        bool, typer.Option("--exactly-once", help="Transactions (Apache Kafka only).")
    ] = False,
) -> None:
    """Start the broker (embedded unless configured), create the topics, run the processors."""
    with errors():
        kafka = KafkaConfig()
        if bootstrap:
            kafka = kafka.model_copy(update={"bootstrap": bootstrap})
        settings = RuntimeSettings(exactly_once=exactly_once)
        asyncio.run(_up(kafka, prefix, settings, run_demo=run_demo, once=once))


async def _up(
    kafka: KafkaConfig, prefix: str, settings: RuntimeSettings, *, run_demo: bool, once: bool
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with stack(kafka=kafka, prefix=prefix, settings=settings) as running:
        _describe(running)
        if run_demo:
            for text, reply in await demo(running):
                console.print(f"[bold]user[/bold]  {text}", soft_wrap=True)
                console.print(f"[bold]hermes[/bold] {reply.payload.body.text}", soft_wrap=True)  # type: ignore[union-attr]
        if not once:
            err_console.print("serving; Ctrl-C stops")
            await stop.wait()
        for processor in running.processors:
            err_console.print(f"{processor.name}: {processor.stats}", soft_wrap=True)
    err_console.print("stopped")


def _describe(running: Stack) -> None:
    where = "embedded broker (tansu, in memory)" if running.embedded else "Kafka"
    err_console.print(f"{where} at {running.bootstrap}", soft_wrap=True)
    err_console.print(f"topics: {len(running.created)} created", soft_wrap=True)
    err_console.print(
        "processors: echo (a stand-in that answers 'echo: <text>'; the conversation, "
        "dispatcher, tool and memory processors arrive with issue #4)",
        soft_wrap=True,
    )

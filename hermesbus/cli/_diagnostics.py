"""``hermesbus diagnostics``: run the diagnostics rollup (faust-streaming) until stopped."""

from __future__ import annotations

import asyncio
import contextlib
import signal

import typer

from hermesbus.base import sigint as _sigint
from hermesbus.compose.alerts import background_judge, judge_for
from hermesbus.compose.diagnostics import rollup_app
from hermesbus.compose.settings import Settings

from ._common import (
    BootstrapOption,
    HomeOption,
    PrefixOption,
    console,
    errors,
    fail,
    kafka_with,
    program_settings,
)

__all__ = ["diagnostics_command"]


def diagnostics_command(
    bootstrap: BootstrapOption = None,
    prefix: PrefixOption = "",
    home: HomeOption = None,
) -> None:
    """Add up the envelopes' diagnostics over windows (faust-streaming); emit closed windows.

    Per component, tool and flow state, over tumbling and hopping windows of the records'
    own time; each closed window goes to hermes.diagnostics, signed, and the alert rules
    judge the closed windows: each alert raised or cleared goes to hermes.alerts, signed.
    Runs until Ctrl-C or SIGTERM (exit 0 after SIGTERM, 130 after Ctrl-C). Several may
    run on one cluster: they share the rollup by partition, and each judges every window
    (an alert is the same record, by id, whoever writes it). The windows, timing and
    rules are ``HERMES_DIAGNOSTICS_*``; against the embedded broker set
    ``HERMES_DIAGNOSTICS_SESSION_TIMEOUT_MS=6000`` and
    ``HERMES_DIAGNOSTICS_ONE_RECORD_BATCHES=true`` (README, Diagnostics). ``up``
    runs one itself unless ``HERMES_DIAGNOSTICS_ENABLED=false``.
    """
    with errors():
        settings = program_settings(bootstrap)
        kafka = kafka_with(settings, bootstrap)
        if not kafka.bootstrap:
            raise fail(
                "no broker: pass --bootstrap or set HERMES_KAFKA_BOOTSTRAP (the rollup reads "
                "a running bus's topics)",
                2,
            )
        code = asyncio.run(_run(settings.with_parts(kafka=kafka), prefix))
    if code:
        raise typer.Exit(code)


def _say(line: str) -> None:
    console.print(line, soft_wrap=True)


def _stop_on(sig: int, received: list[int], stop: asyncio.Event) -> None:
    received.append(sig)
    stop.set()


async def _run(settings: Settings, prefix: str) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    received: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, _stop_on, sig, received, stop)
    try:
        keys = settings.keys.load()
        app = await rollup_app(
            settings.kafka,
            settings.diagnostics,
            keys,
            prefix=prefix,
            datadir=settings.home / "diagnostics",
        )
        starting = asyncio.create_task(app.start())
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait({starting, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()  # start() stops what it started
            await asyncio.wait({starting})
            return _sigint.INTERRUPTED if signal.SIGINT in received else 0
        stopped.cancel()
        starting.result()
        sizes = settings.diagnostics.windows
        tumbling, hopping, hop = (
            ms / 1000 for ms in (sizes.tumbling_ms, sizes.hopping_ms, sizes.hop_ms)
        )
        console.print(
            f"diagnostics: reading {prefix}hermes.* into windows of {tumbling:g} s"
            f" and {hopping:g} s every {hop:g} s; "
            f"closed windows go to {prefix}hermes.diagnostics",
            soft_wrap=True,
        )
        judging = contextlib.AsyncExitStack()
        if settings.diagnostics.rules():  # the alerts, judged over the closed windows
            judge = judge_for(settings.kafka, settings.diagnostics, keys, prefix=prefix, told=_say)
            await judging.enter_async_context(background_judge(judge, _say))
        try:
            async with judging:
                await stop.wait()
        finally:
            await app.stop()
        figures = app.stats
        console.print(
            f"stopped: {figures.counted} records counted, {figures.emitted} window parts "
            f"emitted, {figures.skipped} redelivered skipped, {figures.unproven} unproven",
            soft_wrap=True,
        )
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        _sigint.guard()
    return _sigint.INTERRUPTED if signal.SIGINT in received else 0

"""``hermesbus up [--demo] [--once]``: run the stack until Ctrl-C (or once through the demo);
``hermesbus run PROCESSOR...``: run only some of its parts, deployed and scaled apart."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator, Sequence
from typing import Annotated, ClassVar

import typer
from rich.markup import escape
from rich.status import Status

from hermesbus.base import sigint as _sigint
from hermesbus.base.lifecycle import tune_collector
from hermesbus.compose.broker import BrokerWatch, EmbeddedBroker, answers
from hermesbus.compose.provision import provision
from hermesbus.compose.settings import Settings
from hermesbus.compose.stack import PARTS, Stack, stack
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.errors import BrokerError, ConfigError
from hermesbus.runtime import Processor
from hermesbus.topics import Catalog
from hermesbus.trace.index import Indexer

from . import _demo
from ._common import (
    HomeOption,
    PrefixOption,
    ServingBootstrapOption,
    err_console,
    errors,
    fail,
    kafka_with,
    program_settings,
)

__all__ = ["BROKER_LOST", "RUNNABLE", "TOPICS_CHECK_S", "run_command", "up_command"]

BROKER_LOST = 3
"""Exit code of ``up`` when the embedded broker died, or a configured one came back
without the catalog's topics and they cannot be created (1: the demo did not finish)."""
TOPICS_CHECK_S = 10.0
"""How often ``up`` makes sure the catalog's topics exist on a configured broker (and
at once when it answers again): a restart quicker than a probe is not seen as an outage."""
_PROBE_S = 2.0
"""How often a configured broker is probed."""
ExactlyOnceOption = Annotated[
    bool, typer.Option("--exactly-once", help="Transactions (Apache Kafka only).")
]
RUNNABLE = (*PARTS, "diagnostics")
"""What ``run`` runs: the stack's parts and the diagnostics rollup (with its alerts)."""


def up_command(
    run_demo: Annotated[
        bool,
        typer.Option("--demo", help="Register the demo tools and run both expense conversations."),
    ] = False,
    once: Annotated[
        bool,
        typer.Option(
            "--once", help="Stop after the demo (exit 0 only if both finished) instead of serving."
        ),
    ] = False,
    bootstrap: ServingBootstrapOption = None,
    prefix: PrefixOption = "",
    exactly_once: ExactlyOnceOption = False,
    home: HomeOption = None,
) -> None:
    """Start the broker (embedded unless configured), create the topics, run the processors.

    Exits 1 if the demo did not finish, 3 if the embedded broker died: its topics were in
    memory, so up stops rather than start an empty one. A configured broker that goes
    away is waited for, and reported every 30 s until it is back; the catalog's topics it
    lost (a broker that came back empty) are created again, or up stops (exit 3) if it
    may not create them. Ctrl-C (SIGINT), at
    any moment of the start too, stops whatever started and exits 130; SIGTERM exits as
    if the run had ended. One ``up`` per ``HERMES_HOME``: a second one is refused (exit 1),
    naming the process that runs (``hermesbus.compose.homelock``).
    """
    with errors():
        read = program_settings(bootstrap)
        runtime = read.runtime.model_copy(update={"exactly_once": exactly_once})
        settings = read.with_parts(kafka=kafka_with(read, bootstrap), runtime=runtime)
        code = asyncio.run(_up(settings, prefix, run_demo=run_demo, once=once))
    if code:
        raise typer.Exit(code)


def run_command(
    processors: Annotated[
        list[str],
        typer.Argument(
            metavar="PROCESSOR...",
            help=f"What to run here: any of {', '.join(RUNNABLE)}.",
            show_default=False,
        ),
    ],
    bootstrap: ServingBootstrapOption = None,
    prefix: PrefixOption = "",
    exactly_once: ExactlyOnceOption = False,
    home: HomeOption = None,
) -> None:
    """Run some of the processors (each deployable and scalable apart) on a configured broker.

    PROCESSOR is conversation, dispatcher, tool (the shared tool group, each registered
    tool's own and the model rounds'), memory, indexer (the trace index) or diagnostics
    (the rollup and its alerts); ``up`` runs them all. Run as many instances of each as
    you like, on any machines: each is a member of its consumer group
    (``<prefix><processor>``), and the partitions move between the members. Instances
    share what the bus keeps through the stores: give every one the same Redis
    (``HERMES_REDIS_URL``: sessions' state, the tool registry, memory's preferences) and
    Neo4j (``HERMES_NEO4J_URL``: memory's graph), and the same keys. Each process needs
    its own ``HERMES_HOME`` on a machine (one process per state folder). Stops as ``up``
    does (SIGTERM: exit 0; Ctrl-C: 130).
    """
    with errors():
        unknown = [name for name in processors if name not in RUNNABLE]
        if unknown:
            raise fail(f"no processor {', '.join(unknown)} (processors: {', '.join(RUNNABLE)})", 2)
        read = program_settings(bootstrap)
        kafka = kafka_with(read, bootstrap)
        if not kafka.bootstrap:
            raise fail(
                "run needs a broker every instance reaches: pass --bootstrap or set "
                "HERMES_KAFKA_BOOTSTRAP (the embedded one lives inside `hermesbus up`)",
                2,
            )
        if "diagnostics" in processors and not read.diagnostics.enabled:
            raise fail(
                "diagnostics is off (HERMES_DIAGNOSTICS_ENABLED=false): set it to true to run "
                "the rollup, or leave diagnostics out",
                2,
            )
        runtime = read.runtime.model_copy(update={"exactly_once": exactly_once})
        settings = read.with_parts(kafka=kafka, runtime=runtime)
        for warning in _alone(settings, processors):
            err_console.print(f"[yellow]warning:[/yellow] {escape(warning)}", soft_wrap=True)
        parts = frozenset(processors)
        code = asyncio.run(_up(settings, prefix, run_demo=False, once=False, parts=parts))
    if code:
        raise typer.Exit(code)


def _alone(settings: Settings, processors: Sequence[str]) -> list[str]:
    """What another instance elsewhere would not share: the stores in this state folder."""
    said = []
    keeps = {"conversation", "dispatcher", "tool", "memory"} & set(processors)
    if keeps and settings.redis.url is None:
        said.append(
            f"{', '.join(sorted(keeps))}: state and the tool registry in SQLite under "
            f"{settings.home}; instances elsewhere will not share them (HERMES_REDIS_URL)"
        )
    if "memory" in processors and settings.neo4j.url is None:
        said.append(
            f"memory: its graph in SQLite under {settings.home}; instances elsewhere will not "
            "share it (HERMES_NEO4J_URL)"
        )
    return said


async def _up(
    settings: Settings,
    prefix: str,
    *,
    run_demo: bool,
    once: bool,
    parts: frozenset[str] | None = None,
) -> int:
    """Run the stack; the exit code: 0, 1 (the demo did not finish), BROKER_LOST, or 130
    after Ctrl-C.

    A signal, or the embedded broker's death, cancels whatever runs (the start too: with
    the broker gone it may wait for ever), and the stack stops, every part bounded.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    received: list[int] = []  # the signals that asked to stop
    for sig in (signal.SIGINT, signal.SIGTERM):  # first: until now, Ctrl-C exited 130 at once
        loop.add_signal_handler(sig, _stop_on, sig, received, stop)
    try:
        code = await _serve(settings, prefix, stop, run_demo=run_demo, once=once, parts=parts)
    finally:  # all stopped: from here on, Ctrl-C exits 130 at once
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        _sigint.guard()
    return _sigint.INTERRUPTED if signal.SIGINT in received else code


def _stop_on(sig: int, received: list[int], stop: asyncio.Event) -> None:
    received.append(sig)
    stop.set()


async def _serve(
    settings: Settings,
    prefix: str,
    stop: asyncio.Event,
    *,
    run_demo: bool,
    once: bool,
    parts: frozenset[str] | None = None,
) -> int:
    """Run the stack (``parts``: those of it, and the rollup if named; None: all) until
    ``stop`` is set, the run ends or the embedded broker dies."""
    kafka = settings.kafka
    broker = None if kafka.bootstrap else EmbeddedBroker(home=settings.home)
    finished: list[bool] = []  # the demo's outcome, once it has one
    up = asyncio.Event()  # set once the stack runs: a configured broker is watched from then
    serving: list[Stack] = []  # the stack, once it runs: told of the topics made again
    work = _run(
        settings, broker, prefix, finished, up, serving, run_demo=run_demo, once=once, parts=parts
    )
    run = asyncio.create_task(work)
    signalled = asyncio.create_task(stop.wait())
    watch = asyncio.create_task(_watch(broker, kafka, prefix, up, serving))
    lost = None
    try:
        await asyncio.wait({run, signalled, watch}, return_when=asyncio.FIRST_COMPLETED)
        if watch.done():
            lost = watch.result()
            said = f"{lost}; stopping (exit code {BROKER_LOST})"
            err_console.print(f"[red]error:[/red] {escape(said)}", soft_wrap=True)
    finally:
        for task in (signalled, watch, run):
            task.cancel()
        await asyncio.wait({signalled, watch, run})
    if not run.cancelled():
        run.result()  # a HermesError of the start becomes one line (errors())
    err_console.print("stopped")
    if lost is not None:
        return BROKER_LOST
    return 0 if finished == [True] or not run_demo else 1


async def _run(
    settings: Settings,
    broker: EmbeddedBroker | None,
    prefix: str,
    finished: list[bool],
    up: asyncio.Event,
    serving: list[Stack],
    *,
    run_demo: bool,
    once: bool,
    parts: frozenset[str] | None = None,
) -> None:
    """The stack, the demo, then serving until cancelled (or, with ``once``, not)."""
    progress = _Progress()
    started = stack(
        settings=settings,
        prefix=prefix,
        demo=run_demo,
        embedded_broker=broker,
        progress=progress,
        parts=None if parts is None else parts & set(PARTS),
    )
    async with contextlib.AsyncExitStack() as exits:
        with err_console.status("starting", spinner="dots") as status:
            progress.status = status
            running = await exits.enter_async_context(started)
            progress.status = None
        serving.append(running)
        if settings.diagnostics.enabled and (parts is None or "diagnostics" in parts):
            await exits.enter_async_context(_rollup(settings, running, progress))
        tune_collector()  # start-up is done: what it built stays, collections become rare
        up.set()
        try:
            if run_demo:
                finished.append(await _demo.run(running, settings))
            if not once:
                err_console.print("serving; Ctrl-C stops")
                await asyncio.Event().wait()
        finally:
            for part in running.parts():
                counters = {
                    k: v
                    for k, v in vars(part.stats).items()
                    if type(v) is int and k != "timers_due"
                }
                counts = ", ".join(f"{k}={v}" for k, v in counters.items())
                err_console.print(f"stopped {part.name}: {counts}", soft_wrap=True)


@contextlib.asynccontextmanager
async def _rollup(settings: Settings, running: Stack, progress: _Progress) -> AsyncIterator[None]:
    """The diagnostics rollup beside the stack, on its broker (the embedded one's timings),
    and the alerts' judge over its closed windows (unless no rule is on)."""
    from hermesbus.compose.alerts import background_judge, judge_for
    from hermesbus.compose.diagnostics import background_rollup  # faust: only when it runs

    diagnostics = settings.diagnostics
    if running.embedded:
        diagnostics = diagnostics.for_embedded_broker()
    kafka = settings.kafka.model_copy(update={"bootstrap": running.bootstrap})
    keys, prefix = settings.keys.load(), running.prefix
    datadir = settings.home / "diagnostics"
    async with contextlib.AsyncExitStack() as exits:
        rollup = background_rollup(
            kafka, diagnostics, keys, prefix=prefix, datadir=datadir, say=progress
        )
        await exits.enter_async_context(rollup)
        if diagnostics.rules():
            tools = running.tool_names
            judge = judge_for(kafka, diagnostics, keys, prefix=prefix, tools=tools, told=progress)
            await exits.enter_async_context(background_judge(judge, progress))
        yield


async def _watch(
    broker: EmbeddedBroker | None,
    kafka: KafkaConfig,
    prefix: str,
    up: asyncio.Event,
    serving: Sequence[Stack],
) -> str:
    """Why the embedded broker died, or why a configured one cannot serve: that one is
    reported on while it is away, and its missing topics are created again when it is
    back (and every TOPICS_CHECK_S)."""
    if broker is not None:
        return await broker.died()
    await up.wait()  # before, a broker that does not answer fails the start itself
    plaintext = kafka.security_protocol == "PLAINTEXT"  # else only TCP: no request before TLS/SASL
    watch = BrokerWatch(str(kafka.bootstrap), _broker_news, kafka=plaintext, probe_s=_PROBE_S)
    checked = time.monotonic()
    while True:
        was = watch.reachable
        await watch.check()
        if watch.reachable and (not was or time.monotonic() - checked >= TOPICS_CHECK_S):
            checked = time.monotonic()
            refused = await _topics_back(kafka, prefix, serving, plaintext=plaintext)
            if refused is not None:
                return refused
        await asyncio.sleep(_PROBE_S)


async def _topics_back(
    kafka: KafkaConfig, prefix: str, serving: Sequence[Stack], *, plaintext: bool
) -> str | None:
    """Create the catalog's topics the broker lost, as ``up`` does at its start (missing
    ones sized as the existing session topics), and have the processors read them from
    their beginning (one that never saw them missing would go on at its old positions);
    None, or why ``up`` must stop: the broker answers but refuses to create them, or its
    session topics disagree."""
    try:
        async with KafkaAdmin(kafka) as admin:
            if not await admin.missing(Catalog.load().with_overrides(prefix=prefix).names()):
                return None
        created = await provision(kafka, prefix, _broker_news, announce=False)
    except ConfigError as exc:
        return f"the topics at {kafka.bootstrap} changed under up: {exc}"
    except BrokerError as exc:
        if not await answers(str(kafka.bootstrap), kafka=plaintext):
            return None  # away again: the watch says so, and checks once it is back
        return (
            f"the broker at {kafka.bootstrap} lacks some of the catalog's topics (did it "
            f"come back empty?) and up cannot create them: {exc}. Create them (`hermesbus "
            "topics apply`, or whoever may) and start up again"
        )
    if created:
        _broker_news(
            f"{len(created)} of the catalog's topics were missing at {kafka.bootstrap} (did "
            f"it come back empty? their messages and the groups' offsets are gone); created "
            f"again: {', '.join(sorted(created))}"
        )
        await _read_again(serving, set(created), kafka.request_timeout_ms / 1000)
    return None


async def _read_again(serving: Sequence[Stack], topics: set[str], timeout_s: float) -> None:
    """Have every processor and the indexer read ``topics`` from their beginning; one that
    fails, or all that take over ``timeout_s``, is said, and the watch goes on."""
    parts: list[Processor | Indexer] = []
    for running in serving:
        parts += running.parts()
    try:
        async with asyncio.timeout(timeout_s):
            told = await asyncio.gather(
                *(part.logs_made_again(topics) for part in parts), return_exceptions=True
            )
    except TimeoutError:
        _broker_news(f"telling the processors of the topics made again took over {timeout_s:g} s")
        return
    for part, outcome in zip(parts, told, strict=True):
        if isinstance(outcome, BaseException):
            _broker_news(
                f"{part.name} could not be told of the topics made again ({outcome!r}): it "
                "reads on from its old positions, past the new logs' first records"
            )


def _broker_news(line: str) -> None:
    err_console.print(f"[yellow]broker:[/yellow] {escape(line)}", soft_wrap=True)


class _Progress:
    """Prints each start-up step with the seconds since ``up`` began; a spinner says what runs."""

    NEXT: ClassVar[dict[str, str]] = {
        "state": "the broker",
        "metrics": "topics",
        "spans": "topics",
        "broker up": "topics",
        "signing keys": "topics",
        "topics ready": "the trace index",
        "trace index": "the consumer groups and the tools",
        "tools ready": "the consumer groups",
    }

    def __init__(self) -> None:
        self.began = time.monotonic()
        self.status: Status | None = None

    def __call__(self, step: str) -> None:
        seconds = time.monotonic() - self.began
        err_console.print(f"[dim]{seconds:5.1f}s[/dim]  {escape(step)}", soft_wrap=True)
        if self.status is not None:
            upcoming = self.NEXT.get(step.split(":", 1)[0], "the consumer groups")
            self.status.update(f"starting: {upcoming}")

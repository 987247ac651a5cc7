"""``hermesbus replay --shadow``: today's processors over a recorded slice, compared."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import orjson
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

from hermesbus.base.lifecycle import tune_collector
from hermesbus.compose.flows import (
    FlowCopy,
    RegistryCatalog,
    bundled,
    catalog_of,
    copied_catalog,
    flow_copies,
)
from hermesbus.compose.redrive import Fork, external_inputs, redrive, sandbox_home
from hermesbus.compose.settings import Settings
from hermesbus.compose.stack import REPLAYABLE, shadows
from hermesbus.contract.envelope import Envelope
from hermesbus.contract.payloads import UserTurn
from hermesbus.processors.flow import FlowCatalog
from hermesbus.processors.protocol import ProtocolPolicy
from hermesbus.processors.recorded import without_flow_version
from hermesbus.replay.bundle import read_bundle
from hermesbus.replay.sandbox import MARKER
from hermesbus.replay.shadow import (
    Recording,
    ShadowReport,
    shadow,
)
from hermesbus.topics import CONVERSATION_IN

from ._common import (
    BootstrapOption,
    HomeOption,
    PrefixOption,
    console,
    err_console,
    errors,
    fail,
    json_safe,
    kafka_with,
    program_settings,
    shown,
)
from ._sources import Slice, read_sessions
from ._when import TIMES, parse_when

__all__ = ["replay_command"]

_NOTHING_COMPARED = (
    "nothing to compare: no input of the slice reached the processors replayed; check "
    "--from/--to, --trace, --offsets and --processor (exit 1: no verdict)"
)
_SHOW_PROGRESS_FROM = 500
"""Inputs from which a replay shows a progress bar (on a terminal)."""


def replay_command(
    session: Annotated[
        list[str] | None, typer.Option(help="Replay this session (repeatable).")
    ] = None,
    trace: Annotated[
        str | None, typer.Option(help="Compare only this trace (its sessions are replayed).")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--from", help=f"Compare from this log time: {TIMES}."),
    ] = None,
    until: Annotated[
        str | None, typer.Option("--to", help="Compare up to this log time (excluded).")
    ] = None,
    offsets: Annotated[
        list[str] | None,
        typer.Option(
            help="Compare only TOPIC:PARTITION:FIRST-LAST (offsets, inclusive; repeatable)."
        ),
    ] = None,
    shadow_mode: Annotated[
        bool,
        typer.Option(
            "--shadow",
            help="Re-run the processors' current code on what they consumed and compare "
            "what they emit with what they emitted then (no tool runs, nothing is written).",
        ),
    ] = False,
    redrive_mode: Annotated[
        bool,
        typer.Option(
            "--redrive",
            help="Copy the slice's user turns into sandbox topics (--into) and run the "
            "processors there, with tools answering as recorded.",
        ),
    ] = False,
    into: Annotated[
        str | None,
        typer.Option(help="The sandbox's topic and group prefix, e.g. replay-1. (--redrive)."),
    ] = None,
    fork: Annotated[
        str | None,
        typer.Option(help="A redrive with this user turn (message id) changed by --set."),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="FIELD=VALUE of the forked turn, e.g. payload.body.text=…"),
    ] = None,
    live_tools: Annotated[
        bool,
        typer.Option(help="In a redrive, run the registered tools for real (not as recorded)."),
    ] = False,
    reply_timeout: Annotated[
        float, typer.Option(help="Seconds a redrive waits for each turn's answer.")
    ] = 60.0,
    processor: Annotated[
        list[str] | None,
        typer.Option(help=f"Only this processor (repeatable): {', '.join(REPLAYABLE)}."),
    ] = None,
    flow_version: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="With --shadow: replay each session of a registered flow against this "
            "version of its flow (the recorded version otherwise), to check a flow change "
            "against recorded traffic; the version numbers themselves are not compared.",
        ),
    ] = None,
    live_model: Annotated[
        bool,
        typer.Option(
            help="With --shadow: ask the model behind HERMES_LLM_URL again for every agent "
            "state's round (not its recorded answer), to compare a new model against "
            "recorded traffic: where it answers otherwise, the replay diverges.",
        ),
    ] = False,
    source: Annotated[
        str,
        typer.Option(
            help="Where to read: broker, archive (the trace index) or auto (the broker when "
            "one is configured and has the records, else the archive)."
        ),
    ] = "auto",
    bundle: Annotated[
        Path | None,
        typer.Option(help="Replay an exported bundle (`hermesbus export`): no broker needed."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be read and run; run nothing.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON document, for scripts.")
    ] = False,
    bootstrap: BootstrapOption = None,
    prefix: PrefixOption = "",
    home: HomeOption = None,
) -> None:
    """Replay a slice of the log: a session, a trace, a time range or offsets.

    Every session concerned is replayed from its first envelope, so each processor has
    the state it had before the slice; only the slice is compared. Exit 0: no
    divergence; 1: the first divergence is printed (envelope, field path, recorded and
    replayed values).
    """
    redriving = redrive_mode or fork is not None
    _check_modes(shadow_mode, redriving, into, fork, set_)
    shadow_only = [
        name
        for name, given in (
            ("--flow-version", flow_version is not None),
            ("--live-model", live_model),
        )
        if given
    ]
    if shadow_only and redriving:
        raise fail(f"{shadow_only[0]} replays in the shadow (--shadow), not in a redrive", 2)
    changes = Fork(fork, dict(_assignment(text) for text in set_ or ())) if fork else None
    if source not in ("auto", "broker", "archive"):
        raise fail(f"--source {source!r}: use broker, archive or auto", 2)
    if not session and trace is None and bundle is None and since is None and until is None:
        if not offsets:
            raise fail(
                "choose what to replay: --session, --trace, --from/--to, --offsets or --bundle",
                2,
            )
    now = int(time.time() * 1000)  # what -15m counts back from
    chosen = Slice(
        trace=trace,
        since_ms=parse_when(since, now, "--from"),
        until_ms=parse_when(until, now, "--to"),
        offsets=tuple(_offsets(text) for text in offsets or ()),
    )
    names = tuple(processor or REPLAYABLE)
    with errors():
        settings = program_settings(bootstrap)
        if live_model and not settings.conversation.llm_url:
            raise fail("--live-model asks the model behind HERMES_LLM_URL, which is not set", 2)
        carried: list[FlowCopy] = []  # a bundle's flow versions
        if bundle is not None:
            opened = read_bundle(bundle)
            recording, prefix = opened.recording(), opened.prefix
            carried = bundled(opened.flows, str(bundle))
            sessions = [*opened.sessions, *(session or ())]
        else:
            across = [prefix + REPLAYABLE["memory"]] if "memory" in names else []
            found = asyncio.run(
                read_sessions(
                    settings,
                    source,
                    bootstrap,
                    prefix,
                    list(session or ()),
                    trace,
                    across,
                    chosen=chosen,
                )
            )
            recording, sessions = found.recording(prefix), found.sessions
        if not any(hop.envelope.session_id in sessions for hop in recording.hops):
            raise fail(_nothing(sessions, chosen, recording.source))
        if redriving and into is not None:
            _redrive(
                settings,
                recording,
                sessions,
                chosen,
                into,
                prefix,
                changes,
                live_tools,
                reply_timeout,
                dry_run,
                bootstrap,
                carried,
            )
            return
        if dry_run:
            _dry_run(recording, sessions, names, chosen, prefix, as_json)
            return
        tune_collector()  # a long replay makes many objects: rare collections, as `up` does
        flows = catalog_of(carried) if carried else _flows(settings, bootstrap, prefix)
        if flow_version is not None:
            asyncio.run(_has_version(flows, recording, sessions, flow_version))
        report = asyncio.run(
            _shadow(
                settings,
                recording,
                sessions,
                names,
                chosen,
                prefix,
                flows,
                flow_version,
                live_model=live_model,
            )
        )
    _print(report, recording, sessions, as_json)
    if report.diverged or not sum(report.compared.values()):
        raise typer.Exit(1)


def _check_modes(
    shadow_mode: bool, redriving: bool, into: str | None, fork: str | None, set_: list[str] | None
) -> None:
    """One way to replay, with what it needs; else exit 2 saying what to pass."""
    if shadow_mode and redriving:
        raise fail(
            "--shadow and --redrive/--fork are two ways to replay, one at a time: --shadow "
            "re-runs the code and compares, writing nothing; --redrive --into PREFIX runs "
            "the turns again in sandbox topics",
            2,
        )
    if not shadow_mode and not redriving:
        raise fail(
            "say how to replay: --shadow (re-run and compare, writing nothing) or --redrive "
            "--into PREFIX (run again in sandbox topics; --fork changes one turn)",
            2,
        )
    if redriving and not into:
        raise fail("--redrive and --fork need --into PREFIX: the sandbox's topics and groups", 2)
    if fork is not None and not set_:
        raise fail("--fork needs at least one --set FIELD=VALUE (e.g. payload.body.text=...)", 2)


def _assignment(text: str) -> tuple[str, str]:
    field_, sep, value = text.partition("=")
    if not sep or not field_.strip():
        raise fail(f"--set {text!r}: use FIELD=VALUE, e.g. payload.body.text=先不提交", 2)
    return field_.strip(), value


def _redrive(
    settings: Settings,
    recording: Recording,
    sessions: list[str],
    chosen: Slice,
    into: str,
    prefix: str,
    changes: Fork | None,
    live_tools: bool,
    reply_timeout: float,
    dry_run: bool,
    bootstrap: str | None,
    carried: Sequence[FlowCopy],
) -> None:
    sandbox = into if into.endswith(".") else into + "."
    home = sandbox_home(settings.home, sandbox)
    turns = external_inputs(recording, sessions, prefix, selected=chosen.keeps)
    if dry_run:
        console.print(
            f"would read {len(recording)} envelopes from {shown(recording.source)}", soft_wrap=True
        )
        console.print(
            f"would copy {len(turns)} user turns to {shown(sandbox + CONVERSATION_IN)}:",
            soft_wrap=True,
        )
        for hop in turns:
            changed = changes is not None and changes.message_id == hop.envelope.message_id
            mark = (
                f"  (forked: {', '.join(f'{k}={v}' for k, v in changes.sets.items())})"
                if changed and changes
                else ""
            )
            console.print(
                shown(f"  {hop.envelope.message_id}  {_said(hop.envelope)}{mark}"), soft_wrap=True
            )
        groups = ", ".join(sandbox + name for name in (*REPLAYABLE, "indexer"))
        console.print(shown(f"would run groups {groups} on topics {sandbox}*"), soft_wrap=True)
        console.print(
            shown(f"would keep the sandbox's state and trace index in {home}"), soft_wrap=True
        )
        console.print(
            "would write nothing of the bus's own: its topics, groups and stores stay as they are"
        )
        console.print(
            shown(
                f"would refuse {sandbox} if it has topics or consumer groups and is not a "
                f"sandbox a redrive marked ({sandbox}{MARKER})"
            ),
            soft_wrap=True,
        )
        return
    if bootstrap:
        settings = settings.with_parts(kafka=kafka_with(settings, bootstrap))
    done = asyncio.run(
        redrive(
            recording,
            sessions,
            settings,
            into=sandbox,
            source_prefix=prefix,
            fork=changes,
            live_tools=live_tools,
            reply_timeout_s=reply_timeout,
            selected=chosen.keeps,
            carried=carried,
        )
    )
    for envelope in done.sent:
        console.print(shown(f"user    {_said(envelope)}"), soft_wrap=True)
        for source, text in done.replies.get(envelope.message_id, []):
            who = "hermes" if source.startswith("conversation:") else "notice"  # as up says
            console.print(shown(f"{who}  {text}"), soft_wrap=True)
        if envelope.message_id in done.unanswered:
            console.print(f"[red]no answer within {reply_timeout:g} s[/red]")
    where = (
        f"the embedded broker (gone now; {home / 'index.sqlite3'} keeps the records)"
        if done.embedded
        else done.bootstrap
    )
    if done.flows:
        console.print(shown(f"flows copied: {_versions(done.flows)}"), soft_wrap=True)
    ran = f"topics {sandbox}* and groups {sandbox}* on {where}"
    console.print(shown(f"sandbox {sandbox}: {ran}; state in {home}"), soft_wrap=True)
    for forked_ in done.forks:
        both = f"hermesbus trace {forked_['trace']} --sandbox {sandbox}"
        line = f"fork: {forked_['fork']} replaces {forked_['original']}; both branches: {both}"
        console.print(shown(line), soft_wrap=True)
    if done.unanswered:
        raise typer.Exit(1)


def _versions(copied: Sequence[str]) -> str:
    """``["a v1", "a v2", "b v1"]`` -> ``a v1, v2, b v1``."""
    said, last = [], ""
    for name in copied:
        flow, _, version = name.rpartition(" ")
        said.append(version if flow == last else name)
        last = flow
    return ", ".join(said)


def _said(envelope: Envelope) -> str:
    body = envelope.payload.body
    return body.text if isinstance(body, UserTurn) else type(body).__name__


def _nothing(sessions: Sequence[str], chosen: Slice, where: str) -> str:
    what = f"session {', '.join(sessions)}" if sessions else f"trace {chosen.trace}"
    return (
        f"no envelope of {what} in {where}: check the id and --prefix (the embedded broker "
        "keeps nothing once `up` stops; the trace index does)"
    )


def _offsets(text: str) -> tuple[str, int, int, int]:
    try:
        topic, part, span = text.rsplit(":", 2)
        first, _, last = span.partition("-")
        return topic, int(part), int(first), int(last or first)
    except ValueError:
        raise fail(f"--offsets {text!r}: use TOPIC:PARTITION:FIRST-LAST", 2) from None


def _flows(settings: Settings, bootstrap: str | None, prefix: str) -> FlowCatalog | None:
    """The flow registry of the bus replayed (read when a flow session needs it); without
    a broker, the copies of it the state folder keeps (``flows/``); None without either:
    sessions of a registered flow then cannot be replayed."""
    kafka, copies = kafka_with(settings, bootstrap), flow_copies(settings.home, prefix)
    if kafka.bootstrap:
        return RegistryCatalog(kafka, prefix, settings.keys.load, copies=copies)
    return copied_catalog(copies) if copies.is_dir() else None


async def _has_version(
    flows: FlowCatalog | None, recording: Recording, sessions: Sequence[str], version: int
) -> None:
    """--flow-version names a version each replayed flow has (else exit 2, naming it)."""
    ran = recording.flows(sessions)
    if not ran:
        raise fail("--flow-version: none of the sessions replayed runs a registered flow", 2)
    if flows is None:
        raise fail(
            "--flow-version needs the bus's flow registry: its broker (--bootstrap), or the "
            "copies its state folder keeps (--home)",
            2,
        )
    for name in sorted(ran):
        if await flows.version(name, version) is None:
            raise fail(f"--flow-version {version}: flow {name} has no such version", 2)


async def _shadow(
    settings: Settings,
    recording: Recording,
    sessions: list[str],
    names: Sequence[str],
    chosen: Slice,
    prefix: str,
    flows: FlowCatalog | None = None,
    flow_version: int | None = None,
    *,
    live_model: bool = False,
) -> ShadowReport:
    wiring = shadows(
        settings,
        names,
        prefix=prefix,
        flows=flows,
        flow_version=flow_version,
        live_model=live_model,
    )
    async with wiring as wired:
        with _progress() as tick:
            return await shadow(
                recording,
                wired,
                selected=chosen.keeps,
                sessions=sessions,
                policy=ProtocolPolicy(),
                prefix=prefix,
                progress=tick,
                applied_window=settings.runtime.applied_window,
                normalise=without_flow_version if flow_version is not None else None,
            )


@contextmanager
def _progress() -> Iterator[Callable[[int, int], None]]:
    """A bar on stderr for long replays on a terminal; nothing otherwise."""
    if not err_console.is_terminal:
        yield lambda done, total: None
        return
    bar = Progress(
        "replaying",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
    )
    task = None
    with bar:

        def tick(done: int, total: int) -> None:
            nonlocal task
            if total < _SHOW_PROGRESS_FROM:
                return
            if task is None:
                task = bar.add_task("replay", total=total)
            bar.update(task, completed=done)

        yield tick


def _dry_run(
    recording: Recording,
    sessions: list[str],
    names: Sequence[str],
    chosen: Slice,
    prefix: str,
    as_json: bool,
) -> None:
    per: dict[str, dict[str, int]] = {}
    for name in names:
        topic = prefix + REPLAYABLE[name]
        inputs = [h for h in recording.hops if h.topic == topic]
        mine = [h for h in inputs if h.envelope.session_id in sessions]
        per[name] = {
            "inputs": len(inputs if name == "memory" else mine),
            "compared": sum(1 for h in mine if chosen.keeps(h)),
        }
    answer = {
        "source": recording.source,
        "sessions": sessions,
        "records": len(recording),
        "processors": per,
        "writes": "nothing: a shadow replay writes no topic and no store "
        "(memory's stores are in a temporary folder)",
    }
    if as_json:
        sys.stdout.buffer.write(json_safe(orjson.dumps(answer).decode()).encode() + b"\n")
        return
    console.print(
        f"would read {len(recording)} envelopes from {shown(recording.source)}", soft_wrap=True
    )
    console.print(f"sessions: {shown(', '.join(sessions)) or 'none'}", soft_wrap=True)
    for name, counts in per.items():
        console.print(f"  {name}: run {counts['inputs']} inputs, compare {counts['compared']}")
    console.print(f"would write {answer['writes']}")


def _print(report: ShadowReport, recording: Recording, sessions: list[str], as_json: bool) -> None:
    if as_json:
        answer = {
            "source": recording.source,
            "sessions": sessions,
            "replayed": report.replayed,
            "compared": report.compared,
            "outputs": report.outputs,
            "divergences": [d.as_json() for d in report.divergences],
        }
        sys.stdout.buffer.write(json_safe(orjson.dumps(answer).decode()).encode() + b"\n")
        return
    ran = ", ".join(
        f"{name} {report.compared[name]}/{report.replayed[name]}" for name in report.replayed
    )
    console.print(
        f"replayed {len(sessions)} session(s) from {shown(recording.source)}: inputs "
        f"compared/run: {ran}; {report.outputs} outputs compared",
        soft_wrap=True,
    )
    if not sum(report.compared.values()):
        console.print(_NOTHING_COMPARED)
        return
    if not report.diverged:
        console.print("no divergence")
        return
    first, *others = report.divergences
    for line in first.lines():
        console.print(shown(line), soft_wrap=True)
    for other in others:
        console.print(shown(f"also: {other.lines()[0]}, field {other.path or '-'}"), soft_wrap=True)

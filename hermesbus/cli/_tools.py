"""``hermesbus tools register|list|health``: the tool registry from the command line."""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import json
import math
import shlex
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError
from rich.table import Table

from hermesbus.base.storemark import MarkBook
from hermesbus.compose.backends import tool_store, tool_store_exists
from hermesbus.compose.settings import Settings
from hermesbus.compose.stack import tool_environ
from hermesbus.connectors.sqlite.tools import SqliteToolStore
from hermesbus.errors import AdmissionError, ConfigError
from hermesbus.processors.dispatcher import result_notices
from hermesbus.processors.tool import (
    FAULTS,
    ChaosReport,
    McpDocument,
    McpServer,
    ToolRegistry,
    ToolService,
    ToolSpec,
    chaos,
)
from hermesbus.processors.tool.demo import demo_specs, register_demo

from ._common import console, errors, fail, problems, program_settings

app = typer.Typer(help="Tools: admission, the registry and live health.", no_args_is_help=True)

HomeOption = Annotated[
    Path | None,
    typer.Option("--home", help="State folder; default: HERMES_HOME, else the user data folder."),
]
FileOption = Annotated[Path | None, typer.Option(exists=True, dir_okay=False)]


_HOW = {
    "name": "pass --name NAME (or 'name:' in the spec file)",
    "kind": "pass --python MODULE:FUNCTION or --url URL (or 'kind:' and 'target:')",
    "target": "pass --python MODULE:FUNCTION or --url URL (or 'kind:' and 'target:')",
    "input_schema": "pass --schema-file FILE with 'input' and 'output'",
    "output_schema": "pass --schema-file FILE with 'input' and 'output'",
    "health": "pass --health MODULE:FUNCTION (python) or PATH (http)",
    "verifier": "pass --verifier MODULE:FUNCTION",
    "fallback": "pass --fallback cache|mock|proxy|none",
    "signature": "pass --sign-alg hmac-sha256|ed25519 and --key-env VARIABLE",
}
"""How each field of a spec is given on the command line, for refusals."""
_NOTHING = (
    "nothing to register: give a spec file (`hermesbus tools register spec.yaml`), "
    "flags (--name, --python MODULE:FUNCTION or --url URL, --schema-file, --health, "
    "--verifier, --fallback), or --demo; `hermesbus tools register --help` lists them all"
)


def _settings(home: Path | None) -> Settings:
    """The program's settings, with ``--home`` (``home``) as the state folder if given."""
    settings = program_settings()
    return settings.at_home(home) if home is not None else settings


def _load(path: Path) -> Any:
    """A YAML or JSON file (JSON is YAML)."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc


_KINDS = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
"""What a YAML document that is not a mapping is, in words."""


def _document(spec_file: Path | None) -> dict[str, Any]:
    """The spec file's mapping ({} without a file); anything but a mapping is refused."""
    if spec_file is None:
        return {}
    document = _load(spec_file)
    if document is None:
        return {}
    if not isinstance(document, dict):
        kind = _KINDS.get(type(document), type(document).__name__)
        raise ConfigError(f"{spec_file}: a tool spec is a mapping (name:, kind:, ...), not {kind}")
    return dict(document)


def _fallback(
    current: Any, strategy: str | None, stale: float | None, mock: Path | None, backup: str | None
) -> Any:
    fallback = dict(current or {})
    for key, value in (("strategy", strategy), ("stale_after_s", stale), ("backup", backup)):
        if value is not None:
            fallback[key] = value
    if mock is not None:
        fallback["mock_result"] = _load(mock)
    return fallback or None


def _spec(data: dict[str, Any], schema_file: Path | None) -> ToolSpec:
    if schema_file is not None:
        schemas = _load(schema_file)
        if not isinstance(schemas, dict):
            raise ConfigError(f"{schema_file} must hold an object with 'input' and 'output'")
        data.setdefault("input_schema", schemas.get("input") or schemas.get("input_schema"))
        data.setdefault("output_schema", schemas.get("output") or schemas.get("output_schema"))
    try:
        return ToolSpec.model_validate({k: v for k, v in data.items() if v is not None})
    except ValidationError as exc:
        lines = problems(exc, _HOW)
        raise ConfigError("invalid tool spec:" + "".join(f"\n  {line}" for line in lines)) from exc


@contextlib.asynccontextmanager
async def _scratch(settings: Settings, debug: bool) -> AsyncIterator[ToolService]:
    """A tool service of its own over a scratch SQLite store, for chaos: the faults'
    failures never count in the bus's health, and nothing it stores or starts is kept."""
    with tempfile.TemporaryDirectory(prefix="hermes-chaos-") as scratch:
        home = Path(scratch)
        tool_settings = settings.tool.model_copy(update={"home": home})
        store = SqliteToolStore(settings=tool_settings, book=MarkBook(home))
        environ = tool_environ(settings, fresh=False, copying=True)  # the demo's keys too
        async with ToolService(store, tool_settings, environ=environ, debug=debug or None) as tools:
            yield tools


async def _proven(tools: ToolService, names: list[str], budget_s: float) -> list[ChaosReport]:
    """Each tool of ``tools`` run through every fault; a tool that cannot be is refused."""
    reports = []
    for name in names:
        try:
            reports.append(await chaos(tools, name, budget_s=budget_s, recover_s=_RECOVER_S))
        except ValueError as exc:
            raise AdmissionError(f"tool {name!r} cannot be checked with --chaos: {exc}") from exc
    return reports


def _refuse_unproven(reports: list[ChaosReport]) -> None:
    """Show each report; refuse (nothing stored) when a tool's fallback missed a fault."""
    for report in reports:
        _show(report)
    failed = [report.tool for report in reports if not report.passed]
    if failed:
        raise AdmissionError(
            f"refused: the fallback of {', '.join(failed)} did not answer every injected "
            "fault (above); nothing was registered"
        )


async def _register(
    settings: Settings, debug: bool, spec: ToolSpec | None, *, proven: bool = False
) -> list[str]:
    if proven:
        specs = demo_specs() if spec is None else [spec]
        async with _scratch(settings, debug) as scratch:
            for candidate in specs:
                await scratch.register(candidate)
            _refuse_unproven(await _proven(scratch, [s.name for s in specs], _BUDGET_S))
    async with tool_store(settings) as store:
        registry = ToolRegistry(store, settings.tool, debug=debug or None)
        if spec is None:
            return await register_demo(registry)
        return [(await registry.register(spec)).name]


def _mcp_server(document: McpDocument, stdio: str | None, url: str | None) -> McpServer:
    """The server the command line names (``--mcp-stdio`` split like a shell would, never
    run by one), with the spec file's name, environment and memory limit."""
    target: dict[str, Any]
    if stdio is not None:
        try:
            command = tuple(shlex.split(stdio))
        except ValueError as exc:
            raise fail(f"--mcp-stdio {stdio!r} cannot be split into a command: {exc}", 2) from exc
        if not command:
            raise fail("--mcp-stdio is empty: give the server's command and arguments", 2)
        transport, target = "stdio", {"command": command}
    else:
        transport, target = "http", {"url": str(url)}
    try:
        return McpServer.model_validate(
            {"name": document.server, "transport": transport, **target,
             "memory_limit_mb": document.memory_limit_mb}
        )  # fmt: skip
    except ValidationError as exc:
        lines = problems(exc)
        raise ConfigError("invalid MCP server:" + "".join(f"\n  {line}" for line in lines)) from exc


async def _register_mcp(
    settings: Settings,
    debug: bool,
    document: McpDocument,
    server: McpServer,
    *,
    proven: bool = False,
) -> list[str]:
    if proven:
        async with _scratch(settings, debug) as scratch:
            names = [spec.name for spec in await scratch.register_mcp(document, server)]
            _refuse_unproven(await _proven(scratch, names, _BUDGET_S))
    environ = settings.tool_env.revealed()
    async with ToolService(
        tool_store(settings), settings.tool, environ=environ, debug=debug or None
    ) as tools:
        return [spec.name for spec in await tools.register_mcp(document, server)]


@app.command("register")
def register_command(
    spec_file: Annotated[
        Path | None, typer.Argument(help="A spec file (YAML or JSON).", exists=True, dir_okay=False)
    ] = None,
    name: Annotated[str | None, typer.Option(help="The tool's name.")] = None,
    python: Annotated[
        str | None,
        typer.Option(
            help="A python tool: module:function. Its code runs with the processor's rights; "
            "its module must be on HERMES_TOOL_MODULES."
        ),
    ] = None,
    url: Annotated[str | None, typer.Option(help="An HTTP tool: its base URL.")] = None,
    schema_file: Annotated[
        Path | None, typer.Option(help="YAML/JSON with 'input' and 'output' JSON Schemas.")
    ] = None,
    verifier: Annotated[str | None, typer.Option(help="module:function(result) -> bool.")] = None,
    health: Annotated[
        str | None, typer.Option(help="python: the probe module:function; http: its path.")
    ] = None,
    fallback: Annotated[str | None, typer.Option(help="cache, mock, proxy or none.")] = None,
    stale_after: Annotated[float | None, typer.Option(help="cache: seconds.")] = None,
    mock_file: FileOption = None,
    backup: Annotated[str | None, typer.Option(help="proxy: URL or module:function.")] = None,
    sign_alg: Annotated[str | None, typer.Option(help="hmac-sha256 or ed25519.")] = None,
    key_env: Annotated[str | None, typer.Option(help="The variable that holds the key.")] = None,
    sensitive: Annotated[
        list[str] | None, typer.Option(help="A word results must not hold.")
    ] = None,
    env: Annotated[
        list[str] | None,
        typer.Option(help="python: a variable (name) the worker may see; repeat for more."),
    ] = None,
    timeout: Annotated[float | None, typer.Option(help="Seconds per call.")] = None,
    memory_mb: Annotated[int | None, typer.Option(help="python: memory limit (MB).")] = None,
    max_result_bytes: Annotated[
        int | None, typer.Option(help="Larger results are truncated.")
    ] = None,
    mcp_stdio: Annotated[
        str | None,
        typer.Option(
            help="An MCP server run as a child process: its command and arguments "
            "(split like a shell would, never run by one); the spec file says the rest."
        ),
    ] = None,
    mcp_url: Annotated[
        str | None, typer.Option(help="An MCP server over streamable HTTP: its URL.")
    ] = None,
    demo: Annotated[bool, typer.Option(help="Register the six demo tools.")] = False,
    debug: Annotated[bool, typer.Option(help="Debug mode: admit fallback 'none'.")] = False,
    chaos_first: Annotated[
        bool,
        typer.Option(
            "--chaos",
            help="First run each tool through injected faults (`tools chaos`, with its "
            "sample_arguments): refused unless its fallback answers every one.",
        ),
    ] = False,
    home: HomeOption = None,
) -> None:
    """Admit a tool (spec file and/or flags); exits 1 with the reason when it is refused.

    Registering a python tool (its target, probe, verifier or backup) means the tool
    processor will import and run that code with its own rights: only modules under
    HERMES_TOOL_MODULES (comma-separated prefixes; default: the demo tools) are admitted.
    Its worker sees only PATH, HOME, LANG, LC_*, TZ, PYTHONPATH and the --env variables.

    --mcp-stdio "COMMAND ARGS" or --mcp-url URL with a spec file (server:, probe:,
    defaults:, tools:, skip:) lists an MCP server's tools and admits each, its definition
    pinned: a server that later offers another one has the tool answered by its fallback
    until `hermesbus tools approve NAME`.
    """
    if mcp_stdio is not None or mcp_url is not None:
        with errors():
            names = _mcp_register(spec_file, mcp_stdio, mcp_url, home, debug, chaos_first)
        for registered in names:
            console.print(f"[green]registered[/green] {registered} (pinned)")
        return
    with errors():
        spec = None
        if not demo:
            data = _document(spec_file)
            flags = {
                "name": name, "verifier": verifier, "health": health, "timeout_s": timeout,
                "memory_limit_mb": memory_mb, "max_result_bytes": max_result_bytes,
            }  # fmt: skip
            data.update({k: v for k, v in flags.items() if v is not None})
            if python or url:
                data.update(kind="python" if python else "http", target=python or url)
            if sign_alg or key_env:
                data["signature"] = {"alg": sign_alg, "key_env": key_env}
            if sensitive:
                data["sensitive_words"] = sensitive
            if env:
                data["env"] = env
            data["fallback"] = _fallback(
                data.get("fallback"), fallback, stale_after, mock_file, backup
            )
            if spec_file is None and schema_file is None and not any(data.values()):
                raise fail(_NOTHING, 2)
            spec = _spec(data, schema_file)
        names = asyncio.run(_register(_settings(home), debug, spec, proven=chaos_first))
    for registered in names:
        console.print(f"[green]registered[/green] {registered}")


def _mcp_register(
    spec_file: Path | None,
    stdio: str | None,
    url: str | None,
    home: Path | None,
    debug: bool,
    proven: bool,
) -> list[str]:
    if stdio is not None and url is not None:
        raise fail("give --mcp-stdio or --mcp-url, not both", 2)
    if spec_file is None:
        raise fail(
            "an MCP server's tools need a spec file: the server's name, the probe call, and "
            "each tool's verifier and fallback (see `hermesbus tools register --help`)",
            2,
        )
    document = McpDocument.of(_document(spec_file), str(spec_file))
    server = _mcp_server(document, stdio, url)
    settings = _settings(home)
    return asyncio.run(_register_mcp(settings, debug, document, server, proven=proven))


def _no_state(settings: Settings) -> str | None:
    """What to say when no tool was ever registered here; reading must create nothing."""
    if tool_store_exists(settings):
        return None
    return f"no state yet at {settings.home}: no tools are registered"


@app.command("list")
def list_command(home: HomeOption = None) -> None:
    """Print every registered tool: kind, target, fallback, signature, limits."""
    with errors():
        settings = _settings(home)
        nothing = _no_state(settings)
        where, specs = asyncio.run(_list(settings)) if nothing is None else ("", [])
    if nothing is not None:
        console.print(nothing, soft_wrap=True)
        return
    table = Table(title=f"tools ({where})")
    columns = ("tool", "kind", "target", "fallback", "signature", "timeout", "memory", "cap", "pin")
    for column in columns:
        table.add_column(column)
    for spec in specs:
        fallback = spec.fallback.strategy if spec.fallback else "-"
        signature = spec.signature.alg if spec.signature else "-"
        memory = f"{spec.memory_limit_mb} MB" if spec.kind == "python" else "-"
        table.add_row(
            spec.name, spec.kind, spec.target, fallback, signature,
            f"{spec.timeout_s:g} s", memory, f"{spec.max_result_bytes} B", _pin(spec),
        )  # fmt: skip
    console.print(table)


def _pin(spec: ToolSpec) -> str:
    """An MCP tool's pin, and whether its server changed it since (awaiting approval)."""
    if spec.mcp is None:
        return "-"
    if spec.mcp.offered_pin is None:
        return spec.mcp.pin[:19]
    return f"[red]changed[/red] (`hermesbus tools approve {spec.name}`)"


async def _list(settings: Settings) -> tuple[str, list[ToolSpec]]:
    async with tool_store(settings) as store:
        return store.where, await store.list_specs()


@app.command("approve")
def approve_command(
    name: Annotated[str, typer.Argument(help="The MCP tool whose changed definition to admit.")],
    pin: Annotated[
        str | None,
        typer.Option(
            help="Approve only this offer (its sha256: pin, as shown): for scripts, no prompt."
        ),
    ] = None,
    home: HomeOption = None,
) -> None:
    """Show how an MCP tool's server changed the tool since it was pinned and, once you
    confirm (or --pin names exactly that offer), re-admit it with that definition: its
    description and schemas then reach models and checks, and it is probed at once.

    Until then a tool whose server offers another definition is unhealthy and its
    fallback answers (one alert was raised). Exits 1 when there is nothing to approve or
    the offer is not the one --pin names.
    """
    with errors():
        settings = _settings(home)
        if (nothing := _no_state(settings)) is not None:
            raise fail(nothing, 1)
        spec, offered_pin, diff = asyncio.run(_offer(settings, name))
    console.print(diff, markup=False, highlight=False, soft_wrap=True)
    console.print(f"offered now: {offered_pin}", highlight=False)
    if pin is None and not typer.confirm(f"approve this definition of {name}?", default=False):
        raise fail(f"{name} not approved: its fallback goes on answering", 1)
    if pin is not None and pin != offered_pin:
        raise fail(f"{name}'s server offers {offered_pin}, not {pin}: nothing approved", 1)
    with errors():
        probe = asyncio.run(_approve(settings, spec))
    said = "probe ok" if not probe else f"probe failed: {probe}"
    console.print(f"[green]approved[/green] {name} (pinned {offered_pin}; {said})")


def _diff(pinned: dict[str, Any], offered: dict[str, Any]) -> str:
    def lines(value: dict[str, Any]) -> list[str]:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).splitlines()

    return "\n".join(
        difflib.unified_diff(lines(pinned), lines(offered), "approved", "offered now", lineterm="")
    )


async def _offer(settings: Settings, name: str) -> tuple[ToolSpec, str, str]:
    """The tool as stored, the pin of what its server offers now, and the diff."""
    async with tool_store(settings) as store:
        spec = await store.get_spec(name)
        if spec is None:
            raise fail(f"tool {name!r} is not registered in {store.where}", 1)
    binding = spec.mcp
    if binding is None:
        raise fail(f"tool {name!r} is a {spec.kind} tool: only MCP tools are pinned", 1)
    if binding.offered is None or binding.offered_pin is None:
        raise fail(f"nothing to approve: {name}'s server offers the pinned definition", 1)
    return spec, binding.offered_pin, _diff(binding.definition, binding.offered)


def _approved(spec: ToolSpec) -> ToolSpec:
    """``spec`` re-admitted with the offer it records, pinned to it."""
    binding = spec.mcp
    if binding is None or binding.offered is None or binding.offered_pin is None:
        raise fail(f"nothing to approve for {spec.name}", 1)
    offered = binding.offered
    return spec.model_copy(
        update={
            "description": str(offered.get("description") or ""),
            "input_schema": offered.get("inputSchema"),
            "output_schema": offered.get("outputSchema") or spec.output_schema,
            "mcp": binding.model_copy(
                update={
                    "definition": offered, "pin": binding.offered_pin, "offered": None,
                    "offered_pin": None, "alerted": False,
                }
            ),
        }
    )  # fmt: skip


async def _approve(settings: Settings, shown: ToolSpec) -> str:
    """Admit the offer that was shown (``shown``), as long as the stored spec still holds
    that offer under that pin: a compare-and-set, read again when only the processor's
    bookkeeping changed meanwhile (its alert flag); probe it and say what its probe found
    wrong ("" when nothing)."""
    environ = settings.tool_env.revealed()
    async with ToolService(tool_store(settings), settings.tool, environ=environ) as tools:
        current = shown
        for _ in range(_APPROVE_TRIES):
            admitted = await tools.registry.admit(_approved(current))
            if await tools.store.replace_spec(current, admitted):
                return (await tools.probe(admitted)).error
            stored = await tools.store.get_spec(shown.name)
            if stored is None or _offer_of(stored) != _offer_of(shown):
                break
            current = stored
        raise fail(
            f"{shown.name} changed while it was being approved (its server offered another "
            "definition, or it was approved already): nothing approved; run approve again",
            1,
        )


def _offer_of(spec: ToolSpec) -> tuple[str | None, str | None]:
    return (spec.mcp.pin, spec.mcp.offered_pin) if spec.mcp else (None, None)


_APPROVE_TRIES = 3


_BUDGET_S = 1.0
"""What a call that waits out a fault gets, at most (seconds)."""
_RECOVER_S = 60.0
"""How long a tool has to answer itself again after a fault (seconds)."""


@app.command("chaos")
def chaos_command(
    name: Annotated[str, typer.Argument(help="The registered tool to run through faults.")],
    arguments: Annotated[
        str | None,
        typer.Option(help="A JSON object to call it with (default: its sample_arguments)."),
    ] = None,
    fault: Annotated[
        list[str] | None,
        typer.Option(help=f"Only this fault ({', '.join(FAULTS)}); repeat for more."),
    ] = None,
    budget: Annotated[
        float, typer.Option(help="Seconds a call that waits out a fault gets (at most).")
    ] = _BUDGET_S,
    recover: Annotated[
        float, typer.Option(help="Seconds the tool has to answer itself again after a fault.")
    ] = _RECOVER_S,
    home: HomeOption = None,
) -> None:
    """Run a tool through injected faults and say, per fault, whether its fallback answered
    with the right notice and the tool recovered; exits 1 when one did not.

    The faults: latency past the call's deadline, 503 answers, its process killed while a
    call waits on it, a hang, a result that fails verification. They run in a scratch tool
    service of its own (its own worker or server, its own store): the bus's tools, health
    and cache are not touched.
    """
    given: dict[str, Any] | None = None
    if arguments is not None:
        try:
            given = json.loads(arguments)
        except ValueError as exc:
            raise fail(f"--arguments is not JSON: {exc}", 2) from exc
        if not isinstance(given, dict):
            raise fail("--arguments must be a JSON object (the tool's arguments)", 2)
    unknown = [f for f in fault or [] if f not in FAULTS]
    if unknown:
        raise fail(f"unknown --fault {', '.join(unknown)}: the faults are {', '.join(FAULTS)}", 2)
    for flag, seconds in (("--budget", budget), ("--recover", recover)):
        if not math.isfinite(seconds) or seconds <= 0:
            raise fail(f"{flag} must be a number of seconds above 0 (got {seconds:g})", 2)
    with errors():
        settings = _settings(home)
        nothing = _no_state(settings)
        if nothing is not None:
            raise fail(nothing, 1)
        faults = tuple(fault) if fault else FAULTS
        report = asyncio.run(_chaos(settings, name, given, faults, (budget, recover)))
    _show(report)
    if report.baseline is None and not any(outcome.applies for outcome in report.outcomes):
        raise fail(f"{name}: none of these faults applies to it: nothing was injected", 1)
    if not report.passed:
        raise fail(f"{name}: its fallback did not answer every injected fault (above)", 1)
    console.print(f"[green]ok[/green]: every fault was answered by {name}'s fallback")


async def _chaos(
    settings: Settings,
    name: str,
    arguments: dict[str, Any] | None,
    faults: tuple[str, ...],
    seconds: tuple[float, float],
) -> ChaosReport:
    async with tool_store(settings) as store:
        spec = await store.get_spec(name)
    if spec is None:
        raise ConfigError(f"tool {name!r} is not registered (`hermesbus tools list`)")
    if arguments is None and spec.sample_arguments is None:
        raise fail(
            f"tool {name!r} has no sample_arguments: give --arguments '{{...}}' (a call it "
            "answers), or add sample_arguments to its spec",
            2,
        )
    async with _scratch(settings, settings.tool.debug) as scratch:
        await scratch.store.save_spec(spec)  # admitted already: run as registered
        budget_s, recover_s = seconds
        return await chaos(
            scratch, name, arguments, faults=faults, budget_s=budget_s, recover_s=recover_s
        )


def _show(report: ChaosReport) -> None:
    if report.baseline is not None:
        console.print(f"[red]{report.tool}[/red]: {report.baseline}", soft_wrap=True)
        return
    table = Table(title=f"chaos: {report.tool} (fallback: {report.strategy})")
    for column in ("fault", "injected", "answered", "the user is told", "recovered", "verdict"):
        table.add_column(column)
    for outcome in report.outcomes:
        result = outcome.result
        if not outcome.applies:
            table.add_row(outcome.fault, outcome.how, "-", "-", "-", "n/a")
            continue
        answered = "-" if result is None else f"{result.status_code} {result.fallback or 'itself'}"
        answered = f"{outcome.primary} → {answered}"
        if outcome.alerted:
            answered += ", alerted"
        told = "\n".join(result_notices(result)) if result is not None else "-"
        verdict = (
            "[green]ok[/green]"
            if outcome.passed
            else "[red]FAIL[/red]: " + "; ".join(outcome.problems)
        )
        recovered = "yes" if outcome.recovered else "no"
        table.add_row(outcome.fault, outcome.how, answered, told, recovered, verdict)
    console.print(table)


@app.command("health")
def health_command(home: HomeOption = None) -> None:
    """Probe every tool now and print latency, success rate, quota, healthy and slow."""
    with errors():
        settings = _settings(home)
        if (nothing := _no_state(settings)) is not None:
            raise fail(nothing, 1)
        rows = asyncio.run(_health(settings))
    if not rows:
        raise fail(f"no tools are registered in {settings.tool.tools_path}", 1)
    table = Table(title="tool health")
    for column in ("tool", "latency", "success", "quota", "healthy", "slow", "probe"):
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    console.print(table)


async def _health(settings: Settings) -> list[tuple[str, ...]]:
    environ = settings.tool_env.revealed()
    async with ToolService(tool_store(settings), settings.tool, environ=environ) as tools:
        probes = await tools.probe_all()
        rows: list[tuple[str, ...]] = []
        for name, probe in sorted(probes.items()):
            health = await tools.health(name)
            if health is None:
                continue
            quota = "-" if health.quota_remaining is None else str(health.quota_remaining)
            rows.append(
                (
                    name, f"{health.latency_ms:.0f} ms", f"{health.success_rate:.0%}", quota,
                    _yes(health.healthy), _yes(health.slow), probe.error or "ok",
                )
            )  # fmt: skip
        return rows


def _yes(flag: bool) -> str:
    return "[green]yes[/green]" if flag else "no"

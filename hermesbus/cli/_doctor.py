"""``hermesbus doctor``: is this machine ready to run the bus? Each check: ok, or what to do.

Checks, in order: the settings (every ``HERMES_*`` variable, read once: a malformed one
fails, named, and the checks that need the settings are skipped), Python, where state
lives, the signing keys, the broker (reachable, the Kafka protocol it speaks,
transactions), the topics against the catalog, the schema registry (if configured), the
trace index (and, on a configured broker, how far the indexer is behind), each store's
mark (one back empty fails, naming it) and the registered tools with a live health probe.
What is checked is what ``up`` would use: the stores and servers' clients come from
``hermesbus.compose.backends`` with the settings read here. Without a configured broker
the embedded one is started for the check, in a folder of its own, and stopped.
Read-only: doctor creates no state folder, key or topic.

Exit code 1 when something required is missing or broken (a ``FAIL`` line); ``warn`` lines
say what would degrade the bus but does not stop it.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import typer
from pydantic import ValidationError
from rich.markup import escape

from hermesbus.base.config import HOME_ENV, default_home, why_unwritable, without_userinfo
from hermesbus.compose.backends import (
    neo4j_driver,
    redis_client,
    schema_registry,
    tool_store,
    tool_store_exists,
)
from hermesbus.compose.homelock import held_by
from hermesbus.compose.settings import Settings
from hermesbus.connectors.kafka import KafkaConfig, kafka_reason
from hermesbus.connectors.neo4j.client import translated as translated_neo4j
from hermesbus.connectors.redis.client import translated as translated_redis
from hermesbus.errors import HermesError, RegistryError
from hermesbus.identity import KeySettings
from hermesbus.processors import protocol
from hermesbus.processors.protocol import ToolHealth
from hermesbus.processors.tool import ToolService, ToolSpec

from ._check import Check
from ._common import (
    HomeOption,
    PrefixOption,
    ServingBootstrapOption,
    console,
    errors,
    kafka_with,
    problems,
    program_settings,
    variables,
)
from ._doctor_broker import broker_checks
from ._doctor_flows import flows_check
from ._doctor_index import indexing_check, trace_index_check
from ._doctor_keys import key_file_check
from ._stores import store_checks

__all__ = ["Check", "doctor_command"]

MIN_PYTHON = (3, 11)
CHECK_TIMEOUT_S = 30.0
"""The longest any one check may take (a broker that does not answer, a slow registry)."""
NEED_SETTINGS = (
    "state",
    "signing keys",
    "broker",
    "schema registry",
    "trace index",
    "redis",
    "neo4j",
    "stores",
    "tools",
)
"""The checks that read the settings: skipped when they are invalid (python is not)."""
_SET_IT_RIGHT = "set the variable it names right"
_COLOURS = {"ok": "green", "warn": "yellow", "FAIL": "red", "skip": "dim"}


def doctor_command(
    bootstrap: ServingBootstrapOption = None,
    prefix: PrefixOption = "",
    home: HomeOption = None,
) -> None:
    """Check Python, state, keys, the broker, topics, schema registry and tools; say each fix."""
    with errors():
        read, settings = _settings(bootstrap)
        checks = asyncio.run(_doctor(read, settings, prefix, bootstrap))
    width = max(len(check.name) for check in checks)
    for check in checks:
        colour = _COLOURS[check.status]
        line = (
            f"[{colour}]{check.status:<4}[/{colour}]  {check.name:<{width}}  {escape(check.said)}"
        )
        if check.fix:
            line += f"\n      {'':<{width}}  [bold]fix:[/bold] {escape(check.fix)}"
        console.print(line, soft_wrap=True)
    failed = [check.name for check in checks if check.status == "FAIL"]
    if failed:
        console.print(f"doctor: {len(failed)} to fix: {', '.join(failed)}", soft_wrap=True)
        raise typer.Exit(1)
    console.print("doctor: ready", soft_wrap=True)


def _settings(bootstrap: str | None) -> tuple[Check, Settings | None]:
    """The first check: the program's settings, read once (``--bootstrap`` over the
    broker's), or a FAIL naming the malformed variable and no settings."""
    try:
        read = program_settings(bootstrap)
    except ValidationError as exc:
        said = "; ".join(variables(exc.title, problems(exc)))
        return Check("settings", "FAIL", f"invalid setting: {said}", _SET_IT_RIGHT), None
    except HermesError as exc:
        return Check("settings", "FAIL", str(exc), _SET_IT_RIGHT), None
    settings = read.with_parts(kafka=kafka_with(read, bootstrap))  # a bad flag: exit 2
    return Check("settings", "ok", "every HERMES_* variable is well-formed"), settings


async def _doctor(
    read: Check, settings: Settings | None, prefix: str, bootstrap: str | None
) -> list[Check]:
    checks = [read, _python()]
    if settings is None:  # what needs only a well-formed Kafka part is checked all the same
        alone = _kafka_alone(bootstrap)
        if alone is not None:
            kafka: KafkaConfig = alone
            checks += await _bounded("broker", lambda: broker_checks(kafka, prefix))
        said = "not checked: the settings are invalid (see settings)"
        done = {check.name for check in checks}
        return checks + [Check(name, "skip", said) for name in NEED_SETTINGS if name not in done]
    kafka = settings.kafka
    embedded = not kafka.bootstrap
    checks += await _bounded("state", lambda: _now(_state(settings.home)))
    keys = settings.keys
    checks += await _bounded("signing keys", lambda: _now(_keys(keys, embedded=embedded)))
    checks += await _bounded("broker", lambda: broker_checks(kafka, prefix))
    checks += await _bounded("schema registry", lambda: _now_in_thread(_registry, settings))
    checks += await _bounded("trace index", lambda: trace_index_check(settings))
    checks += await _bounded("redis", lambda: _redis(settings))
    checks += await _bounded("neo4j", lambda: _neo4j(settings))
    checks += await _bounded("stores", lambda: store_checks(settings))  # one back empty: gone
    broker_ok = any(check.name == "broker" and check.status == "ok" for check in checks)
    if not embedded and broker_ok:  # the embedded broker doctor starts holds no records
        checks += await _bounded("indexing", lambda: indexing_check(kafka, prefix))
        checks += await _bounded("flows", lambda: flows_check(settings, prefix))
    checks += await _bounded("tools", lambda: _tools(settings))
    return checks


def _kafka_alone(bootstrap: str | None) -> KafkaConfig | None:
    """The Kafka part read on its own (``--bootstrap`` over its bootstrap), when the
    settings as a whole are not well-formed; None if it is not either."""
    try:
        kafka = KafkaConfig(bootstrap=bootstrap) if bootstrap else KafkaConfig()
    except ValidationError:
        return None
    return kafka.given_by("--bootstrap") if bootstrap else kafka


async def _now(check: Check) -> list[Check]:
    return [check]


async def _now_in_thread(check: Callable[[Settings], Check], settings: Settings) -> list[Check]:
    """A blocking check, off the event loop, so the bound of ``_bounded`` holds."""
    return [await asyncio.to_thread(check, settings)]


async def _bounded(name: str, check: Callable[[], Awaitable[list[Check]]]) -> list[Check]:
    """``check()``; one FAIL line if it takes longer than CHECK_TIMEOUT_S, or if a backend
    (or a setting it alone checks) fails it: the other checks still run."""
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            return await check()
    except TimeoutError:
        return [Check(name, "FAIL", f"no answer within {CHECK_TIMEOUT_S:g} s")]
    except ValidationError as exc:
        said = "; ".join(variables(exc.title, problems(exc)))
        return [Check(name, "FAIL", f"invalid setting: {said}", _SET_IT_RIGHT)]
    except HermesError as exc:
        return [Check(name, "FAIL", str(exc))]


def _python() -> Check:
    version = ".".join(str(part) for part in sys.version_info[:3])
    need = ".".join(str(part) for part in MIN_PYTHON)
    if sys.version_info < MIN_PYTHON:
        return Check("python", "FAIL", f"{version} at {sys.executable}", f"use Python >= {need}")
    return Check("python", "ok", f"{version} (needs >= {need}) at {sys.executable}")


def _state(home: Path) -> Check:
    why = f"{HOME_ENV}" if home != default_home() else f"{HOME_ENV} unset: the per-user folder"
    if not home.exists():
        blocked = _uncreatable(home)
        if blocked is not None:
            return Check("state", "FAIL", f"{home} cannot be created: {blocked}", f"set {HOME_ENV}")
        return Check("state", "ok", f"{home} ({why}); not created yet: `hermesbus up` creates it")
    if not home.is_dir():
        return Check("state", "FAIL", f"{home} is not a folder", f"remove it or set {HOME_ENV}")
    probe = home / f".doctor-{uuid.uuid4().hex}"
    try:  # the only way to know a folder is writable is to write in it
        probe.touch()
        probe.unlink()
    except OSError as exc:
        return Check("state", "FAIL", f"{home} is not writable: {exc.strerror}", f"set {HOME_ENV}")
    stores = sorted(path.name for path in home.glob("*.sqlite3"))
    held = ", ".join(stores) if stores else "no stores yet"
    bus = held_by(home)  # up's lock: who runs a bus on these stores now
    running = f"; a bus runs on it: {bus.describe()}" if bus is not None else ""
    return Check("state", "ok", f"{home} ({why}): {held}{running}")


def _uncreatable(home: Path) -> str | None:
    """Why ``home`` could not be made: a file on its way (said as every command says it,
    :func:`why_unwritable`), or its nearest existing folder not writable."""
    parent = next(above for above in home.parents if above.exists())
    try:  # as for an existing home: the only way to know is to try (and leave nothing)
        Path(tempfile.mkdtemp(dir=parent, prefix=".doctor-")).rmdir()
    except OSError as exc:
        if not parent.is_dir():
            return why_unwritable(home, exc)
        return f"{parent} is not writable ({exc.strerror})"
    return None


def _keys(settings: KeySettings, *, embedded: bool) -> Check:
    try:
        keys = settings.load()
    except HermesError as exc:
        return Check("signing keys", "FAIL", str(exc), "fix or remove the file, then keys init")
    exposed = key_file_check(settings.file)
    if exposed is not None:
        return exposed
    missing = keys.lacking(protocol.IDENTITIES)
    if not missing:
        return Check(
            "signing keys", "ok", f"{len(protocol.IDENTITIES)} identities in {keys.source}"
        )
    if embedded:  # up makes them on the embedded broker
        said = f"none yet for {', '.join(missing)} in {keys.source}; `hermesbus up` makes them"
        return Check("signing keys", "ok", said)
    return Check(
        "signing keys",
        "FAIL",
        f"none for {', '.join(missing)} in {keys.source}",
        "run `hermesbus keys init` and give every process of the cluster that file "
        "(HERMES_KEYS_FILE), or set HERMES_KEY_<IDENTITY>",
    )


def _registry(settings: Settings) -> Check:
    registry = schema_registry(settings)
    if registry is None:
        return Check(
            "schema registry",
            "ok",
            "not configured (HERMES_SCHEMA_REGISTRY_URL unset): envelopes use single-object "
            "framing, which needs none",
        )
    url = without_userinfo(registry.config.url)
    with registry:
        try:
            subjects = registry.subjects()
        except RegistryError as exc:
            return _registry_failed(url, exc)
    return Check("schema registry", "ok", f"{url} answers ({len(subjects)} subjects)")


def _registry_failed(url: str, exc: RegistryError) -> Check:
    """What the registry's failure to list its subjects says of its address or access."""
    cause = exc.__cause__
    if isinstance(cause, httpx.HTTPError):  # nothing answered
        fix = "start it, or fix HERMES_SCHEMA_REGISTRY_URL"
        return Check("schema registry", "FAIL", f"{url}: {kafka_reason(cause)}", fix)
    if exc.status_code is not None:
        fix = "check HERMES_SCHEMA_REGISTRY_USERNAME and _PASSWORD, and the URL"
        return Check("schema registry", "FAIL", f"{url}: HTTP {exc.status_code}", fix)
    fix = "HERMES_SCHEMA_REGISTRY_URL must be the registry's API root"
    answer = "JSON" if isinstance(cause, ValueError) else "a list of subjects"
    return Check("schema registry", "FAIL", f"{url}/subjects did not answer {answer}", fix)


async def _redis(settings: Settings) -> list[Check]:
    """Redis answers, when configured (nothing is written)."""
    config = settings.redis
    if config.url is None:
        said = "not configured (HERMES_REDIS_URL unset): state, mid-term memory, tools in SQLite"
        return [Check("redis", "ok", said)]
    client = redis_client(settings)
    try:
        async with translated_redis(config, "INFO"):
            info = await client.info("server")
    finally:
        await client.aclose()
    version = info.get("redis_version", "?")
    said = f"{config.shown_url} answers (Redis {version}), keys {config.prefix}:*"
    return [Check("redis", "ok", said)]


async def _neo4j(settings: Settings) -> list[Check]:
    """Neo4j answers, when configured (nothing is written: constraints come with ``up``)."""
    config = settings.neo4j
    if not config.url:
        said = "not configured (HERMES_NEO4J_URL unset): the long-term graph in SQLite"
        return [Check("neo4j", "ok", said)]
    driver = neo4j_driver(settings)
    try:
        async with translated_neo4j(config, "connecting"):
            server = await driver.get_server_info()
    finally:
        await driver.close()
    said = f"{config.shown_url} answers ({server.agent}), namespace {config.namespace}"
    return [Check("neo4j", "ok", said)]


def _stderr_log(spec: ToolSpec, settings: Settings) -> str:
    """Where a stdio MCP tool's server writes its stderr (said with its check)."""
    if spec.mcp is None or spec.mcp.server.transport != "stdio":
        return ""
    return f"; its MCP server's stderr: {settings.tool.mcp_state / spec.mcp.server.name}.stderr.log"


def _changed(spec: ToolSpec) -> bool:
    """An MCP tool whose server offers another definition than the one approved."""
    return spec.mcp is not None and spec.mcp.offered_pin is not None


async def _tools(settings: Settings) -> list[Check]:
    """Each registered tool probed now, judged by its own limits; nothing is saved, so a
    running bus goes on reading its own probes."""
    if not tool_store_exists(settings):  # reading creates nothing
        said = f"none registered in {settings.home} (`up --demo` registers the demo's)"
        return [Check("tools", "ok", said)]
    store = tool_store(settings)
    async with ToolService(store, settings.tool, environ=settings.tool_env.revealed()) as tools:
        specs = {spec.name: spec for spec in await tools.store.list_specs()}
        probes = await tools.probe_all(save=False)
    if not probes:
        return [Check("tools", "ok", f"none registered in {store.where}")]
    checks = []
    for name, probe in sorted(probes.items()):
        spec = specs[name]
        health = ToolHealth(
            tool=name,
            latency_ms=probe.latency_ms,
            success_rate=probe.success_rate,
            quota_remaining=probe.quota_remaining,
            slow_after_ms=spec.slow_after_ms,
            unhealthy_after_ms=spec.unhealthy_after_ms,
            min_success_rate=spec.min_success_rate,
        )
        if probe.error or not health.healthy or _changed(spec):
            said = f"unhealthy: {probe.error or 'over its latency or success limits'}"
            fix = f"`hermesbus tools health`; its fallback answers meanwhile ({name})"
            if _changed(spec):
                said = "its MCP server changed the tool since it was pinned"
                fix = f"`hermesbus tools approve {name}` shows the change and re-admits it"
            fix += _stderr_log(spec, settings)
            checks.append(Check(f"tool {name}", "warn", said, fix))
            continue
        slow = "; slow: users get a notice" if health.slow else ""
        said = f"healthy: {health.latency_ms:.0f} ms, {health.success_rate:.0%} success{slow}"
        said += _stderr_log(spec, settings)
        checks.append(Check(f"tool {name}", "ok", said))
    return checks

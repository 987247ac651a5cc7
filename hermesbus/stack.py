"""``hermesbus up``: the broker (embedded unless configured), the topics, the four processors.

conversation, dispatcher, tool and memory each run as their own consumer group on
their own topic, with SQLite stores under ``HERMES_HOME`` (the embedded default).
``demo=True`` also registers the five demo tools of seed 000 §6 over the fixture company.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from hermesbus.broker import EmbeddedBroker
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.connectors.kafka.groups import hand_over_all
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.connectors.sqlite.tools import SqliteToolStore
from hermesbus.demo import DEMO_USER, Said
from hermesbus.errors import ConfigError, HermesError
from hermesbus.identity import Keyring, keys_path
from hermesbus.lifecycle import background
from hermesbus.processors import conversation, dispatcher, memory, protocol, tool
from hermesbus.processors.memory import Edge, MidTermItem
from hermesbus.processors.tool import demo as demo_tools
from hermesbus.runtime import Handler, Processor, RuntimeSettings, StateStore
from hermesbus.topics import Catalog, plan

__all__ = ["PROBE_INTERVAL_S", "Progress", "Stack", "keyring", "stack"]

log = logging.getLogger(__name__)

JOIN_WAIT_S = 60.0
"""How long start-up waits for every processor's group before timers may fire anyway."""
PROBE_INTERVAL_S = 10.0
"""How often every tool's health probe runs (the dispatcher reads the latest)."""


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
    keys: str = ""
    """Where the components' signing keys were read from."""
    broker: EmbeddedBroker | None = None
    """The embedded broker, when no broker is configured (``broker.died()`` says if it died)."""

    async def check(self, said: Said, *, within_s: float = 15.0) -> list[str]:
        """What memory lacks after a demo conversation: A's approval edge, B's unfinished item.

        The writes travel conversation -> dispatcher -> memory after the last reply went
        out, so memory is asked again for up to ``within_s``.
        """
        deadline = time.monotonic() + within_s
        problems = await self._lacks(said)
        while problems and time.monotonic() < deadline:  # polling a store: no event to wait on
            await asyncio.sleep(0.2)
            problems = await self._lacks(said)
        return problems

    async def evidence(self, said: Said) -> list[str]:
        """What memory holds for a demo conversation: the approval edge or the unfinished report."""
        edge, item = await self._held(said)
        lines = []
        if edge is not None:
            lines.append(
                f"long-term memory: {edge.subject} -approved_by-> {edge.object}"
                f" (verified by {edge.verified_tool}, trust {edge.trust_level.value})"
            )
        if item is not None:
            value = json.loads(item.value_json)
            state = value.get("snapshot", {}).get("state_id")
            lines.append(
                f"mid-term memory: {item.key} = {value.get('label')} (stopped in {state},"
                f" importance {item.importance}, confirmed by {item.confirmed_by})"
            )
        return lines

    async def _held(self, said: Said) -> tuple[Edge | None, MidTermItem | None]:
        """The approval edge of the session's report and its unfinished item, if any."""
        session = said.conversation.session_id
        report = conversation.report_id(session)
        edge = await self.memory.edge(f"expense:{report}", "approved_by", "person:张主管")
        return edge, await self.memory.item(DEMO_USER, f"unfinished:{session}")

    def problems(self) -> list[str]:
        """Dead letters and contract violations: the demo is not finished if there were any."""
        found = [
            f"{p.name}: {p.stats.dead_letters} dead letters"
            for p in self.processors
            if p.stats.dead_letters
        ]
        if self.violations.total:
            found.append(self.violations.summary())
        return found

    async def _lacks(self, said: Said) -> list[str]:
        session = said.conversation.session_id
        last = said.last
        text = getattr(last.payload.body, "text", "") if last is not None else ""
        edge, item = await self._held(said)
        if "已提交" in text:
            report = conversation.report_id(session)
            return [] if edge is not None else [f"no approved_by edge for expense:{report}"]
        label = json.loads(item.value_json).get("label") if item is not None else None
        if label != conversation.UNFINISHED_LABEL:
            return [f"no unfinished:{session} ({conversation.UNFINISHED_LABEL}) in mid-term memory"]
        return []


@asynccontextmanager
async def stack(
    *,
    kafka: KafkaConfig | None = None,
    prefix: str = "",
    settings: RuntimeSettings | None = None,
    store: StateStore | None = None,
    demo: bool = False,
    clock: Callable[[], float] = time.time,
    embedded_broker: EmbeddedBroker | None = None,
    progress: Progress | None = None,
) -> AsyncIterator[Stack]:
    """Start the broker if none is configured, create missing topics, run the processors.

    ``embedded_broker``: the one to start (and stop) then, for a caller that watches it.
    ``progress`` is told each step as it completes ("broker up", "topics ready",
    "conversation joined", ...). On the embedded broker the processors' consumer groups
    use its group timings (``RuntimeSettings.for_embedded_broker``), unless set explicitly.
    """
    kafka = kafka or KafkaConfig()
    say = progress or _quiet
    settings = settings or RuntimeSettings()
    async with contextlib.AsyncExitStack() as exits:
        embedded = not kafka.bootstrap
        broker = (embedded_broker or EmbeddedBroker()) if embedded else None
        if broker is not None:
            await exits.enter_async_context(broker)
            kafka = kafka.model_copy(update={"bootstrap": broker.bootstrap})
            settings = settings.for_embedded_broker()
            say(f"broker up: embedded (tansu, in memory) at {broker.bootstrap}")
        keys = keyring(create=embedded)
        say(f"signing keys: {keys.source}")
        enter = exits.enter_async_context
        states: StateStore = store if store is not None else await enter(SqliteStateStore())
        if demo:  # the workers inherit the signing key; the service verifies with the public one
            os.environ.update(demo_tools.demo_keys())
        stores = await enter(memory.MemoryStores(memory.MemorySettings()))
        tools = await enter(tool.ToolService(SqliteToolStore()))
        violations = dispatcher.Violations()
        running = Stack(str(kafka.bootstrap), embedded, prefix, stores, tools, violations)
        running.keys = keys.source
        running.broker = broker
        running.created = await _provision(kafka, prefix)
        say(f"topics ready: {len(running.created)} created")
        if demo:
            running.tool_names = await demo_tools.register_demo(tools)
        await _probe(tools)
        names = [spec.name for spec in await tools.store.list_specs()]
        say(f"tools ready: {', '.join(names) or 'none registered'}")
        exits.callback(background(_probing(tools), "tool-health").cancel)
        intent = conversation.build_ports()
        for port in intent.values():
            await enter(port)
        own = sorted(spec.name for spec in await tools.store.list_specs())  # a group each
        targets = [tool.group_name(name) for name in own]  # each starts where "tool" left off
        await hand_over_all(kafka, prefix + tool.TOPIC, tool.NAME, targets)
        sharing = {tool.group_name(name) for name in own}
        exits.push_async_callback(_stop_all, running.processors)
        gate = asyncio.Event()  # no timer fires before every processor has joined its group
        for name, handler, topic, ports in _handlers(running, dict(intent), own):
            processor = Processor(
                name,
                handler,
                [topic],
                store=states,
                kafka=kafka,
                topic_prefix=prefix,
                settings=settings,
                ports=ports,
                clock=clock,
                dead_letter_undecodable=name not in sharing,  # dead-lettered once, by "tool"
                identity=tool.NAME if name in sharing else name,
                policy=protocol.ProtocolPolicy(),
                timers_gate=gate,
            )
            running.processors.append(processor)  # stopped by _stop_all, side by side
        await asyncio.gather(*(p.start() for p in running.processors))  # joins in parallel
        await _joined(running.processors, say)
        gate.set()
        say("ready")
        yield running


Progress = Callable[[str], None]
"""Told each start-up step of ``stack()`` once it is done."""


def _quiet(_step: str) -> None:
    return None


async def _joined(processors: Sequence[Processor], say: Progress) -> None:
    """Wait (bounded) until every processor has its first assignment, saying each."""

    async def join(processor: Processor) -> None:
        await processor.joined.wait()
        say(f"{processor.name} joined")

    waits = [asyncio.create_task(join(p)) for p in processors]
    _done, pending = await asyncio.wait(waits, timeout=JOIN_WAIT_S)
    for task in pending:
        task.cancel()
    late = [p.name for p in processors if not p.joined.is_set()]
    if late:
        log.warning("not joined after %g s: %s; timers fire anyway", JOIN_WAIT_S, late)


def keyring(*, create: bool) -> Keyring:
    """Every component's keys: created under the state folder on the embedded broker.

    With a configured broker, processors may run in several processes that must share
    the keys, so a missing key is an error saying how to make and share them.
    """
    if create:
        return Keyring.ensure(protocol.IDENTITIES)
    keys = Keyring.load()
    missing = [identity for identity in protocol.IDENTITIES if not keys.has(identity)]
    if missing:
        raise ConfigError(
            f"no signing keys for {', '.join(missing)} in {keys.source}: run `hermesbus keys "
            f"init` (writes {keys_path()}) and give every process of the cluster that file "
            "(HERMES_KEYS_FILE), or set HERMES_KEY_<IDENTITY> for each"
        )
    return keys


def _handlers(
    running: Stack, intent: dict[str, Any], own: Sequence[str]
) -> list[tuple[str, Handler, str, dict[str, Any]]]:
    """Name, handler, topic and ports of every processor; each tool in ``own`` gets its own."""
    tools = {tool.PORT: running.tools}
    handlers: list[tuple[str, Handler, str, dict[str, Any]]] = [
        (conversation.NAME, conversation.handle, conversation.TOPIC, intent),
        (
            dispatcher.NAME,
            dispatcher.handle,
            dispatcher.TOPIC,
            dispatcher.dispatcher_ports(running.tools, running.violations),
        ),
        (memory.NAME, memory.handle, memory.TOPIC, {memory.NAME: running.memory}),
        (tool.NAME, tool.serving(own, others=True), tool.TOPIC, tools),
    ]
    return handlers + [
        (tool.group_name(name), tool.serving([name]), tool.TOPIC, tools) for name in own
    ]


async def _provision(kafka: KafkaConfig, prefix: str) -> list[str]:
    catalog = Catalog.load().with_overrides(prefix=prefix)
    async with KafkaAdmin(kafka) as admin:
        topics = plan(catalog, await admin.describe(catalog.names()))
        for drift in topics.drift:
            log.warning("topic drift: %s", drift)
        return await admin.create(topics.create)


async def _stop_all(processors: Sequence[Processor]) -> None:
    """Stop every processor at once: each may give its in-flight work revoke_timeout_ms."""
    stopped = await asyncio.gather(*(p.stop() for p in processors), return_exceptions=True)
    for processor, outcome in zip(processors, stopped, strict=True):
        if isinstance(outcome, BaseException):
            log.error("processor %s did not stop cleanly", processor.name, exc_info=outcome)


async def _probe(tools: tool.ToolService) -> None:
    try:
        await tools.probe_all()
    except HermesError as exc:  # a probe that fails makes its tool unhealthy, not the stack
        log.warning("tool health probes: %s", exc)


async def _probing(tools: tool.ToolService) -> None:
    while True:
        await asyncio.sleep(PROBE_INTERVAL_S)
        await _probe(tools)

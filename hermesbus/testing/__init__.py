"""Run handlers in memory: the bus without Kafka, for tests, shadow replay and your own code.

:class:`Harness` runs one handler or a set of processors on envelopes the way the
runtime would, with nothing but memory: each processor's session state is carried from
envelope to envelope (version, the applied window that skips a redelivery, data saved
as JSON), emitted envelopes get the ids the runtime gives them, timers are armed,
replaced and cancelled per session and purpose and fire as ``timer_fired`` envelopes
when the harness's clock reaches them, and emitted envelopes are delivered to the
processors that consume their topics until the bus is quiet. What went to a topic
nobody here consumes (replies to the user, audit, alerts) is kept in :attr:`Harness.sent`.

The clock is the harness's own: it starts at the first envelope's time, moves with the
envelopes sent (never back) and with :meth:`Harness.advance`; handlers never see it.
Ports (tools, stores, health) are whatever each processor is given: recorded, scripted
or real.

    harness = Harness().processor("conversation", handle, ["hermes.conversation.in"])
    handled = await harness.send(turn)        # what ran, what it emitted, its state after
    await harness.advance(minutes=5)          # the 5-minute wait fires
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

import orjson

from hermesbus.client import partition_for_key
from hermesbus.codec import Codec, default_codec
from hermesbus.contract.envelope import Envelope
from hermesbus.contract.fields import epoch_ms
from hermesbus.contract.headers import envelope_headers
from hermesbus.errors import ConfigError
from hermesbus.identity import WritePolicy
from hermesbus.runtime import (
    Handler,
    HandlerInput,
    ModelState,
    Outcome,
    RuntimeSettings,
    SessionState,
    TimerRequest,
    emitted,
    timer_fired,
)
from hermesbus.topics import Catalog, topic_for
from hermesbus.trace.index import ArchivedRecord

__all__ = ["Armed", "Handled", "Harness", "Refused", "Sent"]

_MAX_STEPS = 10_000
"""Deliveries one :meth:`Harness.send` may cause: more is a loop between processors."""


@dataclass(frozen=True, slots=True)
class Handled:
    """One handler call: who ran, on what, what it decided and the state it saved."""

    processor: str
    topic: str
    envelope: Envelope
    outcome: Outcome
    emitted: tuple[Envelope, ...]
    """As they went out: ids derived from the input's id and their index."""
    state: SessionState
    """The processor's session state after the call."""
    duplicate: bool = False
    """The input's id was in the applied window: the handler did not run (a redelivery)."""


@dataclass(frozen=True, slots=True)
class Armed:
    """A timer waiting to fire: its ``timer_fired`` envelope goes to ``topic`` at ``due_at``."""

    processor: str
    session_id: str
    topic: str
    request: TimerRequest
    """What the handler asked for."""
    envelope: Envelope
    """The ``timer_fired`` envelope it sends, as the runtime builds it."""

    @property
    def purpose(self) -> str:
        return self.request.purpose

    @property
    def due_at(self) -> datetime:
        return self.request.due_at


@dataclass(frozen=True, slots=True)
class Sent:
    """An envelope for a topic no processor of the harness consumes."""

    topic: str
    envelope: Envelope


@dataclass(frozen=True, slots=True)
class Refused:
    """An envelope the write policy refused on ``topic`` (the runtime dead-letters it)."""

    topic: str
    envelope: Envelope
    reason: str


@dataclass(frozen=True, slots=True)
class _Consumer:
    name: str
    handler: Handler
    topics: tuple[str, ...]
    ports: Mapping[str, Any]


@dataclass
class Harness:
    """Processors in memory. ``prefix`` is the topics' prefix (as ``hermesbus up --prefix``);
    ``policy``: who may write what where, checked before a handler runs (default: not
    checked; the runtime checks signatures too, which the harness has none of);
    ``applied_window``: ids kept per session to skip a redelivery (default: the runtime's
    default, from ``RuntimeSettings.model_construct()``, which reads no environment: a test
    kit behaves the same on every machine)."""

    prefix: str = ""
    policy: WritePolicy | None = None
    now: datetime | None = None
    """The clock: None until the first envelope arrives."""
    applied_window: int = field(
        default_factory=lambda: RuntimeSettings.model_construct().applied_window
    )
    handled: list[Handled] = field(default_factory=list)
    """Every handler call, in order."""
    sent: list[Sent] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)
    log: list[Sent] = field(default_factory=list)
    """Every envelope that reached a topic, in order: what the topics would hold."""
    _consumers: list[_Consumer] = field(default_factory=list)
    _states: dict[tuple[str, str], SessionState] = field(default_factory=dict)
    _armed: dict[tuple[str, str, str], Armed] = field(default_factory=dict)

    def processor(
        self,
        name: str,
        handler: Handler,
        topics: Sequence[str],
        *,
        ports: Mapping[str, Any] | None = None,
    ) -> Harness:
        """Add a processor consuming ``topics`` (unprefixed names); returns the harness.

        ``ports`` is used as given, not copied: a test may swap a port between envelopes."""
        if any(c.name == name for c in self._consumers):
            raise ConfigError(f"the harness already has a processor named {name!r}")
        prefixed = tuple(self.prefix + topic for topic in topics)
        self._consumers.append(_Consumer(name, handler, prefixed, {} if ports is None else ports))
        return self

    # -- state and timers --------------------------------------------------------------

    def state(self, processor: str, session_id: str) -> SessionState:
        return self._states.get((processor, session_id), SessionState())

    def seed(self, processor: str, session_id: str, data: Mapping[str, Any]) -> None:
        """Start ``processor``'s session from ``data`` (as if it had been saved)."""
        before = self.state(processor, session_id)
        self._states[processor, session_id] = SessionState(
            before.version + 1, _saved(data), before.applied
        )

    def timers(self, processor: str | None = None, session_id: str | None = None) -> list[Armed]:
        """Armed timers, soonest first."""
        found = [
            armed
            for armed in self._armed.values()
            if processor in (None, armed.processor) and session_id in (None, armed.session_id)
        ]
        return sorted(found, key=lambda a: (a.due_at, a.processor, a.session_id, a.purpose))

    # -- running -----------------------------------------------------------------------

    async def handle(
        self, processor: str, envelope: Envelope, *, topic: str = "", appended_ms: int = -1
    ) -> Handled:
        """One call of ``processor``'s handler on ``envelope``, nothing delivered onwards.

        ``topic``: where it was read (default: the processor's first topic);
        ``appended_ms``: its record's Kafka timestamp, as the runtime gives it (a replay
        gives the recorded one)."""
        consumer = self._consumer(processor)
        self._tick(envelope.timestamp)
        return await self._run(consumer, topic or consumer.topics[0], envelope, appended_ms)

    async def send(self, envelope: Envelope, *, topic: str | None = None) -> list[Handled]:
        """Deliver ``envelope`` to its target's topic (or ``topic``), then everything it
        causes, breadth first, until nothing is left to deliver; the calls, in order."""
        self._tick(envelope.timestamp)
        queue = deque([(topic or topic_for(envelope.target, self.prefix), envelope)])
        return await self._drain(queue)

    async def advance(self, **delta: float) -> list[Handled]:
        """Move the clock on by ``timedelta(**delta)``; timers due by then fire in order
        (and those they arm, when due too)."""
        if self.now is None:
            raise ConfigError("the harness's clock starts with the first envelope sent")
        until = self.now + timedelta(**delta)
        done: list[Handled] = []
        while (due := [a for a in self.timers() if a.due_at <= until]) != []:
            done += await self._fire(due[0])
        self.now = until
        return done

    async def fire(self, purpose: str, *, session_id: str | None = None) -> list[Handled]:
        """Fire the armed timer of ``purpose`` now (the clock moves to its due time)."""
        armed = self.take(purpose, session_id=session_id)
        return await self._drain(deque([(armed.topic, armed.envelope)]))

    def take(self, purpose: str, *, session_id: str | None = None) -> Armed:
        """Disarm the soonest timer of ``purpose`` as the runtime does when it fires, and
        return it (its envelope is yours to deliver); the clock moves to its due time."""
        found = [a for a in self.timers(session_id=session_id) if a.purpose == purpose]
        if not found:
            armed = sorted({a.purpose for a in self._armed.values()})
            raise ConfigError(f"no timer {purpose!r} is armed (armed: {armed})")
        return self._take(found[0])

    def _take(self, armed: Armed) -> Armed:
        del self._armed[armed.processor, armed.session_id, armed.purpose]
        self._tick(armed.due_at)
        return armed

    async def _fire(self, armed: Armed) -> list[Handled]:
        self._take(armed)
        return await self._drain(deque([(armed.topic, armed.envelope)]))

    async def _drain(self, queue: deque[tuple[str, Envelope]]) -> list[Handled]:
        done: list[Handled] = []
        while queue:
            if len(done) > _MAX_STEPS:
                raise ConfigError(f"more than {_MAX_STEPS} deliveries for one send: a loop?")
            topic, envelope = queue.popleft()
            self.log.append(Sent(topic, envelope))
            refusal = self._refusal(topic, envelope)
            if refusal is not None:
                self.refused.append(Refused(topic, envelope, refusal))
                continue
            consumers = [c for c in self._consumers if topic in c.topics]
            if not consumers:
                self.sent.append(Sent(topic, envelope))
            for consumer in consumers:
                handled = await self._run(consumer, topic, envelope)
                done.append(handled)
                queue.extend((topic_for(e.target, self.prefix), e) for e in handled.emitted)
        return done

    async def _run(
        self, consumer: _Consumer, topic: str, envelope: Envelope, appended_ms: int = -1
    ) -> Handled:
        key = (consumer.name, envelope.session_id)
        state = self._states.get(key, SessionState())
        if envelope.message_id in state.applied:
            handled = Handled(consumer.name, topic, envelope, Outcome(), (), state, duplicate=True)
            self.handled.append(handled)
            return handled
        inp = HandlerInput(
            envelope, state, consumer.name, consumer.ports, topic, appended_ms=appended_ms
        )
        outcome = await consumer.handler(inp)
        data = state.data if outcome.state is None else _saved(outcome.state)
        applied = (*state.applied, envelope.message_id)[-self.applied_window :]
        after = SessionState(state.version + 1, data, applied)
        self._states[key] = after
        for purpose in outcome.cancel:
            self._armed.pop((consumer.name, envelope.session_id, purpose), None)
        for request in outcome.timers:
            fired = timer_fired(consumer.name, envelope, request)
            armed = Armed(consumer.name, envelope.session_id, topic, request, fired)
            self._armed[consumer.name, envelope.session_id, request.purpose] = armed
        handled = Handled(
            consumer.name, topic, envelope, outcome, emitted(envelope, outcome), after
        )
        self.handled.append(handled)
        return handled

    def records(self, codec: Codec | None = None) -> list[ArchivedRecord]:
        """:attr:`log` as the broker would hold it: each envelope encoded, keyed by its
        session, on the session's partition (the catalog's partition count), offsets in
        order, timed by the envelope. ``write_bundle`` makes a bundle of them, which
        ``hermesbus replay --bundle`` replays; headers are unsigned (no keys here)."""
        codec = codec or default_codec()
        catalog = {spec.name: spec.partitions for spec in Catalog.load()}
        offsets: dict[tuple[str, int], int] = {}
        found = []
        for sent in self.log:
            env, count = sent.envelope, catalog.get(sent.topic.removeprefix(self.prefix), 1)
            key = env.session_id.encode()
            partition = partition_for_key(key, range(count))
            offset = offsets.get((sent.topic, partition), 0)
            offsets[sent.topic, partition] = offset + 1
            value, headers = codec.encode(env), tuple(envelope_headers(env))
            found.append(
                ArchivedRecord(
                    sent.topic, partition, offset, epoch_ms(env.timestamp), key, value, headers
                )
            )
        return found

    def _consumer(self, name: str) -> _Consumer:
        for consumer in self._consumers:
            if consumer.name == name:
                return consumer
        names = [c.name for c in self._consumers]
        raise ConfigError(f"the harness has no processor {name!r} (it has {names})")

    def _refusal(self, topic: str, envelope: Envelope) -> str | None:
        if self.policy is None:
            return None
        identity = self.policy.identity_of(envelope.source)
        return self.policy.refusal(topic.removeprefix(self.prefix), identity, envelope)

    def _tick(self, when: datetime) -> None:
        if self.now is None or when > self.now:
            self.now = when


def _saved(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """``data`` as the runtime saves and loads it (JSON, keys in their order), read-only: a
    handler that keeps something JSON cannot hold fails here as it would in production. A
    :class:`~hermesbus.runtime.ModelState` is kept as it is, as the runtime's cache keeps it
    (its JSON is its model's dump)."""
    if isinstance(data, ModelState):
        return data
    saved = orjson.dumps(dict(data), option=orjson.OPT_NON_STR_KEYS)
    return MappingProxyType(orjson.loads(saved))

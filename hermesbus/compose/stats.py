"""What ``hermesbus stats`` reads: the rollup's closed windows and the alerts, from the log.

Both topics are read without a consumer group (nothing is committed); each record's
signature is checked with the bus's keyring: a closed window is believed only when the
``diagnostics`` identity signed it, an alert when a processor did. Which rules' alerts are
open now is folded from all of ``hermes.alerts`` (an episode may have begun long before
the span shown), from what the diagnostics signed. The consumer lag of each component is
its group's uncommitted records on the topic it consumes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition

from hermesbus.codec import Codec
from hermesbus.connectors.kafka import KafkaConfig, LogReader, Position
from hermesbus.connectors.kafka.groups import behind
from hermesbus.connectors.kafka.reader import partition_counts
from hermesbus.contract.envelope import Envelope
from hermesbus.contract.fields import epoch_ms
from hermesbus.contract.payloads import ErrorReport, WindowRollup
from hermesbus.errors import HermesError, IdentityError
from hermesbus.identity import Keyring, Verifier
from hermesbus.processors import protocol, tool
from hermesbus.processors.diagnostics import Board, OpenAlerts, Said, change_of
from hermesbus.topics import ALERTS, CONVERSATION_IN, DIAGNOSTICS, identity_of

__all__ = [
    "Alert",
    "Stats",
    "alert_said",
    "alerts_to_end",
    "believed",
    "component_lags",
    "read_stats",
]

_POLICY = protocol.ProtocolPolicy()
_CONSUMES = {
    "conversation": CONVERSATION_IN,
    "dispatcher": protocol.DISPATCHER_TOPIC,
    "memory": protocol.MEMORY_TOPIC,
}
"""The topic each component's group consumes (the tools': ``hermes.tool``)."""


@dataclass(frozen=True, slots=True)
class Alert:
    """An alert as the log has it."""

    at_ms: int
    component: str
    code: str
    message: str


@dataclass(slots=True)
class Stats:
    """What was read so far."""

    board: Board = field(default_factory=Board)
    alerts: list[Alert] = field(default_factory=list)
    alert_ids: set[str] = field(default_factory=set)
    open_alerts: OpenAlerts = field(default_factory=OpenAlerts)
    """The alerts open now: all of ``hermes.alerts`` folded, the diagnostics' only."""
    unproven: int = 0
    """Records of either topic whose signature or signer is not believed (not shown)."""


async def read_stats(
    kafka: KafkaConfig,
    keyring: Keyring,
    *,
    prefix: str,
    since_ms: int,
    follow: bool,
    changed: Callable[[Stats], None] = lambda _: None,
) -> Stats:
    """The closed windows and alerts appended since ``since_ms``; with ``follow``, read on
    (``changed`` hears each batch) until cancelled."""
    stats, codec, verifier = Stats(), Codec(), Verifier(keyring)
    topics = [prefix + DIAGNOSTICS, prefix + ALERTS]
    counts = await partition_counts(kafka, topics)
    parts = [TopicPartition(t, p) for t in topics for p in range(counts.get(t, 0))]
    alert_parts = [part for part in parts if part.topic == prefix + ALERTS]
    for said in await alerts_to_end(kafka, alert_parts, prefix, codec, verifier):
        stats.open_alerts.take(said)
    end = None if follow else Position("end")
    reader = LogReader(kafka, parts, start=Position("time", since_ms), end=end, what="stats")
    async with reader:
        async for batch in reader:
            for record in batch:
                _take(stats, record, codec, verifier, prefix)
            changed(stats)
    return stats


def believed(record: Any, codec: Codec, verifier: Verifier, prefix: str) -> Envelope | None:
    """The record's envelope when its writer signed it and may write it there (its
    source's identity); None for anything else."""
    topic: str = record.topic
    headers = tuple(record.headers or ())
    try:
        signer = verifier.signer(topic, record.key, record.value, headers)
        envelope = codec.decode(record.value or b"")
    except (IdentityError, HermesError):
        return None
    if _POLICY.refusal(topic.removeprefix(prefix), signer, envelope) is not None:
        return None
    return envelope if signer == identity_of(envelope.source) else None


def alert_said(envelope: Envelope | None) -> Said | None:
    """What a believed envelope says as an alert the diagnostics wrote (None: not one)."""
    if envelope is None or identity_of(envelope.source) != protocol.DIAGNOSTICS:
        return None
    return change_of(envelope)


async def alerts_to_end(
    kafka: KafkaConfig,
    parts: list[TopicPartition],
    prefix: str,
    codec: Codec,
    verifier: Verifier,
) -> list[Said]:
    """What the diagnostics said on ``parts`` of ``hermes.alerts``, in order, to their end
    as it is now (each alert believed only when the diagnostics signed it)."""
    said: list[Said] = []
    async with LogReader(kafka, parts, what="alerts") as reader:
        async for batch in reader:
            for record in batch:
                one = alert_said(believed(record, codec, verifier, prefix))
                if one is not None:
                    said.append(one)
    return said


def _take(stats: Stats, record: object, codec: Codec, verifier: Verifier, prefix: str) -> None:
    envelope = believed(record, codec, verifier, prefix)
    if envelope is None:
        stats.unproven += 1  # only what its writer may write there, and signed as it
        return
    body = envelope.payload.body
    if isinstance(body, WindowRollup):
        try:
            stats.board.add(envelope.message_id, body)
        except ValueError:  # a histogram of other buckets: not one the rollup wrote
            stats.unproven += 1
    elif isinstance(body, ErrorReport) and envelope.message_id not in stats.alert_ids:
        stats.alert_ids.add(envelope.message_id)  # the same alert, said twice: once
        alert = Alert(epoch_ms(envelope.timestamp), body.component, body.code, body.message)
        stats.alerts.append(alert)
        said = alert_said(envelope)
        if said is not None:  # one said since the fold above (following)
            stats.open_alerts.take(said)


async def component_lags(kafka: KafkaConfig, prefix: str, tools: Sequence[str]) -> dict[str, int]:
    """Each component's consumer lag (records its group, ``prefix`` + its name, has not
    committed), and each tool's (``tool:<name>``, its own group's; the ``tool`` row is
    their largest)."""
    topics = [prefix + t for t in (*_CONSUMES.values(), protocol.TOOL_TOPIC)]
    counts = await partition_counts(kafka, topics)
    lags: dict[str, int] = {}
    for component, topic in _CONSUMES.items():
        partitions = {prefix + topic: counts.get(prefix + topic, 0)}
        lag, _ = await behind(kafka, prefix + component, partitions)
        lags[f"component:{component}"] = sum(lag.values())
    tool_topic = {prefix + protocol.TOOL_TOPIC: counts.get(prefix + protocol.TOOL_TOPIC, 0)}
    for name in tools:
        lag, _ = await behind(kafka, prefix + tool.group_name(name), tool_topic)
        lags[f"tool:{name}"] = sum(lag.values())
    lags["component:tool"] = max((lags[f"tool:{n}"] for n in tools), default=0)
    return lags

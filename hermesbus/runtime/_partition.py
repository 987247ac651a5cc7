"""What the runtime tracks per owned partition, and the counters it keeps."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TypeAlias

from aiokafka import ConsumerRecord, TopicPartition

from hermesbus.base.histogram import Histogram
from hermesbus.contract import headers as h
from hermesbus.contract.envelope import Envelope
from hermesbus.errors import ContractError

from ._offsets import OffsetTracker
from ._store import OutRecord

__all__ = ["Partition", "ProcessorStats", "Record", "attempt_of", "check_key"]

Record: TypeAlias = ConsumerRecord[bytes, bytes]


@dataclass
class ProcessorStats:
    """Counters a processor keeps (also what ``hermesbus up`` prints on exit)."""

    processed: int = 0
    duplicates: int = 0
    retries: int = 0
    dead_letters: int = 0
    timers_fired: int = 0
    fenced: int = 0
    aborted: int = 0
    """Transactions aborted because a handler failed (exactly-once mode)."""
    undecodable: int = 0
    """Records that did not decode, left to the topic's dead-lettering group (see
    ``Processor(dead_letter_undecodable=False)``)."""
    refused: int = 0
    """Records whose signature or signer was refused (dead-lettered, alerted, never run)."""
    misrouted: int = 0
    """Records on another partition than their key's (dead-lettered, never run)."""
    held: int = 0
    """Records an outage (a store, the broker, the schema registry) held in place a while."""
    processed_by: dict[tuple[str, int], int] = field(default_factory=dict)
    """``processed`` per (topic, partition): what ``/metrics`` serves by label."""
    handler_ms: Histogram = field(default_factory=Histogram)
    """How long the handler took per record it ran (failures too), in milliseconds."""
    timers_due: int = 0
    """Timers found due at the timer loop's last pass (500 at most a pass): more than a
    pass's worth means they fire behind time."""


class Partition:
    """A partition this worker owns: its offsets, in-flight count and whether it is closed."""

    __slots__ = (
        "active",
        "closed",
        "committed",
        "failed",
        "gone",
        "idle",
        "resumed",
        "sent",
        "settled",
        "tp",
        "tracker",
    )

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.tracker = OffsetTracker()
        self.committed = -1
        self.gone = False
        """The broker refused a commit of it for an unknown topic: its log is gone (the topic
        deleted, perhaps made again already), so nothing of it is committed any more; a new
        log gets a new partition (see ``Processor._made_again``, ``logs_made_again``)."""
        self.closed = False
        self.active = 0
        self.resumed = 0
        """How often its timers were resumed: at adoption, then once more when the gate opens."""
        self.idle = asyncio.Event()
        self.idle.set()
        # exactly-once mode: what the open transaction holds
        self.sent: list[OutRecord] = []
        self.failed: list[tuple[Record, Envelope, Exception]] = []
        self.settled: list[tuple[str, str]] = []


def check_key(record: Record, envelope: Envelope) -> None:
    """The Kafka key is the session id: anything else breaks per-session order."""
    key = record.key.decode("utf-8", "replace") if record.key is not None else None
    if key != envelope.session_id:
        raise ContractError(
            f"record key {key!r} is not the envelope's session_id {envelope.session_id!r}"
        )


def attempt_of(record: Record) -> int:
    """The attempt a re-sent record carries in its header (1 for a first delivery)."""
    value = h.header(list(record.headers), h.DLQ_ATTEMPT)
    return int(value) if value and value.isdigit() else 1

"""The alerts on the bus: their judge (beside the rollup) and their watch (beside the
dispatcher), around the pure rules in ``hermesbus.processors.diagnostics``.

**The judge** reads the rollup's closed windows on ``hermes.diagnostics`` (each part
believed only when the ``diagnostics`` identity signed it), judges each settled tumbling
window by the rules the settings make, and writes each alert raised or cleared to
``hermes.alerts``, signed by ``diagnostics``. It joins no consumer group: at its start it
reads what the log already says (every alert on ``hermes.alerts``: the open episodes go
on, nothing said is said again), then the closed windows of the last few windows' span
(enough for the longest rule), so a restart picks up where the last run stopped. An
alert's id is its window's, rule's and key's: said twice, it is the same record.

**The watch** folds ``hermes.alerts`` into the open alerts, in order, from the
beginning, and follows it; :class:`~hermesbus.processors.diagnostics.AlertedHealth`
reads it, so the dispatcher's health reads see a tool under a health alert as unhealthy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from aiokafka import TopicPartition

from hermesbus.codec import Codec
from hermesbus.compose.stats import alert_said, alerts_to_end, believed, component_lags
from hermesbus.connectors.kafka import KafkaConfig, LogReader, Position
from hermesbus.connectors.kafka.client import start_or_close
from hermesbus.connectors.kafka.clients import plain_producer
from hermesbus.connectors.kafka.reader import partition_counts
from hermesbus.contract.envelope import Envelope
from hermesbus.contract.headers import envelope_headers
from hermesbus.contract.payloads import WindowRollup
from hermesbus.errors import BrokerError, HermesError
from hermesbus.identity import Guard, Keyring, Verifier
from hermesbus.processors.diagnostics import (
    AlertBook,
    Change,
    DiagnosticsSettings,
    OpenAlerts,
    Said,
    alert_envelope,
    change_of,
)
from hermesbus.processors.protocol import DIAGNOSTICS, ProtocolPolicy
from hermesbus.topics import ALERTS
from hermesbus.topics import DIAGNOSTICS as DIAGNOSTICS_TOPIC

__all__ = [
    "AlertJudge",
    "AlertWatch",
    "JudgeStats",
    "alerts_said",
    "background_judge",
    "judge_for",
]

log = logging.getLogger(__name__)

_POLICY = ProtocolPolicy()
_TICK_S: Final = 1.0
"""How often settled windows are looked for (and unsent alerts sent again)."""
_RETRY_S: Final = 5.0
"""How long a reader of the log waits before it reads again after the broker failed it."""
Lags = Callable[[], Awaitable[Mapping[str, int]]]


async def alerts_said(
    kafka: KafkaConfig, prefix: str, codec: Codec, verifier: Verifier
) -> list[Said]:
    """Every alert the diagnostics wrote on ``hermes.alerts``, in order (to its end as it
    is now; each believed only when the diagnostics signed it)."""
    return await alerts_to_end(kafka, await _alert_parts(kafka, prefix), prefix, codec, verifier)


async def _alert_parts(kafka: KafkaConfig, prefix: str) -> list[TopicPartition]:
    topic = prefix + ALERTS
    counts = await partition_counts(kafka, [topic])
    return [TopicPartition(topic, p) for p in range(counts.get(topic, 0))]


@dataclass(slots=True)
class JudgeStats:
    """What the judge did since it started."""

    windows: int = 0
    """Parts of closed windows taken."""
    unproven: int = 0
    raised: int = 0
    cleared: int = 0


class AlertJudge:
    """Judges the closed windows and writes the alerts (see the module's text)."""

    def __init__(
        self,
        kafka: KafkaConfig,
        settings: DiagnosticsSettings,
        keyring: Keyring,
        *,
        prefix: str,
        lags: Lags | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        told: Callable[[str], None] | None = None,
    ) -> None:
        """``lags``: each component's consumer lag now (the ``lag_growing`` rule's figure;
        None: that rule has nothing to judge); ``told`` hears each alert raised or cleared
        (a line each: ``up`` prints them)."""
        self.settings = settings
        self.stats = JudgeStats()
        self._kafka = kafka
        self._prefix = prefix
        self._codec = Codec()
        self._keyring = keyring
        self._guard = Guard(DIAGNOSTICS, keyring, policy=_POLICY, prefix=prefix)
        self._lags = lags
        self._told = told or _logged
        self._clock = clock
        self._wall_ms = wall_ms
        self._unsent: list[Envelope] = []
        self.book: AlertBook | None = None
        self.ready = asyncio.Event()
        """Set once what the log said is read and the closed windows are being followed."""

    def lookback_ms(self) -> int:
        """How far back (append time) the closed windows are read at the start: the
        longest rule's windows, and the settling and grace around them."""
        rules = self.settings.rules()
        span = max((max(r.windows, r.trailing) for r in rules), default=1) + 2
        settings = self.settings
        return span * settings.tumbling_ms + settings.grace_ms + settings.settle_ms

    async def run(self) -> None:
        """Until cancelled. BrokerError when the broker fails it (at the start, or while
        it reads or writes): ``background_judge`` starts it again."""
        verifier = Verifier(self._keyring)
        said = await alerts_said(self._kafka, self._prefix, self._codec, verifier)
        pending = [s for s in map(change_of, self._unsent) if s is not None]  # not sent yet
        self.book = AlertBook(
            self.settings.rules(),
            settle_ms=self.settings.settle_ms,
            clock=self._clock,
            seen=[*said, *pending],
        )
        topic = self._prefix + DIAGNOSTICS_TOPIC
        counts = await partition_counts(self._kafka, [topic])
        if topic not in counts:
            raise BrokerError(f"alerts: no topic {topic} at {self._kafka.address}")
        parts = [TopicPartition(topic, p) for p in range(counts[topic])]
        since = Position("time", self._wall_ms() - self.lookback_ms())
        producer = plain_producer(self._kafka, acks="all")
        where = f"alerts: cannot reach Kafka at {self._kafka.address}"
        await start_or_close(producer.start, producer.stop, where)
        try:
            reader = LogReader(self._kafka, parts, start=since, end=None, what="alerts")
            async with reader:
                self.ready.set()
                # the first to end (a broker error in either) ends both
                jobs = [asyncio.create_task(self._read(reader, verifier))]
                jobs.append(asyncio.create_task(self._tick(producer)))
                try:
                    done, _ = await asyncio.wait(jobs, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for job in jobs:
                        job.cancel()
                    await asyncio.gather(*jobs, return_exceptions=True)
                for job in done:
                    job.result()
        finally:
            await producer.stop()

    async def _read(self, reader: LogReader, verifier: Verifier) -> None:
        async for batch in reader:
            for record in batch:
                self._take(record, verifier)

    def _take(self, record: Any, verifier: Verifier) -> None:
        envelope = believed(record, self._codec, verifier, self._prefix)
        body = envelope.payload.body if envelope is not None else None
        if envelope is None or not isinstance(body, WindowRollup):
            self.stats.unproven += 1
            return
        try:
            if self.book is not None and self.book.add(envelope.message_id, body):
                self.stats.windows += 1
        except ValueError:  # a histogram of other buckets: not what the rollup wrote
            self.stats.unproven += 1

    async def _tick(self, producer: Any) -> None:
        while True:
            await asyncio.sleep(_TICK_S)
            await self.judge_now(producer)

    async def judge_now(self, producer: Any) -> list[Change]:
        """Judge what settled; send its alerts (and any not sent before)."""
        book = self.book
        if book is None:
            return []
        changes: list[Change] = []
        if book.due():
            lags = await self._read_lags()
            changes = book.judge(lags)
        for change in changes:
            envelope = alert_envelope(change, namespace=self._prefix)
            self._unsent.append(envelope)
            if change.state == "raised":
                self.stats.raised += 1
            else:
                self.stats.cleared += 1
            self._told(f"alert {change.state}: {change.sentence}")
        while self._unsent:
            if not await self._send(producer, self._unsent[0]):
                break  # in order: the rest waits for the next tick
            self._unsent.pop(0)
        return changes

    async def _read_lags(self) -> Mapping[str, int] | None:
        if self._lags is None or not any(r.figure == "lag" for r in self.settings.rules()):
            return None
        try:
            return await self._lags()
        except HermesError as exc:  # no lag this window: that rule is not measured
            log.warning("alerts: consumer lag not read: %s", exc)
            return None

    async def _send(self, producer: Any, envelope: Envelope) -> bool:
        out = self._prefix + ALERTS
        try:
            data = self._codec.encode(envelope)
            key = envelope.session_id.encode()
            headers = self._guard.sign(out, key, data, envelope_headers(envelope))
            await producer.send_and_wait(out, data, key=key, headers=list(headers))
        except Exception as exc:  # sent again at the next tick, under the same id
            log.warning("alerts: an alert was not sent, trying again: %s", exc)
            return False
        return True


def _logged(line: str) -> None:
    log.warning("%s", line)


def judge_for(
    kafka: KafkaConfig,
    settings: DiagnosticsSettings,
    keyring: Keyring,
    *,
    prefix: str,
    tools: Sequence[str] = (),
    told: Callable[[str], None] | None = None,
) -> AlertJudge:
    """The judge of the bus under ``prefix``, with its components' consumer lag (and that
    of ``tools``' own groups) read when it judges; ``told`` hears each alert."""

    async def lags() -> Mapping[str, int]:
        return await component_lags(kafka, prefix, tools)

    return AlertJudge(kafka, settings, keyring, prefix=prefix, lags=lags, told=told)


@contextlib.asynccontextmanager
async def background_judge(
    judge: AlertJudge, say: Callable[[str], None]
) -> AsyncIterator[AlertJudge]:
    """The judge running beside whatever runs in the block. A broker it cannot read is
    said once (``say``), and it starts again every few seconds, reading what the log says
    anew, until the broker is back (the bus serves on without alerts meanwhile). Stopped
    on exit."""

    async def run() -> None:
        told = False
        while True:
            try:
                await judge.run()
            except HermesError as exc:
                if not told:
                    say(f"diagnostics: the alerts wait for the broker: {exc}")
                told = True
                await asyncio.sleep(_RETRY_S)
            except Exception as exc:  # a fault of the judge's own: said, and it stays down
                log.exception("alerts: the judge stopped")
                say(f"diagnostics: the alerts stopped: {exc!r}")
                return

    task = asyncio.create_task(run())
    try:
        yield judge
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        figures = judge.stats
        say(f"stopped alerts: raised={figures.raised}, cleared={figures.cleared}")


class AlertWatch:
    """The open alerts, as ``hermes.alerts`` says (see the module's text). ``start()``
    begins reading in the background; ``caught_up`` is set once the log as it was then
    has been read (and again after a broker outage, once it is read anew)."""

    def __init__(self, kafka: KafkaConfig, keyring: Keyring, *, prefix: str) -> None:
        self.alerts = OpenAlerts()
        self.caught_up = asyncio.Event()
        self._kafka, self._keyring, self._prefix = kafka, keyring, prefix
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def __aenter__(self) -> AlertWatch:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _run(self) -> None:
        while True:  # a broker away: read it all again once it is back
            try:
                await self._read()
            except HermesError as exc:
                log.warning("alerts: the dispatcher's view of the alerts stopped: %s", exc)
                await asyncio.sleep(_RETRY_S)

    async def _read(self) -> None:
        """The log to its end as it is now, folded afresh; then on, as it grows, from the
        beginning again: folding is idempotent (each rule and key's latest window's word
        stands), so nothing read twice changes anything, and a topic made anew (a broker
        back empty) is read as it comes, whatever its offsets."""
        codec, verifier = Codec(), Verifier(self._keyring)
        parts = await _alert_parts(self._kafka, self._prefix)
        folded = OpenAlerts()
        for said in await alerts_to_end(self._kafka, parts, self._prefix, codec, verifier):
            folded.take(said)
        self.alerts.replace(folded)
        self.caught_up.set()
        async with LogReader(self._kafka, parts, end=None, what="alerts") as reader:
            async for batch in reader:
                for record in batch:
                    one = alert_said(believed(record, codec, verifier, self._prefix))
                    if one is not None:
                        self.alerts.take(one)

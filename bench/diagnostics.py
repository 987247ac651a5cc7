"""The diagnostics rollup against a raw faust agent that only counts, same stream, same run.

Both are faust-streaming apps on one broker reading the same records: tool answers of
about 0.5 KB, signed, over many sessions (every partition of hermes.dispatcher), each
produced to its own prefix before the app starts. The raw agent reads each record as
bytes and adds one to a counter (no decode, no signature check, no table). The rollup
decodes, checks the signature, and adds the record's figures to its table (one changelog
record per window and key: the tumbling window and its hopping ones, the component and
the tool), with one record in flight at a time (faust-streaming issue 606). Timed from the
first record read to the last counted (the group join and the table's recovery are not
counted), in rounds that alternate the two; the best round of each counts, and the ratio
is rollup/raw. Then the memory of the rollup's table per window: its entries, and their
size as the changelog holds them (JSON), per key and window.

    python bench/diagnostics.py [--bootstrap HOST:PORT] [--count 3000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import faust
from aiokafka import AIOKafkaProducer

from hermesbus import Diagnostics, Envelope, Payload, ToolResult
from hermesbus.codec import default_codec
from hermesbus.compose.diagnostics import rollup_app
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.contract.fields import from_epoch_ms
from hermesbus.contract.headers import envelope_headers
from hermesbus.identity import Keyring, Signer, new_key
from hermesbus.processors.diagnostics import DiagnosticsSettings
from hermesbus.topics import Catalog

TOPIC = "hermes.dispatcher"
KEYS = Keyring({"tool": [new_key()], "diagnostics": [new_key()]})
"""The run's own keys: the answers are the tool processor's; the rollup signs its windows."""
WINDOW_MS = 60_000


Record = tuple[bytes, bytes, list[tuple[str, bytes]]]


def answers(count: int, sessions: int, start_ms: int) -> list[Record]:
    """``count`` tool answers over ``sessions`` sessions and 5 minutes of records' time:
    key, value and the envelope's headers each."""
    codec, made = default_codec(), []
    for i in range(count):
        tool = ("ocr_tool", "trip_tool", "rule_engine_tool", "finance_tool")[i % 4]
        envelope = Envelope(
            message_id=f"answer-{i}",
            timestamp=from_epoch_ms(start_ms + i * 300_000 // count),
            source=f"tool:{tool}",
            target="mcp:dispatcher",
            session_id=f"sess-{i % sessions}",
            user_id="u_5e884898da28047151d0e56f8dc62927",
            trace_id=uuid.UUID(int=i + 1).hex,
            payload=Payload(
                task="expense_validation",
                body=ToolResult(
                    tool=tool,
                    status_code=200,
                    verified=True,
                    result_json=json.dumps(
                        {"valid": True, "approver": "张主管", "invoices": ["inv-001", "inv-002"]}
                    ),
                ),
            ),
            diagnostics=Diagnostics(processing_time_ms=3.0 + i % 40, confidence_score=0.9),
        )
        value, key = codec.encode(envelope), envelope.session_id.encode()
        made.append((key, value, list(envelope_headers(envelope))))
    return made


async def provision(kafka: KafkaConfig, prefix: str, records: list[Record]) -> None:
    """The catalog's topics under ``prefix``, and the records on its dispatcher topic,
    signed by the tool processor."""
    async with KafkaAdmin(kafka) as admin:
        await admin.create(list(Catalog.load().with_overrides(prefix=prefix)))
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        topic, signer = prefix + TOPIC, Signer("tool", KEYS)
        for key, value, headers in records:
            signed = list(signer.sign(topic, key, value, headers))
            await producer.send(topic, value, key=key, headers=signed)
        await producer.flush()
    finally:
        await producer.stop()


def settings_for(embedded: bool) -> DiagnosticsSettings:
    settings = DiagnosticsSettings(close_every_ms=60_000)  # nothing closes while timed
    return settings.for_embedded_broker() if embedded else settings


async def raw_round(
    kafka: KafkaConfig, prefix: str, count: int, embedded: bool, home: Path
) -> float:
    """Seconds a faust agent takes to count ``count`` records as bytes."""
    settings = settings_for(embedded)
    session_s = (settings.session_timeout_ms or 60_000) / 1000
    app = faust.App(
        prefix + "bench-raw",
        broker=[f"kafka://{kafka.bootstrap}"],
        store="memory://",
        datadir=str(home),
        web_enabled=False,
        topic_allow_declare=False,
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=session_s,
        broker_heartbeat_interval=(settings.heartbeat_ms or 3_000) / 1000,
        broker_rebalance_timeout=max(session_s * 2, 12.0),
    )
    source = app.topic(prefix + TOPIC, key_type=bytes, value_type=bytes,
                       key_serializer="raw", value_serializer="raw")  # fmt: skip
    seen = {"n": 0}
    first: list[float] = []
    done = asyncio.Event()

    async def counting(stream):  # type: ignore[no-untyped-def]
        async for _ in stream:
            if not first:
                first.append(time.perf_counter())
            seen["n"] += 1
            if seen["n"] >= count:
                done.set()

    app.agent(source, concurrency=1, name="count")(counting)
    await app.start()
    try:
        await asyncio.wait_for(done.wait(), 600)
        return time.perf_counter() - first[0]
    finally:
        await app.stop()


async def rollup_round(
    kafka: KafkaConfig, prefix: str, count: int, embedded: bool, home: Path
) -> tuple[float, dict[str, float]]:
    """Seconds the rollup takes to count ``count`` records; and its table per window."""
    app = await rollup_app(kafka, settings_for(embedded), KEYS, prefix=prefix, datadir=home)
    first: list[float] = []
    counting = app.count

    def timed(message):  # type: ignore[no-untyped-def]
        if not first:
            first.append(time.perf_counter())
        counting(message)

    app.count = timed  # type: ignore[method-assign]
    await app.start()
    try:
        deadline = time.monotonic() + 600
        while app.stats.counted < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the rollup counted {app.stats.counted} of {count}")
            await asyncio.sleep(0.01)
        took = time.perf_counter() - first[0]
        entries = dict(app.tallies.data)
    finally:
        await app.stop()
    windows = {"|".join(name.split("|")[:3]) for name in entries}  # kind|size|start
    per_key_window = {"|".join(name.split("|")[:4]) for name in entries}  # ...|key
    size = sum(len(json.dumps(v).encode()) for v in entries.values())
    table = {
        "entries": len(entries),
        "windows": len(windows),
        "bytes": size,
        "bytes_per_entry": size / len(entries),
        "bytes_per_window": size / len(windows),
        "keys_per_window": len(per_key_window) / len(windows),
        "entries_per_window": len(entries) / len(windows),
    }
    return took, table


@asynccontextmanager
async def broker(args: argparse.Namespace) -> AsyncIterator[tuple[str, bool]]:
    if args.bootstrap or os.environ.get("HERMES_KAFKA_BOOTSTRAP"):
        yield args.bootstrap or os.environ["HERMES_KAFKA_BOOTSTRAP"], False
        return
    from hermesbus.compose.broker import EmbeddedBroker  # noqa: PLC0415 - optional

    with tempfile.TemporaryDirectory() as home:
        async with EmbeddedBroker(home=Path(home)) as embedded:
            yield embedded.bootstrap, True


async def run(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.ERROR)
    async with broker(args) as (bootstrap, embedded):
        kafka = KafkaConfig(bootstrap=bootstrap)
        where = "embedded broker (tansu)" if embedded else bootstrap
        start = int(time.time() * 1000) - 3_600_000  # an hour back: windows long closed
        start -= start % WINDOW_MS
        records = answers(args.count, args.sessions, start)
        print(f"broker: {where}; {args.count} answers of ~{len(records[0][1])} B over "
              f"{args.sessions} sessions, {args.rounds} rounds")  # fmt: skip
        raw, ours, table = [], [], {}
        with tempfile.TemporaryDirectory() as home:
            for r in range(args.rounds):
                for name in ("raw", "rollup"):
                    prefix = f"bench-dg-{name}-{r}-{uuid.uuid4().hex[:6]}."
                    await provision(kafka, prefix, records)
                    folder = Path(home) / prefix
                    if name == "raw":
                        took = await raw_round(kafka, prefix, args.count, embedded, folder)
                        raw.append(took)
                    else:
                        took, table = await rollup_round(
                            kafka, prefix, args.count, embedded, folder
                        )
                        ours.append(took)
                    print(f"  round {r + 1} {name:6} {args.count / took:8.0f} records/s")
    best_raw, best_ours = min(raw), min(ours)
    print()
    print(f"{'':10}{'records/s':>12}{'median/s':>12}")
    print(
        f"{'raw faust':10}{args.count / best_raw:12.0f}{args.count / statistics.median(raw):12.0f}"
    )
    print(
        f"{'rollup':10}{args.count / best_ours:12.0f}{args.count / statistics.median(ours):12.0f}"
    )
    print(f"rollup/raw: {best_raw / best_ours:.2f} (best rounds)")
    print()
    print(
        f"table: {table['entries']} entries over {table['windows']:.0f} windows "
        f"({table['keys_per_window']:.1f} keys, {table['entries_per_window']:.1f} key-partitions "
        f"each), {table['bytes'] / 1024:.0f} KiB "
        f"as the changelog holds them: {table['bytes_per_window'] / 1024:.1f} KiB a window, "
        f"{table['bytes_per_entry']:.0f} B an entry"
    )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory of this process: {peak:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="default: $HERMES_KAFKA_BOOTSTRAP, else embedded")
    parser.add_argument("--count", type=int, default=3000, help="answers per round")
    parser.add_argument("--sessions", type=int, default=300, help="sessions they are over")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()

"""Replay and tail: shadow replay against raw decoding, ``tail --json`` against raw reading.

(a) shadow replay: ``--sessions`` expense reports (three turns each, through the four
    processors with scripted tools, about 70 envelopes a report) are run once on the
    in-memory bus (``hermesbus.testing``) to make a log; then, in rounds, the same log is
    (raw) decoded record by record with the codec, and (shadow) decoded and shadow-
    replayed by every processor, compared with what they emitted. Envelopes per second of
    each; target shadow/raw >= 0.3. The replay must find no divergence. Then the same
    replay with no handler logic (handlers that only build again what they emitted then:
    the replay's own cost), and each processor alone (µs per input).
(b) tail: ``--count`` envelopes of ~1 KB on one topic of the broker; (raw) a plain
    aiokafka consumer reads them to the end as kcat ``-C -e`` does (assign, seek to the
    beginning, fetch until the end, touch the bytes); (tail) ``hermesbus.trace.tail`` reads
    them, decodes each and writes its ``--json`` line (orjson) to a null sink. Records
    per second of each, and the ratio (no target: it says what decoding and JSON cost).

    .venv/bin/python bench/replay.py [--sessions 100] [--count 20000] [--rounds 3] [--bootstrap H:P]

Without ``--bootstrap`` the embedded broker is started for (b).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import io
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' demo fixtures: the scripted tools' answers

from bench.index import envelope as call_envelope  # noqa: E402
from bench.index import produce, provisioned  # noqa: E402
from hermesbus.base.lifecycle import tune_collector  # noqa: E402
from hermesbus.codec import default_codec  # noqa: E402
from hermesbus.compose.broker import EmbeddedBroker  # noqa: E402
from hermesbus.compose.stack import REPLAYABLE, in_memory, shadows  # noqa: E402
from hermesbus.connectors.kafka import KafkaConfig  # noqa: E402
from hermesbus.contract.envelope import Envelope  # noqa: E402
from hermesbus.processors import protocol  # noqa: E402
from hermesbus.replay.shadow import Shadow, recording_of, shadow  # noqa: E402
from hermesbus.runtime import HandlerInput, Outcome  # noqa: E402
from hermesbus.trace.index import ArchivedRecord  # noqa: E402
from hermesbus.trace.tail import Position, tail  # noqa: E402
from tests.unit.processors.conversation.demo import (  # noqa: E402
    FINANCE,
    demo_tools,
    user_turn,
)

TARGET = 0.3
SAID = ("我要报上个月去深圳的差旅费", "[上传两张图片]", "不用，就这三张", "确认")


def _finance(call: Any) -> dict[str, Any]:
    arguments = orjson.loads(call.arguments_json)
    if arguments.get("action") == "submit":
        return {"status": "submitted", "report_id": "EXP-1", "approver": "张主管"}
    return FINANCE


async def log_of(sessions: int, home: Path) -> list[ArchivedRecord]:
    """The topics after ``sessions`` reports on the in-memory bus."""
    tools, healthy = demo_tools(finance_tool=_finance)
    async with in_memory(home, tools=tools, health=healthy) as bus:
        for s in range(sessions):
            for n, text in enumerate(SAID):
                await bus.send(user_turn(f"sess-{s}", n, text, s * 600 + n * 30))
        return bus.records()


def raw_decode(records: list[ArchivedRecord]) -> float:
    codec = default_codec()
    started = time.perf_counter()
    for record in records:
        codec.decode(record.value)
    return time.perf_counter() - started


def echoes(wired: list[Shadow]) -> list[Shadow]:
    """Each processor replaced by a handler that only builds again, as a handler builds
    them, the envelopes the processor emitted then (its cue tells it): what the replay
    costs of itself, with the processors' own logic left out."""
    fields = tuple(Envelope.model_fields)
    found = []
    for spec in wired:
        said: list[Envelope] = []

        def cue(recorded: Sequence[Envelope], said: list[Envelope] = said) -> None:
            said[:] = recorded

        async def again(_: HandlerInput, said: list[Envelope] = said) -> Outcome:
            built = (Envelope(**{name: getattr(e, name) for name in fields}) for e in said)
            return Outcome(emit=tuple(built))

        found.append(Shadow(spec.name, again, spec.topics, cue=cue, sessions=spec.sessions))
    return found


async def shadow_replay(
    records: list[ArchivedRecord], *, names: Sequence[str] = (), floor: bool = False
) -> tuple[float, int]:
    """Seconds to read the recording and shadow-replay it (``names``: those processors
    only; ``floor``: with :func:`echoes` instead of the processors), and handler calls."""
    started = time.perf_counter()
    recording = recording_of(records, "bench")
    tune_collector()  # as `hermesbus replay` does once it has read the recording
    async with shadows(names or tuple(REPLAYABLE)) as wired:
        chosen = echoes(wired) if floor else wired
        report = await shadow(recording, chosen, policy=protocol.ProtocolPolicy())
    elapsed = time.perf_counter() - started
    if report.diverged:
        raise SystemExit("the replay diverged: " + "\n".join(report.divergences[0].lines()))
    return elapsed, sum(report.replayed.values())


async def per_processor(records: list[ArchivedRecord], rounds: int) -> None:
    """Each processor replayed alone over a recording read once: µs per input it handled."""
    recording = recording_of(records, "bench")
    for name in REPLAYABLE:
        best, calls = float("inf"), 0
        for _ in range(rounds):
            async with shadows((name,)) as wired:
                started = time.perf_counter()
                report = await shadow(recording, wired, policy=protocol.ProtocolPolicy())
                best = min(best, time.perf_counter() - started)
            calls = report.replayed[name]
        print(f"    {name:<13} {calls:>6,} inputs  {best / calls * 1e6:6.0f} µs each")


async def part_a(sessions: int, rounds: int) -> bool:
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as folder:
        records = await log_of(sessions, Path(folder))
    count = len(records)
    print(f"(a) shadow replay of {sessions} reports, {count:,} envelopes, best of {rounds}")
    raws, shadows_, floors, ratios, inputs = [], [], [], [], 0
    for _ in range(rounds):
        gc.collect()
        raw = raw_decode(records)
        gc.collect()
        replayed, inputs = await shadow_replay(records)
        gc.collect()
        floor, _ = await shadow_replay(records, floor=True)
        raws.append(count / raw)
        shadows_.append(count / replayed)
        floors.append(count / floor)
        ratios.append(raw / replayed)
    best_raw, best_shadow, best_floor = max(raws), max(shadows_), max(floors)
    ratio = best_shadow / best_raw
    print(f"  raw decoding            {best_raw:>10,.0f} env/s")
    note = "ok" if ratio >= TARGET else f"below the target {TARGET}"
    print(f"  shadow replay           {best_shadow:>10,.0f} env/s   {ratio:5.2f}  {note}")
    median = statistics.median(ratios)
    print(f"  ({inputs:,} handler calls per replay; median of the rounds' ratios {median:.2f})")
    print(
        f"  replay, no handler logic {best_floor:>9,.0f} env/s   {best_floor / best_raw:5.2f}"
        "  (handlers only build again what they emitted then)"
    )
    print("  each processor alone (µs per input, the recording read beforehand):")
    await per_processor(records, rounds)
    return ratio >= TARGET


@contextlib.asynccontextmanager
async def broker(bootstrap: str | None) -> AsyncIterator[str]:
    if bootstrap:
        yield bootstrap
        return
    async with EmbeddedBroker() as embedded:
        yield embedded.bootstrap


async def raw_read(kafka: KafkaConfig, topic: str) -> int:
    """kcat -C -e: assign every partition, from the beginning until nothing more comes
    (two empty polls: tansu's reported ends fall short, so tail ends the same way)."""
    consumer = AIOKafkaConsumer(**kafka.client_kwargs(), group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        numbers = sorted(consumer.partitions_for_topic(topic) or ())
        parts = [TopicPartition(topic, p) for p in numbers]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        seen, size, empty = 0, 0, 0
        while empty < 2:
            batch = await consumer.getmany(*parts, timeout_ms=250)
            empty = 0 if batch else empty + 1
            for records in batch.values():
                seen += len(records)
                size += sum(len(r.value or b"") for r in records)
        return seen
    finally:
        await consumer.stop()


async def tail_json(kafka: KafkaConfig, topic: str) -> int:
    sink, seen = io.BytesIO(), 0
    async for tailed in tail(kafka, [topic], start=Position("beginning"), end=Position("end")):
        sink.write(orjson.dumps(tailed.as_json()) + b"\n")
        seen += 1
        if sink.tell() > 1 << 24:
            sink.seek(0)
            sink.truncate()
    return seen


async def part_b(count: int, rounds: int, bootstrap: str | None) -> None:
    async with broker(bootstrap) as address:
        kafka = KafkaConfig(bootstrap=address)
        prefix = f"bench-tail-{int(time.time())}."
        await provisioned(kafka, prefix)
        topic = prefix + "hermes.tool"
        await produce(kafka, topic, count)
        size = len(default_codec().encode(call_envelope(0, 0)))
        print(f"(b) reading {count:,} envelopes (~{size} B) from {address}, best of {rounds}")
        raws, tails = [], []
        for _ in range(rounds):
            started = time.perf_counter()
            seen = await raw_read(kafka, topic)
            raws.append(seen / (time.perf_counter() - started))
            started = time.perf_counter()
            listed = await tail_json(kafka, topic)
            tails.append(listed / (time.perf_counter() - started))
            if listed < count - 1 or seen < count - 1:
                print(f"  warning: raw read {seen}, tail listed {listed} of {count}")
        print(f"  raw consumer (kcat -C -e)  {max(raws):>10,.0f} rec/s")
        ratio = max(tails) / max(raws)
        print(f"  tail --json                {max(tails):>10,.0f} rec/s   {ratio:5.2f}")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--skip-tail", action="store_true")
    args = parser.parse_args()
    tune_collector()  # as `hermesbus replay` and `up` run: rare collections, start-up frozen
    ok = await part_a(args.sessions, args.rounds)
    if not args.skip_tail:
        await part_b(args.count, args.rounds, args.bootstrap)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))

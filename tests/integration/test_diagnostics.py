"""The diagnostics rollup (faust-streaming) on real brokers: what it emits for closed
windows, and the faust-streaming traps it is built around, each shown here:

- a window closes without a later record (faust-streaming issue 250);
- its open windows survive a restart and nothing emitted is emitted again (PR 412,
  issue 651);
- a kill -9 mid-stream loses nothing and counts nothing twice (issue 606: one record in
  flight at a time, so no offset is committed past one not yet counted).

Windows are seconds long here (the settings say so): the tests wait on them, not on
sleeps."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from hermesbus import Diagnostics, Metadata
from hermesbus.codec import Codec
from hermesbus.compose.diagnostics import RollupApp, rollup_app
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.contract.envelope import Envelope
from hermesbus.contract.fields import epoch_ms, from_epoch_ms
from hermesbus.contract.headers import envelope_headers
from hermesbus.contract.payloads import Payload, ToolResult, WindowRollup
from hermesbus.identity import Verifier
from hermesbus.processors.diagnostics import DiagnosticsSettings
from hermesbus.processors.protocol import DIAGNOSTICS, ProtocolPolicy
from hermesbus.topics import DIAGNOSTICS as DIAGNOSTICS_TOPIC
from tests import signing
from tests.cli_process import Background, clean_env, hermesbus
from tests.integration.stacks import catalog_topics

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(420)]  # several waits a test

TUMBLING_MS = 2_000
SMALL = {
    "tumbling_ms": TUMBLING_MS,
    "hopping_ms": 3 * TUMBLING_MS,
    "hop_ms": TUMBLING_MS,
    "grace_ms": 500,
    "idle_ms": 1_500,
    "close_every_ms": 200,
}
WAIT_S = 120.0
"""How long a test waits for the figures it expects (generous: a busy machine)."""
TOPIC = "hermes.dispatcher"
codec = Codec()


def small_settings(bootstrap: str) -> DiagnosticsSettings:
    settings = DiagnosticsSettings.model_validate(SMALL)
    if bootstrap == os.environ.get("HERMES_TEST_EMBEDDED_BOOTSTRAP"):
        return settings.for_embedded_broker()
    return settings.model_copy(update={"session_timeout_ms": 10_000, "heartbeat_ms": 1_000})


def answer(i: int, at_ms: int, *, tool: str = "ocr_tool", confidence: float = 0.9) -> Envelope:
    """The tool processor's answer number ``i``, at ``at_ms``, as it would emit it."""
    return Envelope(
        message_id=f"answer-{i}-{at_ms}",
        timestamp=from_epoch_ms(at_ms),
        source=f"tool:{tool}",
        target="mcp:dispatcher",
        session_id=f"s{i % 11}",
        user_id="u1",
        trace_id=f"t{i}",
        payload=Payload(body=ToolResult(tool=tool, status_code=200, result_json="{}")),
        diagnostics=Diagnostics(processing_time_ms=3.0 + i % 40, confidence_score=confidence),
    )


async def produce(
    bootstrap: str, prefix: str, envelopes: Sequence[Envelope], *, identity: str = "tool"
) -> None:
    """Each envelope on the prefix's dispatcher topic, keyed by session, signed by ``identity``."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        topic = prefix + TOPIC
        for envelope in envelopes:
            value, key = codec.encode(envelope), envelope.session_id.encode()
            headers = signing.signed(
                topic, key, value, envelope_headers(envelope), identity=identity
            )
            await producer.send(topic, value, key=key, headers=headers)
        await producer.flush()
    finally:
        await producer.stop()


class Emitted:
    """What the rollup emitted on the prefix's hermes.diagnostics, read from the start,
    each record's signature checked as a processor checks it."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.topic = prefix + DIAGNOSTICS_TOPIC
        self.bootstrap = bootstrap
        self.records: list[tuple[str, WindowRollup]] = []
        self._verifier = Verifier(signing.keys())
        self._consumer: AIOKafkaConsumer | None = None

    async def __aenter__(self) -> Emitted:
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, auto_offset_reset="earliest"
        )
        await self._consumer.start()
        self._consumer.assign([TopicPartition(self.topic, p) for p in range(6)])
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._consumer is not None
        await self._consumer.stop()

    async def until(self, done: Callable[[Emitted], bool], what: str) -> None:
        assert self._consumer is not None
        deadline = time.monotonic() + WAIT_S
        while not done(self):
            if time.monotonic() > deadline:
                pytest.fail(f"not emitted within {WAIT_S:g} s: {what}; have {self.totals()}")
            batches = await self._consumer.getmany(timeout_ms=500)
            for records in batches.values():
                for record in records:
                    self._take(record)

    async def settle(self, quiet: int = 6) -> None:
        """Read on until ``quiet`` polls in a row (500 ms each) bring nothing: a part sent
        after the totals were reached would change them."""
        assert self._consumer is not None
        empty = 0
        while empty < quiet:
            batches = await self._consumer.getmany(timeout_ms=500)
            empty = 0 if batches else empty + 1
            for records in batches.values():
                for record in records:
                    self._take(record)

    def _take(self, record: object) -> None:
        value, key, headers = record.value, record.key, tuple(record.headers)  # type: ignore[attr-defined]
        signer = self._verifier.signer(self.topic, key, value, headers)
        envelope = codec.decode(value)
        assert signer == DIAGNOSTICS and envelope.source == "diagnostics:rollup"
        assert ProtocolPolicy().refusal(DIAGNOSTICS_TOPIC, signer, envelope) is None
        body = envelope.payload.body
        assert isinstance(body, WindowRollup) and key == body.key.encode()
        self.records.append((envelope.message_id, body))

    def parts(self) -> dict[str, WindowRollup]:
        """One record per id: a re-send after a crash is the same record (checked)."""
        kept: dict[str, WindowRollup] = {}
        for message_id, body in self.records:
            assert kept.setdefault(message_id, body) == body, f"{message_id} re-sent changed"
        return kept

    def totals(self, window: str = "tumbling") -> dict[tuple[str, int], int]:
        """(key, window start ms) -> the count over its parts."""
        found: dict[tuple[str, int], int] = {}
        for body in self.parts().values():
            if body.window == window:
                at = (body.key, epoch_ms(body.start))
                found[at] = found.get(at, 0) + body.count
        return found

    def total(self, key: str, window: str = "tumbling") -> int:
        return sum(n for (k, _), n in self.totals(window).items() if k == key)


def past_window(ago_ms: int = 60_000) -> int:
    """The start of a tumbling window ``ago_ms`` back: long closed by the wall clock."""
    at = int(time.time() * 1000) - ago_ms
    return at - at % TUMBLING_MS


async def started(bootstrap: str, prefix: str, home: Path) -> RollupApp:
    app = await rollup_app(
        KafkaConfig(bootstrap=bootstrap),
        small_settings(bootstrap),
        signing.keys(),
        prefix=prefix,
        datadir=home,
    )
    await app.start()
    return app


async def test_a_window_closes_without_any_later_record(
    broker: str, unique: str, tmp_path: Path
) -> None:
    prefix = f"dg{unique}."
    await catalog_topics(broker, prefix)
    start = past_window()
    answers = [answer(i, start + 40 * i, confidence=0.7) for i in range(30)]
    forged = answer(99, start, tool="ocr_tool")
    retry = answer(98, start).model_copy(update={"metadata": Metadata(attempt=2)})
    await produce(broker, prefix, answers)
    # both claim the tool, signed by an app: a retry is believed only from a processor
    await produce(broker, prefix, [forged, retry], identity="app")
    app = await started(broker, prefix, tmp_path)
    try:
        async with Emitted(broker, prefix) as emitted:  # nothing is produced after this
            await emitted.until(
                lambda e: (
                    e.total("tool:ocr_tool", "hopping") == 3 * 30
                    and e.total("component:tool", "hopping") == 3 * 30
                    and e.total("tool:ocr_tool") == e.total("component:tool") == 30
                ),
                "the tumbling window and its 3 hopping windows, for the tool and its component",
            )
    finally:
        await app.stop()
    assert emitted.totals() == {("tool:ocr_tool", start): 30, ("component:tool", start): 30}
    hopping = emitted.totals("hopping")
    covering = {("tool:ocr_tool", start - n * TUMBLING_MS) for n in range(3)}
    assert {at for at in hopping if at[0] == "tool:ocr_tool"} == covering
    assert all(hopping[at] == 30 for at in covering)
    parts = [
        b for b in emitted.parts().values() if b.key == "tool:ocr_tool" and b.window == "tumbling"
    ]
    assert sum(b.confidence_n for b in parts) == 30
    assert all(b.confidence_mean == pytest.approx(0.7) for b in parts)
    assert sum(sum(b.latency_counts) for b in parts) == 30
    assert all(0 < b.latency_p50_ms <= b.latency_p99_ms for b in parts)
    assert app.stats.unproven == 2  # the forged answers moved nothing
    # issue 606: one record in flight, so no offset is acked past one not yet counted
    assert [agent.concurrency for agent in app.app.agents.values()] == [1]


async def test_a_restart_recovers_open_windows_and_emits_nothing_twice(
    embedded_bootstrap: str, unique: str, tmp_path: Path
) -> None:
    broker, prefix = embedded_bootstrap, f"dr{unique}."
    await catalog_topics(broker, prefix)
    closed = past_window()
    await produce(broker, prefix, [answer(i, closed + 40 * i) for i in range(20)])
    app = await started(broker, prefix, tmp_path / "first")
    try:
        async with Emitted(broker, prefix) as emitted:
            await emitted.until(lambda e: e.total("tool:ocr_tool") == 20, "the closed window")
        # a window still open when the rollup stops: 15 s ahead of the wall clock
        ahead = past_window(-15_000)
        await produce(broker, prefix, [answer(100 + i, ahead + 10 * i) for i in range(7)])
        deadline = time.monotonic() + WAIT_S
        while app.stats.counted < 27 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert app.stats.counted == 27
    finally:
        await app.stop()
    # late answers to the window emitted before the stop: a next part of it
    await produce(broker, prefix, [answer(200 + i, closed + 40 * i) for i in range(10)])
    again = await started(broker, prefix, tmp_path / "second")
    try:
        async with Emitted(broker, prefix) as emitted:
            await emitted.until(
                lambda e: e.total("tool:ocr_tool") == 37 and e.total("component:tool") == 37,
                "the late part and the window open at the restart",
            )
    finally:
        await again.stop()
    print(f"first: {app.stats}; after the restart: {again.stats}")
    assert {at: n for at, n in emitted.totals().items() if at[0] == "tool:ocr_tool"} == {
        ("tool:ocr_tool", closed): 30,
        ("tool:ocr_tool", ahead): 7,  # counted before the stop, recovered from the changelog
    }
    assert again.stats.counted == 10  # it read only what came after the stop
    assert again.stats.late == 10  # to windows emitted before the stop
    ids = [message_id for message_id, _ in emitted.records]
    assert len(ids) == len(set(ids))  # nothing emitted before the stop was emitted again
    late = [
        b
        for b in emitted.parts().values()
        if b.key == "tool:ocr_tool" and b.window == "tumbling" and epoch_ms(b.start) == closed
    ]
    assert {b.part for b in late} == {0, 1}
    assert sum(b.count for b in late if b.part == 1) == 10


def test_a_kill_9_mid_stream_counts_every_input_exactly_once(
    embedded_bootstrap: str, unique: str, tmp_path: Path
) -> None:
    broker, prefix = embedded_bootstrap, f"dk{unique}."
    asyncio.run(catalog_topics(broker, prefix))
    env = clean_env(
        tmp_path,
        HERMES_KEYS_FILE=os.environ["HERMES_KEYS_FILE"],
        **{f"HERMES_DIAGNOSTICS_{k.upper()}": str(v) for k, v in SMALL.items()},
        HERMES_DIAGNOSTICS_SESSION_TIMEOUT_MS="6000",
        HERMES_DIAGNOSTICS_HEARTBEAT_MS="1000",
        HERMES_DIAGNOSTICS_ONE_RECORD_BATCHES="true",
    )
    args = ("diagnostics", "--bootstrap", broker, "--prefix", prefix)
    total, rate = 3_000, 300  # inputs, and how many a second (10 s of traffic)

    killed = asyncio.Event()

    async def traffic() -> None:
        """Half the inputs, a pause until the kill, then the rest: the kill is mid-stream
        however slowly the rollup joins on a busy machine."""
        for batch in range(total // 100):
            if batch == total // 200:
                await killed.wait()
            now = int(time.time() * 1000)
            await produce(broker, prefix, [answer(batch * 100 + i, now + i) for i in range(100)])
            await asyncio.sleep(100 / rate)

    async def scenario() -> tuple[Emitted, str]:
        first = Background(tmp_path, *args, env=env, name="first")
        try:
            await asyncio.to_thread(first.wait_for, "diagnostics: reading", WAIT_S, stdout=True)
            sending = asyncio.create_task(traffic())
            async with Emitted(broker, prefix) as emitted:
                await emitted.until(lambda e: e.total("component:tool") > 0, "a first window")
                assert not sending.done(), "the traffic ended before the kill: not mid-stream"
                first.kill()  # SIGKILL: no commit, no changelog flush, no goodbye
                killed.set()
                killed_at = emitted.total("component:tool")
                await sending
                second = Background(tmp_path, *args, env=env, name="second")
                try:
                    await emitted.until(
                        lambda e: (
                            e.total("component:tool") == total and e.total("tool:ocr_tool") == total
                        ),
                        f"every one of {total} inputs, once",
                    )
                    await emitted.settle()  # and what comes after: nothing more may count
                finally:
                    second.process.send_signal(signal.SIGTERM)
                    assert second.process.wait(WAIT_S) == 0
            said = second.out.read_text()
            print(f"killed at {killed_at} of {total} emitted; after the restart: {said.strip()}")
            return emitted, said
        finally:
            first.kill()

    emitted, said = asyncio.run(scenario())
    assert emitted.total("component:tool") == emitted.total("tool:ocr_tool") == total
    assert emitted.total("tool:ocr_tool", "hopping") == 3 * total
    skipped = re.search(r"(\d+) redelivered skipped", said)
    assert skipped is not None, said
    assert int(skipped.group(1)) > 0  # counted before the kill, not committed: not twice


@pytest.mark.timeout(600)
def test_stats_during_up_demo_shows_every_component_the_tools_and_the_flow_states(
    tmp_path: Path,
) -> None:
    """The acceptance: ``hermesbus up --demo`` runs the rollup beside the processors, and
    ``hermesbus stats`` shows all four components, the demo's tools and the flows' states
    with counts and latencies; the closed windows are in the trace index too."""
    home = tmp_path / "home"
    windows = {f"HERMES_DIAGNOSTICS_{k.upper()}": str(v) for k, v in SMALL.items()}
    windows |= {"HERMES_DIAGNOSTICS_GRACE_MS": "1000", "HERMES_DIAGNOSTICS_IDLE_MS": "1000"}
    env = clean_env(home, HERMES_CONVERSATION_BUDGET_SCALE="6", **windows)
    up = Background(tmp_path, "up", "--demo", env=env, name="up")
    try:
        up.wait_for("demo: all four conversations finished", within_s=300, stdout=True)
        said = up.stderr()
        assert "diagnostics: rollup joined in" in said, said
        found = re.search(r"broker up: embedded \(tansu, in memory\) at (\S+)", said)
        assert found is not None, said
        bootstrap = found.group(1)
        rows: dict[str, dict[str, object]] = {}
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            ran = hermesbus(
                "stats",
                "--json",
                "--windows",
                "120",
                "--bootstrap",
                bootstrap,
                env=env,
                cwd=tmp_path,
            )
            assert ran.code == 0, ran.output
            rows = {row["key"]: row for row in json.loads(ran.out)["rows"]}
            if _complete(rows):
                break
            time.sleep(1)
        print("stats:", {key: (row["count"], row["p50_ms"]) for key, row in rows.items()})
        assert _complete(rows), sorted(rows)
        indexed = hermesbus(
            "search", "--action", "WindowRollup", "--json", "--limit", "5", env=env, cwd=tmp_path
        )
        assert indexed.code == 0, indexed.output
        documents = json.loads(indexed.out)["documents"]
        assert len(documents) == 5, indexed.out
        for doc in documents:  # the rollup's own dataset, its figures as fields
            assert doc["event"]["dataset"] == "hermes.diagnostics"
            assert doc["hermes"]["rollup"]["count"] > 0 and doc["hermes"]["signature"]["verified"]
        assert up.interrupt(60) == 130
    finally:
        if up.process.poll() is None:  # failed midway: Ctrl-C first, so up stops its broker
            with contextlib.suppress(subprocess.TimeoutExpired):
                up.interrupt(30)
        up.kill()
    said = up.stderr()
    assert "stopped diagnostics: counted=" in said and "Traceback" not in said, said


COMPONENTS = ("conversation", "dispatcher", "tool", "memory")
DEMO_TOOLS = {"ocr_tool", "rule_engine_tool", "org_tool", "finance_tool", "table_tool"}


def _complete(rows: dict[str, dict[str, object]]) -> bool:
    """Every component, the demo's tools and at least five flow states, each counted and
    timed."""

    def timed(key: str) -> bool:
        row = rows.get(key)
        return row is not None and int(row["count"]) > 0 and row["p50_ms"] is not None  # type: ignore[call-overload]

    states = [key for key in rows if key.startswith("state:") and timed(key)]
    return (
        all(timed(f"component:{name}") for name in COMPONENTS)
        and all(timed(f"tool:{name}") for name in DEMO_TOOLS)
        and len(states) >= 5
    )

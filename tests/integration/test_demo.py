"""Both expense-report conversations and the table export through the four processors, on
each real broker.

The stack is the one ``hermesbus up --demo`` runs (SQLite stores in a fresh HERMES_HOME,
the demo tools in worker processes); only the topics are prefixed per test.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer

from hermesbus import Client, Envelope, MemoryWrite, Reply, TrustLevel
from hermesbus.cli._demo import lacks
from hermesbus.codec import decode
from hermesbus.compose.settings import Settings
from hermesbus.compose.stack import Stack, stack
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.demo import tables
from hermesbus.demo.expense import DEMO_USER, conversations, missing, reply_text, run, talk
from hermesbus.processors.conversation import FLOW_SETTLE_MS
from hermesbus.topics import Catalog
from hermesbus.trace.spans import collect, spans
from hermesbus.trace.tail import Filters, Position, tail
from tests.integration.stacks import demo_stack

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture
async def running(
    broker: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Stack]:
    home = tmp_path / "home"
    async with demo_stack(broker, f"demo-{unique}.", home, monkeypatch) as running:
        yield running


def _quiet(kind: str, item: object) -> None:
    """The demo's printer, silenced: the test reads what was said instead."""


async def test_both_conversations_finish_with_the_seed_figures(running: Stack) -> None:
    submitted, held = await run(running.bootstrap, running.prefix, _quiet)
    assert missing(submitted, "已提交") == []
    assert missing(held, "未完成报销流程") == []
    for said in (submitted, held):
        states = [r.source for _, r in said.replies if r.source.startswith("conversation:")]
        assert states == [
            "conversation:S2",
            "conversation:S3.1",
            "conversation:S4",
            "conversation:S5",
        ]  # the walkthrough's path, one answer per user turn
        notices = [r for _, r in said.replies if r.source == "mcp:dispatcher"]
        assert [reply_text(n) for n in notices] == [
            "ocr_tool 处理中，约 30 秒（processing, about 30 s）"
        ]
        assert isinstance(notices[0].payload.body, Reply) and notices[0].payload.body.degraded
    assert await lacks(running, submitted) == []
    assert await lacks(running, held) == []


async def test_memory_holds_the_verified_graph_and_the_unfinished_report(running: Stack) -> None:
    submitted, held = await run(running.bootstrap, running.prefix, _quiet)
    assert await lacks(running, submitted) == [] == await lacks(running, held)  # writes landed
    facts = await running.memory.facts(f"user:{DEMO_USER}", TrustLevel.VERIFIED)
    assert {(f.subject, f.relation, f.object, f.verified_tool) for f in facts} >= {
        (f"user:{DEMO_USER}", "belongs_to", "dept:采购部", "org_tool"),
        ("trip:trip_shenzhen_2024_05", "taken_by", f"user:{DEMO_USER}", "trip_tool"),
    }
    approvals = await running.memory.facts("person:张主管", TrustLevel.VERIFIED)
    assert [(f.relation, f.verified_tool) for f in approvals] == [("approved_by", "finance_tool")]
    assert await running.memory.facts("person:张主管", TrustLevel.CERTIFIED) == ()
    item = await running.memory.item(DEMO_USER, f"unfinished:{held.conversation.session_id}")
    assert item is not None
    unfinished = json.loads(item.value_json)
    assert unfinished["label"] == "未完成报销流程"
    assert unfinished["snapshot"]["state_id"] == "S4"  # where the user stopped
    assert (
        await running.memory.item(DEMO_USER, f"unfinished:{submitted.conversation.session_id}")
        is None
    )
    audit = await _read_all(running, "hermes.audit")
    created = [e for e in audit if e.payload.task == "graph.created"]
    assert isinstance(created[0].payload.body, MemoryWrite)
    assert any(
        "approved_by" in e.payload.body.key
        for e in created
        if isinstance(e.payload.body, MemoryWrite)
    )


async def test_each_trace_has_spans_of_all_four_processors(running: Stack) -> None:
    submitted, _ = await run(running.bootstrap, running.prefix, _quiet)
    kafka = KafkaConfig(bootstrap=running.bootstrap)
    hops = await collect(
        kafka,
        submitted.conversation.trace_id,
        session_id=submitted.conversation.session_id,
        prefix=running.prefix,
    )
    found = spans(hops)
    assert {s.component for s in found} == {"conversation", "dispatcher", "tool", "memory"}
    moves = [s.state for s in found if s.component == "conversation" and "→" in s.state]
    assert moves == ["∅→S1", "S1→S2", "S2→S2", "S2→S3", "S3→S3.1", "S3.1→S4", "S4→S5"]
    ocr = [s for s in found if s.component == "tool" and "ocr_tool" in s.what]
    assert len(ocr) == 1 and ocr[0].duration_ms >= 900  # the fixture OCR is honestly slow


async def test_tail_lists_every_envelope_of_a_demo_session_in_log_order(running: Stack) -> None:
    """What ``hermesbus tail --session`` prints: every envelope the topics hold for the
    session (read here by a consumer until the topics are quiet), each once, in log order."""
    submitted, _ = await run(running.bootstrap, running.prefix, _quiet)
    session = submitted.conversation.session_id
    kafka = KafkaConfig(bootstrap=running.bootstrap)
    catalog = Catalog.load()
    names = catalog.with_overrides(prefix=running.prefix).names()
    found = tail(kafka, names, start=Position("beginning"), filters=Filters(session=session))
    listed = [t async for t in found]
    expected: set[str] = set()
    for spec in catalog:
        if spec.value_schema:
            read = await _read_all(running, spec.name)
            expected |= {e.message_id for e in read if e.session_id == session}
    assert all(t.envelope is not None for t in listed)
    ids = [t.envelope.message_id for t in listed if t.envelope is not None]
    assert len(ids) == len(set(ids)) == len(expected) > 20
    assert set(ids) == expected
    order = [(t.timestamp_ms, t.topic, t.partition, t.offset) for t in listed]
    assert order == sorted(order)


async def test_the_s2_wait_times_out_by_the_runtime_clock(
    broker: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five minutes of silence in S2, with the processors' clock moved on instead of waited."""
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "home"))
    skew = [0.0]
    kafka = KafkaConfig(bootstrap=broker)
    prefix = f"wait-{unique}."
    async with stack(
        settings=Settings.from_environment(),
        kafka=kafka,
        prefix=prefix,
        demo=True,
        clock=lambda: time.time() + skew[0],
    ) as s:
        first, _ = conversations()
        first = type(first)(first.name, first.session_id, first.trace_id, first.turns[:1])
        async with Client(bootstrap=s.bootstrap, topic_prefix=prefix, name="t") as app:
            said = await talk(app, first, _quiet)
            assert said.last is not None and said.last.source == "conversation:S2"
            async with app.replies(first.session_id) as replies:
                skew[0] = 5 * 60 + 1  # the runtime's clock: five minutes later
                async with asyncio.timeout(30):
                    reply = await anext(aiter(replies))
    assert reply.source == "conversation:S4"  # asks whether the user gave up
    assert isinstance(reply.payload.body, Reply)
    assert set(reply.payload.body.choices) == {"继续上传", "放弃"}


async def _read_all(running: Stack, topic: str) -> list[Envelope]:
    consumer = AIOKafkaConsumer(
        running.prefix + topic,
        bootstrap_servers=running.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    found: list[Envelope] = []
    try:
        while batch := await consumer.getmany(timeout_ms=2000):
            found += [decode(r.value) for records in batch.values() for r in records if r.value]
        return found
    finally:
        await consumer.stop()


async def test_the_table_export_is_a_spec_the_demo_registered_and_runs_to_its_end(
    running: Stack,
) -> None:
    """The second flow, no code of its own: the real table tool in its workers, memory
    checking the two symbols "这两个表" resolves to, on each broker."""
    await asyncio.sleep(FLOW_SETTLE_MS / 1000)  # new sessions take it from then on
    async with Client(bootstrap=running.bootstrap, topic_prefix=running.prefix) as app:
        said = await talk(app, tables.conversation(), _quiet, clock=lambda: datetime.now(UTC))
    assert tables.missing(said) == []
    states = [r.source for _, r in said.replies]
    assert states == [
        "conversation:first",
        "conversation:column",
        "conversation:checked",
        "conversation:second",
        "conversation:merged",
    ]
    assert running.problems() == []

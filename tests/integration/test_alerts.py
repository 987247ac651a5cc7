"""Alerts on real brokers: a tool's scripted answers at confidence 0.7 for three windows,
through the rollup (faust-streaming) and the alerts' judge, raise exactly one alert and,
once its answers recover, one clear; and while a tool's alert is open, the bus's
dispatcher has its fallback answer its calls, and the reply says so."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from hermesbus.client import Client
from hermesbus.codec import Codec
from hermesbus.compose.alerts import AlertJudge, alerts_said, background_judge
from hermesbus.compose.stack import Stack
from hermesbus.compose.stats import Stats, read_stats
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.contract.envelope import Envelope
from hermesbus.contract.headers import envelope_headers
from hermesbus.contract.payloads import ToolResult
from hermesbus.demo.expense import Said, conversations, reply_text, talk
from hermesbus.identity import Verifier
from hermesbus.processors.diagnostics import (
    DiagnosticsSettings,
    Figures,
    Tally,
    Window,
    rollup_envelope,
)
from hermesbus.processors.diagnostics import (
    Said as Alerted,
)
from hermesbus.topics import DIAGNOSTICS as DIAGNOSTICS_TOPIC
from hermesbus.trace.tail import Filters, Position, tail
from tests import signing
from tests.integration.stacks import catalog_topics, demo_stack
from tests.integration.test_diagnostics import (
    TUMBLING_MS,
    WAIT_S,
    answer,
    past_window,
    produce,
    small_settings,
    started,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(420)]

TOOL = "rule_engine_tool"
"""A demo tool the expense flow calls in S3, whose fallback (a mock) always answers."""
KEY = f"tool:{TOOL}"
codec = Codec()


async def _until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {WAIT_S:g} s: {what}")
        await asyncio.sleep(0.1)


async def _said(kafka: KafkaConfig, prefix: str) -> list[Alerted]:
    """The diagnostics' alerts on the prefix's hermes.alerts so far, signatures checked."""
    return await alerts_said(kafka, prefix, codec, Verifier(signing.keys()))


async def test_low_confidence_for_three_windows_raises_one_alert_and_one_clear(
    broker: str, unique: str, tmp_path: Path
) -> None:
    prefix = f"al{unique}."
    kafka = await catalog_topics(broker, prefix)
    first = past_window(30 * TUMBLING_MS)  # long closed by the wall clock
    confidences = (0.95, 0.7, 0.7, 0.7, 0.9, 0.95)
    answers = [
        answer(10 * w + j, first + w * TUMBLING_MS + 100 * j, tool=TOOL, confidence=c)
        for w, c in enumerate(confidences)
        for j in range(5)
    ]
    fallbacks = [  # its fallback's answers in a low window, asked for: nothing of the tool
        answer(900 + j, first + 2 * TUMBLING_MS + 7 * j, tool=TOOL, confidence=1.0)
        for j in range(5)
    ]
    fallbacks = [_from_fallback(a) for a in fallbacks]
    await produce(broker, prefix, [*answers, *fallbacks])
    settings = small_settings(broker).model_copy(update={"settle_ms": 3_000})
    judge = AlertJudge(kafka, settings, signing.keys(), prefix=prefix)
    app = await started(broker, prefix, tmp_path)
    try:
        async with background_judge(judge, print):
            deadline = time.monotonic() + WAIT_S
            while not any(s.state == "cleared" for s in await _said(kafka, prefix)):
                assert time.monotonic() < deadline, f"no clear within {WAIT_S:g} s"
                await asyncio.sleep(0.5)
            await asyncio.sleep(2 * settings.settle_ms / 1000)  # nothing more comes
    finally:
        await app.stop()
    seen = await _said(kafka, prefix)
    states = [(s.rule, s.key, s.state, (s.end_ms - first) // TUMBLING_MS) for s in seen]
    assert states == [
        ("low_confidence", KEY, "raised", 4),  # the third low window, ending at 4
        ("low_confidence", KEY, "cleared", 5),
    ]
    assert [s.since_ms for s in seen] == [first + TUMBLING_MS] * 2
    assert judge.stats.raised == 1 and judge.stats.cleared == 1 and judge.stats.unproven == 0


def _from_fallback(envelope: Envelope) -> Envelope:
    """The answer of the tool's fallback to a call the dispatcher sent there (the tool
    unhealthy then): it says nothing of the tool."""
    body = envelope.payload.body
    assert isinstance(body, ToolResult)
    fallback = body.model_copy(update={"fallback": "mock"})
    payload = envelope.payload.model_copy(update={"body": fallback, "context": {"fallback": True}})
    return envelope.model_copy(update={"payload": payload})


async def _windows(bootstrap: str, prefix: str, start: int, confidences: Sequence[float]) -> None:
    """Closed windows of the tool, one a minute from ``start``, its answers' confidence
    each, as the rollup emits them (signed by diagnostics)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    topic = prefix + DIAGNOSTICS_TOPIC
    await producer.start()
    try:
        for i, confidence in enumerate(confidences):
            tally = Tally()
            for _ in range(4):
                tally.add(Figures(confidence=confidence))
            window = Window("tumbling", 60_000, start + i * 60_000)
            envelope = rollup_envelope(window, KEY, 0, 0, tally, namespace=prefix)
            value, key = codec.encode(envelope), KEY.encode()
            headers = signing.signed(
                topic, key, value, envelope_headers(envelope), identity="diagnostics"
            )
            await producer.send_and_wait(topic, value, key=key, headers=headers)
    finally:
        await producer.stop()


def _quiet(kind: str, item: object) -> None:
    """The demo's printer, silenced."""


async def _results(kafka: KafkaConfig, prefix: str, said: Said) -> list[ToolResult]:
    """The tool's results in the conversation, as its answers on the log say them."""
    found = tail(
        kafka,
        [prefix + "hermes.dispatcher"],
        start=Position("beginning"),
        filters=Filters(session=said.conversation.session_id),
    )
    return [
        t.envelope.payload.body
        async for t in found
        if t.envelope is not None
        and isinstance(t.envelope.payload.body, ToolResult)
        and t.envelope.payload.body.tool == TOOL
    ]


async def test_while_a_tools_alert_is_open_its_fallback_answers_and_the_reply_says_so(
    broker: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix, home = f"af{unique}.", tmp_path / "home"
    monkeypatch.setenv("HERMES_DIAGNOSTICS_TRIAL_EVERY", "0")  # no trial call: all to the fallback
    kafka = KafkaConfig(bootstrap=broker)
    settings = DiagnosticsSettings(settle_ms=500)
    judge = AlertJudge(kafka, settings, signing.keys(), prefix=prefix)
    start = 1_900_000_020_000 - 1_900_000_020_000 % 60_000  # windows of 2030
    first, second = conversations()
    async with demo_stack(broker, prefix, home, monkeypatch) as running:
        watch = running.alerts
        assert isinstance(running, Stack) and watch is not None
        async with (
            background_judge(judge, print),
            Client(bootstrap=running.bootstrap, topic_prefix=prefix, name="demo") as app,
        ):
            await _windows(broker, prefix, start, [0.7, 0.7, 0.7])
            await _until(lambda: watch.alerts.health_rules(TOOL) == ["low_confidence"], "the alert")
            under = await talk(app, first, _quiet)
            await _windows(broker, prefix, start + 3 * 60_000, [0.95])
            await _until(lambda: watch.alerts.health_rules(TOOL) == [], "the clear")
            after = await talk(app, second, _quiet)
    notice = f"{TOOL} 告警中（low_confidence），正在使用降级数据"
    texts = [reply_text(reply) for _, reply in under.replies]
    assert any(notice in text for text in texts), texts
    assert not any(notice in reply_text(reply) for _, reply in after.replies)
    (answered_under,) = await _results(kafka, prefix, under)
    assert answered_under.fallback == "mock"  # its fallback answered
    (answered_after,) = await _results(kafka, prefix, after)
    assert answered_after.fallback is None and answered_after.status_code == 200
    assert judge.stats.raised == 1 and judge.stats.cleared == 1


async def test_stats_shows_an_alert_open_since_before_its_span_until_it_clears(
    broker: str, unique: str
) -> None:
    """``hermesbus stats`` reads the windows and alerts of a recent span, but which alerts
    are open now is all of hermes.alerts folded: an episode that began before the span
    is open in it, and gone from it once cleared."""
    prefix = f"as{unique}."
    kafka = await catalog_topics(broker, prefix)
    judge = AlertJudge(kafka, DiagnosticsSettings(settle_ms=500), signing.keys(), prefix=prefix)
    start = 1_900_000_020_000 - 1_900_000_020_000 % 60_000  # windows of 2030
    after_all = 4_000_000_000_000  # a span after every record: none of them in it

    async def stats() -> Stats:
        return await read_stats(
            kafka, signing.keys(), prefix=prefix, since_ms=after_all, follow=False
        )

    async def said(state: str) -> bool:
        return any(s.state == state for s in await _said(kafka, prefix))

    async with background_judge(judge, print):
        await _windows(broker, prefix, start, [0.7, 0.7, 0.7])
        await _until_true(lambda: said("raised"), "the alert")
        raised = await stats()
        await _windows(broker, prefix, start + 3 * 60_000, [0.95])
        await _until_true(lambda: said("cleared"), "the clear")
        cleared = await stats()
    assert raised.alerts == [] and cleared.alerts == []  # none said in the span
    (open_alert,) = raised.open_alerts.open()
    assert (open_alert.rule, open_alert.key, open_alert.since_ms) == ("low_confidence", KEY, start)
    assert open_alert.health and open_alert.windows == 3
    assert cleared.open_alerts.open() == []
    assert raised.unproven == cleared.unproven == 0


async def _until_true(done: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not await done():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {WAIT_S:g} s: {what}")
        await asyncio.sleep(0.3)

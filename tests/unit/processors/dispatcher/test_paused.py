"""A backend outage that holds memory's query or a tool's call in place is not charged to
the cycle's budget.

The held processor's runtime tells the dispatcher at once and at least every
``pause_every_ms`` while the outage lasts (``protocol.pause_notice``); the deadline waits
while notices come, then gives back the downtime; memory's time is counted without it.
"""

from __future__ import annotations

from hermesbus import Envelope, ErrorReport, ToolCall, ToolResults
from hermesbus.errors import StoreError
from hermesbus.processors.dispatcher._cycle import MAX_DOWNTIME_MS
from hermesbus.processors.protocol import PAUSED, ProtocolPolicy, ToolHealth, pause_notice
from hermesbus.runtime import Pause

from .helpers import (
    CYCLE,
    FINANCE_RESULT,
    ORG_RESULT,
    Driver,
    answer_query,
    answers,
    call,
    result_for,
)

TOOLS = ["org_tool", "finance_tool"]
SENT_MS = 1_717_405_200_000
"""When the round's calls reached the broker (T0 of the helpers)."""
EVERY_MS = 2_000
OUTAGE = StoreError("Redis at redis://127.0.0.1:6379/0: preference failed (ConnectionError)")


def driver() -> Driver:
    return Driver.with_health(
        ToolHealth(tool="org_tool", latency_ms=50.0, success_rate=1.0),
        ToolHealth(tool="finance_tool", latency_ms=50.0, success_rate=1.0),
    )


def notice(held: Envelope, since_ms: int, at_ms: int, number: int) -> Envelope:
    news = pause_notice(held, Pause(OUTAGE, since_ms, at_ms, EVERY_MS, number))
    assert news is not None
    return news


def notices(held: Envelope, since_ms: int, until_ms: int) -> list[Envelope]:
    """Every notice of an outage from ``since_ms`` to ``until_ms`` (one per EVERY_MS)."""
    times = range(since_ms, until_ms + 1, EVERY_MS)
    return [notice(held, since_ms, at, n) for n, at in enumerate(times)]


async def open_round(d: Driver) -> Envelope:
    (query,) = await d.send(call("org_tool", TOOLS), appended_ms=SENT_MS)
    await d.send(call("finance_tool", TOOLS), appended_ms=SENT_MS + 2)
    return query


def tool_calls(emitted: tuple[Envelope, ...]) -> list[Envelope]:
    return [e for e in emitted if isinstance(e.payload.body, ToolCall)]


def test_only_what_the_dispatcher_asked_for_gets_a_notice() -> None:
    from_conversation = call("org_tool", TOOLS)  # the conversation's call to the dispatcher
    assert pause_notice(from_conversation, Pause(OUTAGE, 0, 0, EVERY_MS, 0)) is None


async def test_a_notice_is_an_error_report_coded_paused_in_the_cycle() -> None:
    d = driver()
    query = await open_round(d)
    news = notice(query, SENT_MS + 1_000, SENT_MS + 1_000, 0)
    body = news.payload.body
    assert isinstance(body, ErrorReport)
    assert (body.component, body.code, body.retryable) == ("memory:context", PAUSED, True)
    assert "StoreError" in body.message
    assert "6379" not in body.message  # the class, not where the store is
    assert news.payload.context["cycle"] == CYCLE
    assert news.causation_id == query.message_id
    assert await d.send(news) == ()  # nothing is answered, nobody is told


async def test_memory_held_past_the_deadline_is_not_a_timeout() -> None:
    """Redis away from 1 s to 11 s into a 5 s round: the deadline waits while notices come,
    memory's 12 s count as 1 s (the pause lasted until its answer, 1 s after the last
    notice), the tools get the 4 s left and the round is answered."""
    d = driver()
    query = await open_round(d)
    for news in notices(query, SENT_MS + 1_000, SENT_MS + 11_000):
        assert await d.send(news) == ()
        if SENT_MS + 5_000 <= news.timestamp.timestamp() * 1000 < SENT_MS + 7_000:
            assert await d.fire(f"cycle:{CYCLE}") == ()  # the deadline waits: no report
    outputs = await d.send(answer_query(query), appended_ms=SENT_MS + 12_000)
    org_out, finance_out = tool_calls(outputs)
    assert org_out.metadata.timeout_ms == finance_out.metadata.timeout_ms == 4_000
    await d.send(result_for(org_out, 200, ORG_RESULT))
    (answer,) = answers(await d.send(result_for(finance_out, 200, FINANCE_RESULT)))
    assert isinstance(answer.payload.body, ToolResults)
    assert d.data["cycles"][CYCLE]["status"] == "answered"


async def test_the_deadline_gives_back_the_downtime_then_fails_naming_who_did_not_answer() -> None:
    """Memory paused from 1 s (notices until 3 s), answered at 4.1 s; org answered, finance
    never: the round fails at 5 s + 2 s of downtime, naming finance, not before."""
    d = driver()
    query = await open_round(d)
    for news in notices(query, SENT_MS + 1_000, SENT_MS + 3_000):
        await d.send(news)
    outputs = await d.send(answer_query(query), appended_ms=SENT_MS + 4_100)
    org_out, _finance_out = tool_calls(outputs)
    await d.send(result_for(org_out, 200, ORG_RESULT))
    assert await d.fire(f"cycle:{CYCLE}") == ()  # at 5 s: 2 s of downtime still owed
    (failed,) = answers(await d.fire(f"cycle:{CYCLE}"))
    report = failed.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code) == ("tool:finance_tool", "timeout")
    assert failed.timestamp.timestamp() * 1000 >= SENT_MS + 5_000 + 2_000


async def test_a_held_tool_call_is_not_charged_either() -> None:
    d = driver()
    query = await open_round(d)
    org_out, finance_out = tool_calls(await d.send(answer_query(query), appended_ms=SENT_MS + 50))
    await d.send(result_for(finance_out, 200, FINANCE_RESULT))
    for news in notices(org_out, SENT_MS + 100, SENT_MS + 8_100):  # the tool's store is away
        await d.send(news)
    assert await d.fire(f"cycle:{CYCLE}") == ()
    (answer,) = answers(await d.send(result_for(org_out, 200, ORG_RESULT)))
    assert isinstance(answer.payload.body, ToolResults)


async def test_a_notice_for_a_round_that_no_longer_waits_changes_nothing() -> None:
    d = driver()
    query = await open_round(d)
    await d.send(answer_query(query), appended_ms=SENT_MS + 50)
    before = d.data["cycles"][CYCLE]
    await d.send(notice(query, SENT_MS + 100, SENT_MS + 100, 0))  # memory answered already
    assert d.data["cycles"][CYCLE] == before


async def test_a_notice_speaks_only_for_its_sender() -> None:
    """A tool cannot pause memory's part of a round (nor the policy lets it say anything but
    its own pause)."""
    d = driver()
    query = await open_round(d)
    forged = notice(query, SENT_MS + 100, SENT_MS + 100, 0).model_copy(
        update={"source": "tool:org_tool"}
    )
    before = d.data["cycles"][CYCLE]
    await d.send(forged)
    assert d.data["cycles"][CYCLE] == before
    refusal = ProtocolPolicy().refusal("hermes.dispatcher", "tool", forged)
    assert refusal is not None and "pause or progress notice of its own" in refusal
    own = notice(
        tool_calls(await d.send(answer_query(query), appended_ms=SENT_MS + 50))[0],
        SENT_MS + 100,
        SENT_MS + 100,
        0,
    )
    assert ProtocolPolicy().refusal("hermes.dispatcher", "tool", own) is None


async def test_a_round_held_longer_than_the_cap_fails_retryable_naming_who_was_held() -> None:
    d = driver()
    query = await open_round(d)
    for news in notices(query, SENT_MS + 1_000, SENT_MS + 1_000 + MAX_DOWNTIME_MS + EVERY_MS):
        await d.send(news)
    outputs: tuple[Envelope, ...] = ()
    while not answers(outputs):  # the deadline keeps waiting while notices came
        outputs = await d.fire(f"cycle:{CYCLE}")
    (failed,) = answers(outputs)
    report = failed.payload.body
    assert isinstance(report, ErrorReport)
    assert (report.component, report.code, report.retryable) == (
        "memory:context",
        "unavailable",
        True,
    )
    assert "held by a backend outage" in report.message

"""One suite for every TraceIndex: the same documents in, the same answers out."""

from __future__ import annotations

from datetime import timedelta

import pytest

from hermesbus import Envelope, Payload
from hermesbus.connectors.elasticsearch import ElasticsearchTraceIndex
from hermesbus.contract.payloads import ErrorReport, ToolCall
from hermesbus.processors.diagnostics import (
    Change,
    DiagnosticsSettings,
    Figures,
    Tally,
    Window,
    alert_envelope,
    rollup_envelope,
)
from hermesbus.trace.index import (
    ArchivedRecord,
    Document,
    Search,
    TraceIndex,
    archived,
    iso_ms,
)
from tests.builders import T0, reply_to, turn

from .conftest import documents_of, es_config, record_of, searchable

T0_MS = int(T0.timestamp() * 1000)


def _story() -> list[ArchivedRecord]:
    """Two sessions: t1 answered, t2 failed at the dispatcher; plus one record of garbage."""
    first = turn(message_id="m1", trace_id="t1", session_id="s1")
    call = Envelope(
        message_id="c1",
        timestamp=T0,
        source="conversation:S2",
        target="mcp:dispatcher",
        session_id="s1",
        user_id="u1",
        trace_id="t1",
        causation_id="m1",
        span_id="span-c1",
        parent_span_id="span-m1",
        payload=Payload(
            task="ocr_precheck",
            body=ToolCall(tool="ocr_tool", arguments_json='{"password": "x"}', idempotency_key="k"),
        ),
    )
    second = turn(message_id="m2", trace_id="t2", session_id="s2")
    failed = Envelope(
        message_id="e2",
        timestamp=T0 + timedelta(seconds=2),
        source="mcp:dispatcher",
        target="conversation:S2",
        session_id="s2",
        user_id="u1",
        trace_id="t2",
        causation_id="m2",
        payload=Payload(
            task="invoice approval",
            body=ErrorReport(component="tool:ocr_tool", code="timeout", message="ocr timed out"),
        ),
    )
    return [
        record_of(first, "hermes.conversation.in", 0, T0_MS),
        record_of(call, "hermes.dispatcher", 0, T0_MS + 10),
        record_of(second, "hermes.conversation.in", 1, T0_MS + 1000),
        record_of(reply_to(first, "好的，请上传发票"), "hermes.conversation.out", 0, T0_MS + 20),
        record_of(failed, "hermes.conversation.in", 2, T0_MS + 2000),
        record_of(second, "hermes.conversation.in", 3, T0_MS + 3000, value=b"\xc3\x01garbage"),
    ]


async def _filled(index: TraceIndex) -> list[ArchivedRecord]:
    records = _story()
    result = await index.write(documents_of(records))
    assert sorted(result.stored) == sorted(r.id for r in records)
    assert not result.existing and not result.refused
    await searchable(index)
    return records


def _ids(docs: list[Document]) -> list[str]:
    return [doc["_id"] for doc in docs]


async def test_a_trace_comes_back_in_log_order_with_its_raw_records(
    trace_index: TraceIndex,
) -> None:
    records = await _filled(trace_index)
    docs = await trace_index.by_trace("t1")
    assert _ids(docs) == [records[0].id, records[1].id, records[3].id]
    assert docs[1]["parent"] == {"id": "span-m1"} and docs[1]["span"] == {"id": "span-c1"}
    assert [archived(doc) for doc in docs] == [records[0], records[1], records[3]]


async def test_a_session_holds_its_undecodable_record_too(trace_index: TraceIndex) -> None:
    records = await _filled(trace_index)
    docs = await trace_index.by_session("s2")
    assert _ids(docs) == [records[2].id, records[4].id]  # garbage has no session: not here
    garbage = await trace_index.search(Search(action="undecodable"))
    assert _ids(garbage) == [records[5].id]
    assert garbage[0]["trace"]["id"] == "t2"  # from the trace_id header
    assert archived(garbage[0]).value == b"\xc3\x01garbage"


async def test_writing_again_stores_nothing_twice(trace_index: TraceIndex) -> None:
    records = await _filled(trace_index)
    again = await trace_index.write(documents_of(records[:3]))
    assert not again.stored and sorted(again.existing) == sorted(r.id for r in records[:3])
    await searchable(trace_index)
    assert await trace_index.count() == len(records)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (Search(outcome="failure"), [4, 5]),
        (Search(component="dispatcher", outcome="failure"), [4]),
        (Search(component="conversation"), [1, 3]),
        (Search(since_ms=T0_MS + 20, until_ms=T0_MS + 2000), [3, 2]),
        (Search(text="ocr timed out"), [4]),
        (Search(text="请上传发票"), [3]),
        (Search(session_id="s1", action="ToolCall"), [1]),
        (Search(topic="hermes.conversation.in", limit=2), [0, 2]),
        (Search(trace_id="nope"), []),
    ],
)
async def test_search_answers_the_on_call_questions(
    trace_index: TraceIndex, query: Search, expected: list[int]
) -> None:
    records = await _filled(trace_index)
    assert _ids(await trace_index.search(query)) == [records[i].id for i in expected]


async def test_log_times_of_message_ids(trace_index: TraceIndex) -> None:
    await _filled(trace_index)
    found = await trace_index.appended(["m1", "c1", "e2", "unknown"])
    assert found == {"m1": T0_MS, "c1": T0_MS + 10, "e2": T0_MS + 2000}


async def test_secrets_are_redacted_in_the_stored_payload(trace_index: TraceIndex) -> None:
    await _filled(trace_index)
    (call,) = await trace_index.search(Search(action="ToolCall"))
    assert call["hermes"]["payload"]["body"]["arguments_json"] == {"password": "[redacted]"}
    assert '"password":"[redacted]"' in call["hermes"]["payload_text"]


async def test_an_empty_index_answers_nothing(trace_index: TraceIndex) -> None:
    assert await trace_index.by_trace("t1") == []
    assert await trace_index.search(Search()) == []
    assert await trace_index.count() == 0


@pytest.mark.elasticsearch
async def test_closed_windows_go_to_a_data_stream_of_their_own_with_charted_fields(
    elasticsearch_url: str, unique: str
) -> None:
    config = es_config(elasticsearch_url, unique)
    tally = Tally()
    for ms in (4.0, 9.0, 120.0):
        tally.add(Figures(latency_ms=ms, confidence=0.7, error=ms > 100))
    closed = rollup_envelope(Window("tumbling", 60_000, T0_MS), "tool:ocr_tool", 2, 0, tally)
    answered = turn(message_id="m1", trace_id="t1", session_id="s1")
    records = [
        record_of(answered, "hermes.conversation.in", 0, T0_MS),
        record_of(closed, "hermes.diagnostics", 0, T0_MS + 60_000),
    ]
    async with ElasticsearchTraceIndex(config) as index:
        assert config.rollup_stream == f"logs-hermes.diagnostics-t{unique}"
        await index.write(documents_of(records))
        await index.refresh()
        client = index.client
        await client.indices.refresh(index=config.rollup_stream)
        assert await index.count() == 1  # the envelopes' stream: the turn only
        assert [d["event"]["id"] for d in await index.by_session("s1")] == ["m1"]
        found = await client.search(index=config.rollup_stream, query={"match_all": {}})
        (hit,) = found["hits"]["hits"]
        assert hit["_index"].startswith(f".ds-{config.rollup_stream}-")
        figures = hit["_source"]["hermes"]["rollup"]
        assert (figures["key"], figures["window"], figures["count"]) == (
            "tool:ocr_tool",
            "tumbling",
            3,
        )
        assert figures["error_rate"] == pytest.approx(1 / 3) and figures["partition"] == 2
        mapped = await client.indices.get_mapping(index=config.rollup_stream)
        (mapping,) = mapped.body.values()
        rollup = mapping["mappings"]["properties"]["hermes"]["properties"]["rollup"]["properties"]
        assert rollup["count"]["type"] == "long" and rollup["latency_p99_ms"]["type"] == "double"
        assert rollup["key"]["type"] == "keyword" and rollup["start"]["type"] == "date"
        summed = await client.search(
            index=config.rollup_stream,
            size=0,
            aggs={"by_key": {"terms": {"field": "hermes.rollup.key"},
                             "aggs": {"n": {"sum": {"field": "hermes.rollup.count"}}}}},
        )  # fmt: skip
        (bucket,) = summed["aggregations"]["by_key"]["buckets"]
        assert (bucket["key"], bucket["n"]["value"]) == ("tool:ocr_tool", 3)


@pytest.mark.elasticsearch
async def test_an_alert_is_indexed_with_its_rule_key_and_figures_as_fields(
    elasticsearch_url: str, unique: str
) -> None:
    config = es_config(elasticsearch_url, unique)
    rule = DiagnosticsSettings().rules()[0]  # low_confidence
    raised = Change(rule, "tool:ocr_tool", "raised", T0_MS, T0_MS + 60_000, T0_MS - 120_000, 3, 0.7)
    records = [record_of(alert_envelope(raised), "hermes.alerts", 0, T0_MS + 60_000)]
    async with ElasticsearchTraceIndex(config) as index:
        await index.write(documents_of(records))
        await index.refresh()
        client = index.client
        (doc,) = await index.search(Search(action="ErrorReport"))
        assert doc["hermes"]["alert"]["rule"] == "low_confidence"
        assert doc["hermes"]["alert"]["since"] == iso_ms(T0_MS - 120_000)
        mapped = await client.indices.get_mapping(index=config.data_stream)
        (mapping,) = mapped.body.values()
        alert = mapping["mappings"]["properties"]["hermes"]["properties"]["alert"]["properties"]
        assert alert["rule"]["type"] == "keyword" and alert["value"]["type"] == "double"
        assert alert["window_start"]["type"] == "date" and alert["windows"]["type"] == "integer"
        by_rule = await client.search(
            index=config.data_stream,
            size=0,
            query={"term": {"hermes.alert.state": "raised"}},
            aggs={"rules": {"terms": {"field": "hermes.alert.rule"},
                            "aggs": {"low": {"min": {"field": "hermes.alert.value"}}}}},
        )  # fmt: skip
        (bucket,) = by_rule["aggregations"]["rules"]["buckets"]
        assert bucket["key"] == "low_confidence" and bucket["low"]["value"] == pytest.approx(0.7)

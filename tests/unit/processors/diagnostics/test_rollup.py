"""What the rollup adds up per key and window: pure, from envelopes and dead-letter headers."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermesbus import Diagnostics, ErrorReport, ExternalCalls, Metadata, Reply, ToolResult
from hermesbus.codec import Codec
from hermesbus.contract import headers as h
from hermesbus.contract.fields import epoch_ms
from hermesbus.contract.payloads import WindowRollup
from hermesbus.processors.diagnostics import (
    HOP_MS,
    HOPPING_MS,
    TUMBLING_MS,
    Figures,
    Tally,
    Window,
    Windows,
    contributions,
    keys_of,
    rollup_body,
    rollup_envelope,
    windows_of,
)
from hermesbus.topics import topic_for
from tests.builders import turn


def test_each_emitter_counts_under_its_component_and_its_tool_or_state() -> None:
    assert keys_of("conversation:S3.1") == ["component:conversation", "state:S3.1"]
    assert keys_of("mcp:dispatcher") == ["component:dispatcher"]
    assert keys_of("tool:ocr_tool") == ["component:tool", "tool:ocr_tool"]
    assert keys_of("tool:chat") == ["component:tool"]  # the model's answers: no tool's
    assert keys_of("memory:context") == ["component:memory"]
    assert keys_of("app:web") == []  # an app's turn is no component's work


@given(st.integers(0, 10**13))
def test_a_record_falls_in_one_tumbling_window_and_every_hopping_window_covering_it(
    at_ms: int,
) -> None:
    found = windows_of(at_ms)
    tumbling = [w for w in found if w.size_ms == TUMBLING_MS]
    hopping = [w for w in found if w.size_ms == HOPPING_MS]
    assert len(tumbling) == 1 and len(hopping) == HOPPING_MS // HOP_MS
    for window in found:
        assert window.start_ms <= at_ms < window.end_ms
        assert window.start_ms % (TUMBLING_MS if window in tumbling else HOP_MS) == 0
    assert len(set(found)) == len(found)


def test_window_sizes_are_settings_and_nonsense_is_refused() -> None:
    windows = Windows(tumbling_ms=2_000, hopping_ms=6_000, hop_ms=2_000)
    assert windows.of(7_500) == [
        Window("tumbling", 2_000, 6_000),
        Window("hopping", 6_000, 2_000),
        Window("hopping", 6_000, 4_000),
        Window("hopping", 6_000, 6_000),
    ]
    assert Window("tumbling", 2_000, 6_000).end_ms == 8_000
    with pytest.raises(ValueError, match="positive"):
        Windows(tumbling_ms=0)
    with pytest.raises(ValueError, match="hop"):
        Windows(hopping_ms=1_000, hop_ms=2_000)


def _result(**fields: object) -> ToolResult:
    return ToolResult(tool="ocr_tool", status_code=200, result_json="{}", **fields)


def test_an_envelopes_diagnostics_and_body_are_what_it_contributes() -> None:
    diagnostics = Diagnostics(
        processing_time_ms=42.0,
        confidence_score=0.7,
        external_calls=ExternalCalls(count=3, avg_latency_ms=20.0),
    )
    answer = turn(
        _result(fallback="cached", error="timeout"),
        source="tool:ocr_tool",
        diagnostics=diagnostics,
        metadata=Metadata(attempt=2),
    )
    tallies = {key: Tally() for key in ("component:tool", "tool:ocr_tool")}
    for key, figures in contributions(answer, [], dead_letter=False):
        tallies[key].add(figures)
    tally = tallies["tool:ocr_tool"]
    assert (tally.count, tally.errors, tally.retries, tally.fallbacks) == (1, 1, 1, 1)
    assert tally.mean_confidence == 0.7  # the tool failed; its fallback answered for it
    assert (tally.external_calls, tally.external_latency_ms) == (3, 20.0)
    assert tally.latency.count == 1 and 30 < tally.latency.quantile(0.5) <= 50
    assert tallies["component:tool"] == tally
    payload = answer.payload.model_copy(update={"context": {"fallback": True}})
    asked = answer.model_copy(update={"payload": payload})  # the dispatcher sent it there
    ((key, figures),) = contributions(asked, [], dead_letter=False)
    assert key == "component:tool" and figures.confidence is None and figures.fallback
    report = turn(
        ErrorReport(component="mcp:dispatcher", code="timeout", message="late"),
        source="mcp:dispatcher",
    )
    ((key, figures),) = contributions(report, [], dead_letter=False)
    assert (key, figures.error, figures.retry) == ("component:dispatcher", True, False)
    said = turn(Reply(text="hi"), source="conversation:S2")
    assert [k for k, f in contributions(said, [], dead_letter=False) if not f.error] == [
        "component:conversation",
        "state:S2",
    ]


def test_a_dead_letter_counts_under_the_processor_that_dead_lettered_it() -> None:
    def headers(processor: str, error: str, message: str) -> list[tuple[str, bytes]]:
        return [
            (h.DLQ_PROCESSOR, processor.encode()),
            (h.DLQ_ERROR_CLASS, error.encode()),
            (h.DLQ_ERROR_MESSAGE, message.encode()),
        ]

    refused = headers("tool-ocr_tool", "hermesbus.errors.IdentityError", "bad signature")
    ((key, figures),) = contributions(None, refused, dead_letter=True)
    assert (key, figures.dead_letter, figures.refused, figures.misrouted) == (
        "component:tool", True, True, False,
    )  # fmt: skip
    moved = headers("memory", "hermesbus.errors.ContractError", "not on the partition 3 of")
    ((key, figures),) = contributions(None, moved, dead_letter=True)
    assert (key, figures.refused, figures.misrouted) == ("component:memory", False, True)
    ((key, _),) = contributions(None, [], dead_letter=True)
    assert key == "component:unknown"  # no header: still counted, never dropped


@given(st.lists(st.tuples(st.booleans(), st.floats(0, 5_000), st.floats(0, 1)), max_size=40))
def test_tallies_merge_as_if_every_record_had_gone_to_one(
    records: list[tuple[bool, float, float]],
) -> None:
    cut = random.Random(len(records)).randint(0, len(records))
    one, left, right = Tally(), Tally(), Tally()
    for n, (error, latency, confidence) in enumerate(records):
        figures = contributions(
            turn(
                ErrorReport(component="x", code="failed", message="no")
                if error
                else Reply(text="ok"),
                source="memory:context",
                diagnostics=Diagnostics(processing_time_ms=latency, confidence_score=confidence),
            ),
            [],
            dead_letter=False,
        )
        for _, f in figures:
            one.add(f)
            (left if n < cut else right).add(f)
    left.merge(right)
    assert left.to_dict().keys() == one.to_dict().keys()
    assert (left.count, left.errors) == (one.count, one.errors)
    assert list(left.latency.cumulative()) == list(one.latency.cumulative())
    assert abs(left.latency.sum - one.latency.sum) < 1e-6  # added in another order
    assert abs(left.confidence_sum - one.confidence_sum) < 1e-6
    assert Tally.from_dict(one.to_dict()) == one


def test_a_closed_window_is_a_signed_envelope_whose_id_is_its_window_key_and_part() -> None:
    tally = Tally()
    for ms in (5.0, 12.0, 80.0):
        tally.add(Figures(latency_ms=ms, confidence=0.5, external_calls=2, external_latency_ms=10))
    window = Window("tumbling", TUMBLING_MS, 120_000)
    envelope = rollup_envelope(window, "tool:ocr_tool", 3, 0, tally, namespace="t1.")
    body = envelope.payload.body
    assert isinstance(body, WindowRollup)
    assert (body.key, body.window, body.partitions, body.part) == (
        "tool:ocr_tool",
        "tumbling",
        (3,),
        0,
    )
    assert body.count == 3 and body.confidence_mean == 0.5 and body.external_calls == 6
    assert (
        sum(body.latency_counts) == 3
        and len(body.latency_counts) == len(body.latency_bounds_ms) + 1
    )
    assert body.latency_p50_ms <= body.latency_p95_ms <= body.latency_p99_ms
    assert envelope.session_id == "tool:ocr_tool"  # the Kafka key: one key's windows in order
    assert epoch_ms(envelope.timestamp) == 180_000  # the window's end, not the wall clock
    assert topic_for(envelope.target) == "hermes.diagnostics"
    again = rollup_envelope(window, "tool:ocr_tool", 3, 0, tally, namespace="t1.")
    assert again == envelope  # a re-send after a crash is the same record
    others = {
        rollup_envelope(window, "tool:ocr_tool", 3, 1, tally, namespace="t1.").message_id,
        rollup_envelope(window, "tool:ocr_tool", 4, 0, tally, namespace="t1.").message_id,
        rollup_envelope(window, "tool:ocr_tool", 3, 0, tally, namespace="t2.").message_id,
    }
    assert envelope.message_id not in others and len(others) == 3
    decoded = Codec().decode(Codec().encode(envelope))
    assert decoded == envelope


def test_an_empty_window_says_no_latency_and_no_confidence() -> None:
    body = rollup_body(Window("hopping", HOPPING_MS, 0), "component:memory", 0, 0, Tally())
    assert body.count == 0 and body.latency_p99_ms == 0.0 and body.confidence_mean is None

"""What the index believes: a record's signature checked as the processors check it."""

from __future__ import annotations

from typing import Any

from hermesbus.codec import default_codec
from hermesbus.contract.envelope import Envelope, Metadata
from hermesbus.contract.headers import DLQ_ORIGIN_TOPIC
from hermesbus.identity import Verifier
from hermesbus.processors.diagnostics import (
    TUMBLING_MS,
    Change,
    DiagnosticsSettings,
    Figures,
    Tally,
    Window,
    alert_envelope,
    rollup_envelope,
)
from hermesbus.topics import CONVERSATION_IN, CONVERSATION_OUT, DLQ
from hermesbus.trace.index import ArchivedRecord, DocumentSettings, decode, document
from hermesbus.trace.index._signature import UNVERIFIED, check, mark
from tests import signing
from tests.builders import reply_to, turn

CODEC = default_codec()


def record(
    envelope: Envelope, topic: str, signer: str | None, *, signed_on: str | None = None
) -> ArchivedRecord:
    key, value = envelope.session_id.encode(), CODEC.encode(envelope)
    headers = signing.signed(signed_on or topic, key, value, identity=signer) if signer else []
    if signed_on is not None:
        headers.append((DLQ_ORIGIN_TOPIC, signed_on.encode()))
    return ArchivedRecord(topic, 0, 0, 0, key, value, tuple(headers))


def checked(r: ArchivedRecord) -> tuple[bool, str | None, str | None]:
    result = check(r, decode(r, CODEC), Verifier(signing.keys()), DLQ)
    return result.verified, result.signer, (result.error or "").split(":")[0] or None


def test_a_record_signed_by_its_source_is_believed() -> None:
    asked = turn()
    assert checked(record(asked, CONVERSATION_IN, "app")) == (True, "app", None)
    assert checked(record(reply_to(asked, "ok"), CONVERSATION_OUT, "conversation")) == (
        True,
        "conversation",
        None,
    )


def test_unsigned_moved_and_impersonating_records_are_not() -> None:
    answer = reply_to(turn(), "已提交")
    assert checked(record(answer, CONVERSATION_OUT, None)) == (False, None, "identity.unsigned")
    moved = record(answer, CONVERSATION_OUT, "conversation", signed_on=CONVERSATION_IN)
    assert checked(moved) == (False, None, "identity.bad_signature")  # copied from another topic
    assert checked(record(answer, CONVERSATION_OUT, "app")) == (
        False,
        "app",
        "identity.impersonation",
    )


def test_a_dead_letter_is_checked_over_its_origin_topic() -> None:
    asked = turn()
    assert checked(record(asked, DLQ, "app", signed_on=CONVERSATION_IN)) == (True, "app", None)
    forged = record(asked, DLQ, None, signed_on=CONVERSATION_IN)
    assert checked(forged)[0] is False


def test_timers_and_retries_a_processor_signs_itself_are_believed() -> None:
    asked = turn()
    timer = asked.model_copy(update={"source": "conversation:timer"})
    assert checked(record(timer, CONVERSATION_IN, "conversation"))[0] is True
    retry = asked.model_copy(update={"metadata": Metadata(attempt=2)})
    assert checked(record(retry, CONVERSATION_IN, "conversation")) == (True, "conversation", None)


def test_a_record_not_believed_loses_its_service_and_its_success() -> None:
    r = record(reply_to(turn(), "已提交报销单 EXP-FAKE"), CONVERSATION_OUT, None)
    result = check(r, decode(r, CODEC), Verifier(signing.keys()), DLQ)
    doc = mark(document(r, decode(r, CODEC), DocumentSettings()), result)
    assert doc["service"]["name"] == UNVERIFIED
    assert doc["event"]["outcome"] == "unknown"
    assert doc["hermes"]["signature"]["verified"] is False
    assert doc["message"].startswith(UNVERIFIED)


def test_only_the_rollups_own_closed_windows_are_charted() -> None:
    tally = Tally()
    tally.add(Figures(latency_ms=3.0))
    closed = rollup_envelope(Window("tumbling", TUMBLING_MS, 0), "tool:ocr_tool", 0, 0, tally)

    def marked(signer: str | None) -> dict[str, object]:
        r = record(closed, "hermes.diagnostics", signer)
        doc = document(r, decode(r, CODEC), DocumentSettings())
        return mark(doc, check(r, decode(r, CODEC), Verifier(signing.keys()), DLQ))

    own = marked("diagnostics")
    assert own["event"]["dataset"] == "hermes.diagnostics" and "rollup" in own["hermes"]  # type: ignore[index, operator]
    for forger in ("app", "tool", None):  # signed by another, or not at all: an envelope
        doc = marked(forger)
        assert doc["event"]["dataset"] == "hermes.envelopes", forger  # type: ignore[index]
        assert "rollup" not in doc["hermes"]  # type: ignore[operator]


def test_only_the_diagnostics_alerts_are_charted_with_their_rule_window_and_figures() -> None:
    rule = DiagnosticsSettings().rules()[0]  # low_confidence
    raised = Change(rule, "tool:ocr_tool", "raised", 120_000, 180_000, 60_000, 3, 0.7)
    cleared = Change(rule, "tool:ocr_tool", "cleared", 180_000, 240_000, 60_000, 4, 0.9)

    def marked(envelope: Envelope, signer: str | None) -> dict[str, Any]:
        r = record(envelope, "hermes.alerts", signer)
        doc = document(r, decode(r, CODEC), DocumentSettings())
        return mark(doc, check(r, decode(r, CODEC), Verifier(signing.keys()), DLQ))

    doc = marked(alert_envelope(raised), "diagnostics")
    assert doc["hermes"]["alert"] == {
        "state": "raised",
        "key": "tool:ocr_tool",
        "rule": "low_confidence",
        "figure": "confidence",
        "value": 0.7,
        "limit": 0.8,
        "windows": 3,
        "window_start": "1970-01-01T00:02:00.000Z",
        "window_end": "1970-01-01T00:03:00.000Z",
        "since": "1970-01-01T00:01:00.000Z",
    }
    assert doc["event"]["outcome"] == "failure" and doc["error"]["type"] == "alert.low_confidence"
    assert doc["message"].startswith("alert raised: tool:ocr_tool: mean confidence 0.70")
    ended = marked(alert_envelope(cleared), "diagnostics")
    assert ended["hermes"]["alert"]["state"] == "cleared"
    assert ended["event"]["outcome"] == "success"
    for forger in ("app", "tool", None):  # claimed by another, or unsigned: no alert fields
        assert "alert" not in marked(alert_envelope(raised), forger)["hermes"], forger

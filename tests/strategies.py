"""Hypothesis strategies for every envelope and payload model."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

import hermesbus as h
from hermesbus.contract.payloads import Body

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=40)
IDS = st.text(min_size=1, max_size=24)
SESSION_IDS = st.text(
    st.characters(
        # Cs: a lone surrogate is no text at all (not UTF-8); naming categories drops
        # hypothesis's own default of leaving them out, so it is named too
        exclude_categories=("Cc", "Cs", "Zl", "Zp"),
        exclude_characters="\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
        "\u2066\u2067\u2068\u2069",
    ),
    min_size=1,
    max_size=24,
)
"""Session ids as the envelope takes them (hermesbus.contract.envelope.SESSION_ID_RULE)."""
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
PLUS = st.floats(min_value=0, allow_nan=False, allow_infinity=False)
# Avro timestamp-millis is a signed 64-bit count of ms; Python datetimes span years 1-9999.
MILLIS = st.datetimes(
    min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31), timezones=st.just(UTC)
).map(lambda d: d - timedelta(microseconds=d.microsecond % 1000))
ADDRESS = st.from_regex(r"\A[a-z][a-z0-9_-]{0,8}:[A-Za-z0-9_.\-]{1,10}\Z")


def _tuple(strategy: st.SearchStrategy, size: int = 3) -> st.SearchStrategy:
    return st.lists(strategy, max_size=size).map(tuple)


verification = st.builds(h.Verification, tool=IDS, verified_at=MILLIS)
trace = st.builds(h.ToolCallTrace, tool=TEXT, args_digest=TEXT, status_code=INT32)
snapshot = st.builds(
    h.ContextSnapshot,
    state_id=IDS,
    entered_at=MILLIS,
    tokens_used=st.integers(0, 2**63 - 1),
    summary=st.text(max_size=50),
    tool_calls=_tuple(trace),
)
fact = st.builds(
    h.MemoryFact,
    subject=TEXT,
    relation=TEXT,
    object=TEXT,
    trust_level=st.sampled_from(h.TrustLevel),
    verified_by=st.none() | verification,
    deprecated=st.booleans(),
)
attachment = st.builds(h.Attachment, name=TEXT, media_type=TEXT, uri=TEXT, sha256=TEXT)

BODIES = {
    h.UserTurn: st.builds(
        h.UserTurn,
        text=TEXT,
        content_type=st.sampled_from(h.ContentType),
        attachments=_tuple(attachment),
        locale=st.none() | TEXT,
    ),
    h.Reply: st.builds(
        h.Reply,
        text=TEXT,
        role=st.sampled_from(h.Role),
        content_type=st.sampled_from(h.ContentType),
        choices=_tuple(TEXT),
        verification_steps=_tuple(TEXT),
        stale=st.booleans(),
        degraded=st.booleans(),
    ),
    h.ToolCall: st.builds(
        h.ToolCall,
        tool=IDS,
        arguments_json=TEXT,
        idempotency_key=IDS,
        fallback_allowed=st.booleans(),
    ),
    h.ToolResult: st.builds(
        h.ToolResult,
        tool=IDS,
        status_code=INT32,
        result_json=TEXT,
        verified=st.booleans(),
        verification_steps=_tuple(TEXT),
        stale=st.booleans(),
        stale_since=st.none() | MILLIS,
        fallback=st.none() | st.sampled_from(["cache", "mock", "proxy"]),
        truncated=st.booleans(),
        error=st.none() | TEXT,
    ),
    h.MemoryQuery: st.builds(
        h.MemoryQuery,
        symbols=_tuple(TEXT),
        preferences=_tuple(TEXT),
        entity=st.none() | TEXT,
        trust_level=st.sampled_from(h.TrustLevel),
    ),
    h.MemoryContext: st.builds(
        h.MemoryContext,
        symbols=st.dictionaries(TEXT, TEXT, max_size=3),
        preferences=st.dictionaries(TEXT, TEXT, max_size=3),
        facts=_tuple(fact),
        invalid=_tuple(TEXT),
        candidates=st.dictionaries(TEXT, TEXT, max_size=3),
    ),
    h.MemoryWrite: st.builds(
        h.MemoryWrite,
        tier=st.sampled_from(h.MemoryTier),
        key=IDS,
        value_json=TEXT,
        ttl_s=st.none() | st.integers(0, 2**63 - 1),
        confirmed_by=st.none() | TEXT,
        verified_by=st.none() | verification,
        trust_level=st.sampled_from(h.TrustLevel),
        importance=st.floats(0.0, 1.0),
    ),
    h.StateSnapshot: st.builds(
        h.StateSnapshot, snapshot=snapshot, previous_state=st.none() | TEXT, trigger=TEXT
    ),
    h.TimerFired: st.builds(
        h.TimerFired, timer_id=IDS, due_at=MILLIS, purpose=TEXT, data_json=TEXT
    ),
    h.ErrorReport: st.builds(
        h.ErrorReport,
        component=IDS,
        code=IDS,
        message=TEXT,
        advice=TEXT,
        retryable=st.booleans(),
    ),
    h.Continue: st.builds(h.Continue, reason=TEXT),
}
BODIES[h.ToolResults] = st.builds(
    h.ToolResults,
    results=_tuple(BODIES[h.ToolResult]),
    context=st.none() | BODIES[h.MemoryContext],
    notice=TEXT,
)

context_value = st.none() | st.booleans() | INT64 | FLOATS | TEXT | st.lists(TEXT, max_size=3)
payload = st.builds(
    h.Payload,
    task=TEXT,
    context=st.dictionaries(TEXT, context_value, max_size=5),
    body=st.none() | st.one_of(*BODIES.values()),
)
metadata = st.builds(
    h.Metadata,
    priority=st.sampled_from(h.Priority),
    timeout_ms=st.integers(0, 2**63 - 1),
    retry_policy=st.builds(
        h.RetryPolicy,
        max_attempts=st.integers(1, 2**31 - 1),
        backoff_ms=st.integers(0, 2**63 - 1),
    ),
    attempt=st.integers(1, 2**31 - 1),
)
diagnostics = st.builds(
    h.Diagnostics,
    processing_time_ms=PLUS,
    memory_used_kb=INT64,
    external_calls=st.builds(h.ExternalCalls, count=st.integers(0, 2**31 - 1), avg_latency_ms=PLUS),
    confidence_score=st.floats(0.0, 1.0),
)
envelopes = st.builds(
    h.Envelope,
    message_id=IDS,
    timestamp=MILLIS,
    source=ADDRESS,
    target=ADDRESS,
    session_id=SESSION_IDS,
    user_id=TEXT,
    trace_id=IDS,
    span_id=TEXT,
    parent_span_id=st.none() | TEXT,
    causation_id=st.none() | TEXT,
    payload=payload,
    metadata=metadata,
    snapshot=st.none() | snapshot,
    diagnostics=st.none() | diagnostics,
)


def envelope_with(body: Body | None = None) -> h.Envelope:
    """A small valid envelope, for tests that need one concrete value."""
    return h.Envelope(
        message_id="msg_abc123",
        timestamp=datetime(2024, 5, 9, 6, 2, 47, 890000, tzinfo=UTC),
        source="conversation:S2",
        target="mcp:dispatcher",
        session_id="sess_456",
        user_id="u_xyz789",
        trace_id="trace_def456",
        payload=h.Payload(
            task="validate_expense",
            context={"user_id": "u_xyz789", "session_id": "sess_456"},
            body=body,
        ),
        metadata=h.Metadata(
            priority=h.Priority.HIGH,
            timeout_ms=5000,
            retry_policy=h.RetryPolicy(max_attempts=2, backoff_ms=100),
        ),
    )


# -- arbitrary Avro values of a schema, blind to the models' constraints -----------------

AVRO_TEXT = (
    st.text(max_size=12)
    | ADDRESS
    | ADDRESS.map(lambda a: a + "\n")  # Python's `$` matches before a final newline
    | st.text(min_size=49, max_size=52)  # around ContextSnapshot.summary's limit
)
AVRO_PRIMITIVES: dict[str, st.SearchStrategy] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "int": INT32 | st.integers(-2, 2),
    "long": INT64 | st.integers(-2, 2),
    "float": st.floats(width=32),
    "double": st.floats() | st.sampled_from([-0.0, 0.0, 1.0, 1.5]),
    "string": AVRO_TEXT,
}


def avro_value(schema: object, named: dict[str, dict[str, Any]]) -> st.SearchStrategy:  # noqa: PLR0911 - one per Avro kind
    """Any value fastavro can write for ``schema`` (self-contained; ``named`` fills as
    definitions are met). Records inside unions come named, ``(full name, fields)``."""
    if isinstance(schema, list):
        return st.one_of(*[_branch(branch, named) for branch in schema])
    if isinstance(schema, str):
        return (
            AVRO_PRIMITIVES[schema]
            if schema in AVRO_PRIMITIVES
            else avro_value(named[schema], named)
        )
    assert isinstance(schema, dict)
    kind = schema["type"]
    if kind in ("record", "enum"):
        named.setdefault(f"{schema['namespace']}.{schema['name']}", schema)
    if kind == "record":
        fields = {f["name"]: avro_value(f["type"], named) for f in schema["fields"]}
        return st.fixed_dictionaries(fields)
    if kind == "enum":
        return st.sampled_from(schema["symbols"])
    if kind == "array":
        return st.lists(avro_value(schema["items"], named), max_size=3)
    if kind == "map":
        return st.dictionaries(AVRO_TEXT, avro_value(schema["values"], named), max_size=3)
    return AVRO_PRIMITIVES[kind]  # a primitive with a logical type: timestamp-millis is a long


def _branch(branch: object, named: dict[str, dict[str, Any]]) -> st.SearchStrategy:
    if isinstance(branch, dict) and branch["type"] == "record":
        name = f"{branch['namespace']}.{branch['name']}"
        return avro_value(branch, named).map(lambda fields: (name, fields))
    if isinstance(branch, str) and branch in named and named[branch]["type"] == "record":
        return avro_value(branch, named).map(lambda fields: (branch, fields))
    return avro_value(branch, named)

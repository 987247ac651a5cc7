"""Payload models: the typed bodies of the protocol's own messages (``schemas/``).

``Payload`` is ``{task, context, body}``: the task name, its context (small JSON
values), and one typed body record. Each body class names its Avro record in
``avro_name``; tool arguments and results travel as JSON text validated by the
tool's own JSON Schema.
"""

from __future__ import annotations

import enum
import typing
from typing import Annotated, ClassVar

from pydantic import (
    BeforeValidator,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    WrapSerializer,
)

from hermesbus.contract.fields import FLOW_ID_RULE, Double, Int32, Int64, Millis, NonEmpty, Record
from hermesbus.contract.snapshot import ContextSnapshot

__all__ = [
    "BODY_TYPES",
    "Attachment",
    "Body",
    "ContentType",
    "ContextValue",
    "Continue",
    "ErrorReport",
    "MemoryContext",
    "MemoryFact",
    "MemoryQuery",
    "MemoryTier",
    "MemoryWrite",
    "ModelAnswer",
    "ModelChoice",
    "ModelRequest",
    "Payload",
    "Reply",
    "Role",
    "StateSnapshot",
    "TimerFired",
    "ToolCall",
    "ToolResult",
    "ToolResults",
    "TrustLevel",
    "UserTurn",
    "Verification",
    "WindowRollup",
]


class TrustLevel(enum.StrEnum):
    RAW = "raw"
    VERIFIED = "verified"
    CERTIFIED = "certified"


class ContentType(enum.StrEnum):
    TEXT = "text"
    IMAGE = "image"
    FILE = "file"
    AUDIO = "audio"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"


class Role(enum.StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class MemoryTier(enum.StrEnum):
    SHORT_TERM = "short_term"
    MID_TERM = "mid_term"
    LONG_TERM = "long_term"


class Verification(Record):
    avro_name: ClassVar[str] = "hermes.mcp.Verification"
    tool: NonEmpty
    verified_at: Millis


class Attachment(Record):
    avro_name: ClassVar[str] = "hermes.mcp.Attachment"
    name: str
    media_type: str
    uri: str
    sha256: str = ""


class MemoryFact(Record):
    avro_name: ClassVar[str] = "hermes.mcp.MemoryFact"
    subject: str
    relation: str
    object: str
    trust_level: TrustLevel = TrustLevel.RAW
    verified_by: Verification | None = None
    deprecated: bool = False


class UserTurn(Record):
    avro_name: ClassVar[str] = "hermes.mcp.UserTurn"
    text: str
    content_type: ContentType = ContentType.TEXT
    attachments: tuple[Attachment, ...] = ()
    locale: str | None = None
    flow: Annotated[str, Field(pattern=FLOW_ID_RULE)] | None = None
    """The flow a new session starts in (a registered flow's id); None: the turn's intent
    chooses. Ignored for a session that has started."""


class Reply(Record):
    avro_name: ClassVar[str] = "hermes.mcp.Reply"
    text: str
    role: Role = Role.ASSISTANT
    content_type: ContentType = ContentType.TEXT
    choices: tuple[str, ...] = ()
    verification_steps: tuple[str, ...] = ()
    stale: bool = False
    degraded: bool = False


class ToolCall(Record):
    avro_name: ClassVar[str] = "hermes.mcp.ToolCall"
    tool: NonEmpty
    arguments_json: str
    idempotency_key: NonEmpty
    fallback_allowed: bool = True


class ToolResult(Record):
    avro_name: ClassVar[str] = "hermes.mcp.ToolResult"
    tool: NonEmpty
    status_code: Int32
    result_json: str = "null"
    verified: bool = False
    verification_steps: tuple[str, ...] = ()
    stale: bool = False
    stale_since: Millis | None = None
    fallback: str | None = None
    truncated: bool = False
    error: str | None = None


class MemoryQuery(Record):
    avro_name: ClassVar[str] = "hermes.mcp.MemoryQuery"
    symbols: tuple[str, ...] = ()
    preferences: tuple[str, ...] = ()
    entity: str | None = None
    trust_level: TrustLevel = TrustLevel.VERIFIED


class MemoryContext(Record):
    avro_name: ClassVar[str] = "hermes.mcp.MemoryContext"
    symbols: dict[str, str] = Field(default_factory=dict)
    preferences: dict[str, str] = Field(default_factory=dict)
    facts: tuple[MemoryFact, ...] = ()
    invalid: tuple[str, ...] = ()
    """Symbols asked for that expired or failed their validator: the asker must clarify."""
    candidates: dict[str, str] = Field(default_factory=dict)
    """Preferences chosen repeatedly but not confirmed yet: ask before writing them."""


class MemoryWrite(Record):
    avro_name: ClassVar[str] = "hermes.mcp.MemoryWrite"
    tier: MemoryTier
    key: NonEmpty
    value_json: str
    ttl_s: Annotated[Int64, Field(ge=0)] | None = None
    confirmed_by: str | None = None
    verified_by: Verification | None = None
    trust_level: TrustLevel = TrustLevel.RAW
    importance: Annotated[Double, Field(ge=0.0, le=1.0)] = 0.5
    """A user over budget loses the least important, then the oldest, items first."""


class StateSnapshot(Record):
    avro_name: ClassVar[str] = "hermes.mcp.StateSnapshot"
    snapshot: ContextSnapshot
    previous_state: str | None = None
    trigger: str = ""


class TimerFired(Record):
    avro_name: ClassVar[str] = "hermes.mcp.TimerFired"
    timer_id: NonEmpty
    due_at: Millis
    purpose: str
    data_json: str = "null"


class ErrorReport(Record):
    avro_name: ClassVar[str] = "hermes.mcp.ErrorReport"
    component: NonEmpty
    code: NonEmpty
    message: str
    advice: str = ""
    retryable: bool = False


class Continue(Record):
    avro_name: ClassVar[str] = "hermes.mcp.Continue"
    reason: str = ""


class ToolResults(Record):
    """The dispatcher's one answer to a cycle of tool calls (one dispatch per cycle)."""

    avro_name: ClassVar[str] = "hermes.mcp.ToolResults"
    results: tuple[ToolResult, ...] = ()
    context: MemoryContext | None = None
    notice: str = ""


class ModelRequest(Record):
    """A flow's agent state asks the model for its next step: which of ``tools`` to call
    (the tool processor offers their pinned input schemas and approved descriptions), or
    its answer. ``messages_json`` is the conversation so far as chat-completions messages."""

    avro_name: ClassVar[str] = "hermes.mcp.ModelRequest"
    agent: NonEmpty
    tools: tuple[str, ...] = ()
    messages_json: str
    max_tokens: Annotated[Int32, Field(gt=0)]
    round: Annotated[Int32, Field(ge=1)] = 1


class ModelChoice(Record):
    """One tool call the model chose, as it named it; ``refusal`` says why it does not run
    (a tool outside the allow-list, arguments the schema refuses), empty when it may."""

    avro_name: ClassVar[str] = "hermes.mcp.ModelChoice"
    call_id: NonEmpty
    tool: str
    arguments_json: str
    refusal: str = ""


class ModelAnswer(Record):
    """The model's answer to a ``ModelRequest``: tool calls to make, or its final text.
    The log holds it, so a replay reads what the model said instead of asking it again."""

    avro_name: ClassVar[str] = "hermes.mcp.ModelAnswer"
    content: str = ""
    choices: tuple[ModelChoice, ...] = ()
    tokens: Annotated[Int32, Field(ge=0)] = 0
    model: str = ""
    error: str = ""
    """Why the model gave no answer (unreachable, timed out, nonsense); empty when it did."""


class WindowRollup(Record):
    """One key's figures over one window of the records' time, as the diagnostics rollup
    closed it (``processors/diagnostics``). ``key`` is ``component:<kind>``,
    ``tool:<name>`` or ``state:<flow state>``. A window may be closed in parts, each
    naming the source partitions it adds up; the window's figures are the sum of its
    parts. ``latency_counts`` is the latency histogram's count per bucket (the bounds in
    ``latency_bounds_ms``, the last bucket unbounded), so windows merge downstream."""

    avro_name: ClassVar[str] = "hermes.mcp.WindowRollup"
    key: NonEmpty
    window: NonEmpty
    """``tumbling`` or ``hopping``."""
    start: Millis
    end: Millis
    partitions: tuple[Int32, ...] = ()
    part: Annotated[Int32, Field(ge=0)] = 0
    count: Annotated[Int64, Field(ge=0)] = 0
    errors: Annotated[Int64, Field(ge=0)] = 0
    retries: Annotated[Int64, Field(ge=0)] = 0
    fallbacks: Annotated[Int64, Field(ge=0)] = 0
    dead_letters: Annotated[Int64, Field(ge=0)] = 0
    refused: Annotated[Int64, Field(ge=0)] = 0
    misrouted: Annotated[Int64, Field(ge=0)] = 0
    latency_p50_ms: Double = 0.0
    latency_p95_ms: Double = 0.0
    latency_p99_ms: Double = 0.0
    latency_sum_ms: Double = 0.0
    latency_bounds_ms: tuple[Double, ...] = ()
    latency_counts: tuple[Int64, ...] = ()
    confidence_mean: Double | None = None
    confidence_n: Annotated[Int64, Field(ge=0)] = 0
    external_calls: Annotated[Int64, Field(ge=0)] = 0
    external_latency_ms: Double = 0.0
    """The external calls' mean latency."""


Body = (
    UserTurn
    | Reply
    | ToolCall
    | ToolResult
    | MemoryQuery
    | MemoryContext
    | MemoryWrite
    | StateSnapshot
    | TimerFired
    | ErrorReport
    | Continue
    | ToolResults
    | ModelRequest
    | ModelAnswer
    | WindowRollup
)
BODY_TYPES: dict[str, type[Record]] = {cls.avro_name: cls for cls in typing.get_args(Body)}
"""Body model by Avro full name, in the order of the ``Payload.body`` union."""

ContextValue = Annotated[
    StrictBool
    | Annotated[StrictInt, Field(ge=-(2**63), le=2**63 - 1)]
    | Annotated[StrictFloat, Field(allow_inf_nan=False)]
    | StrictStr
    | list[StrictStr]
    | None,
    Field(union_mode="left_to_right"),
]
"""A context value: the JSON scalars and string lists; strict, so 1 stays int and "1" str."""


def _named_body(value: object) -> object:
    """A body model, ``{"hermes.mcp.UserTurn": {...}}`` (Avro's JSON form of a union) or
    ``("hermes.mcp.UserTurn", {...})`` (fastavro's); an untagged dict is refused, since
    bodies share field names and a guess could pick the wrong one."""
    if value is None or isinstance(value, Record):
        return value
    if isinstance(value, tuple) and len(value) == 2:  # noqa: PLR2004 - (name, fields)
        name, fields = value
    elif isinstance(value, dict) and len(value) == 1:
        ((name, fields),) = value.items()
    else:
        raise ValueError('name the body type, e.g. {"hermes.mcp.UserTurn": {"text": "..."}}')
    cls = BODY_TYPES.get(name) or BODY_TYPES.get(f"hermes.mcp.{name}")
    if cls is None:
        raise ValueError(f"unknown body type {name!r}")
    return cls.model_validate(fields)


def _tag_body(value: Record | None, handler: SerializerFunctionWrapHandler) -> object:
    return None if value is None else {value.avro_name: handler(value)}


NamedBody = Annotated[Body | None, BeforeValidator(_named_body), WrapSerializer(_tag_body)]
"""The body union, named by its Avro type in dumps and required to be named on input."""


class Payload(Record):
    """What the envelope asks for: ``task``, its ``context`` and a typed ``body``."""

    avro_name: ClassVar[str] = "hermes.mcp.Payload"
    task: str = ""
    context: dict[str, ContextValue] = Field(default_factory=dict)
    body: NamedBody = None

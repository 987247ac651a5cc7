"""hermesbus: an event-driven message bus for AI-agent components on Kafka."""

from hermesbus import errors
from hermesbus.client import Client
from hermesbus.envelope import Diagnostics, Envelope, ExternalCalls, Metadata, Priority, RetryPolicy
from hermesbus.payloads import (
    Attachment,
    ContentType,
    Continue,
    ErrorReport,
    MemoryContext,
    MemoryFact,
    MemoryQuery,
    MemoryTier,
    MemoryWrite,
    Payload,
    Reply,
    Role,
    StateSnapshot,
    TimerFired,
    ToolCall,
    ToolResult,
    ToolResults,
    TrustLevel,
    UserTurn,
    Verification,
)
from hermesbus.snapshot import ContextSnapshot, ToolCallTrace

__version__ = "0.1.0"

__all__ = [
    "Attachment",
    "Client",
    "ContentType",
    "ContextSnapshot",
    "Continue",
    "Diagnostics",
    "Envelope",
    "ErrorReport",
    "ExternalCalls",
    "MemoryContext",
    "MemoryFact",
    "MemoryQuery",
    "MemoryTier",
    "MemoryWrite",
    "Metadata",
    "Payload",
    "Priority",
    "Reply",
    "RetryPolicy",
    "Role",
    "StateSnapshot",
    "TimerFired",
    "ToolCall",
    "ToolCallTrace",
    "ToolResult",
    "ToolResults",
    "TrustLevel",
    "UserTurn",
    "Verification",
    "__version__",
    "errors",
]

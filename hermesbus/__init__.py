"""hermesbus: an event-driven message bus for AI-agent components on Kafka."""

import importlib
import pkgutil
from typing import TYPE_CHECKING

# Run from the repository root, `hermesbus` is this folder, which does not hold
# processors/, connectors/, topics/ or schemas/: the editable install's link tree (see
# deploy/local/setup.sh) does, and extend_path adds it, as it adds any other `hermesbus`
# folder on sys.path. Installed from a wheel there is one folder and this does nothing.
__path__ = pkgutil.extend_path(__path__, __name__)

import hermesbus.base.sigint  # noqa: F401 - first: Ctrl-C while the command line imports exits 130
from hermesbus import errors

if TYPE_CHECKING:
    from hermesbus.client import Client
    from hermesbus.contract.envelope import (
        Diagnostics,
        Envelope,
        ExternalCalls,
        Metadata,
        Priority,
        RetryPolicy,
    )
    from hermesbus.contract.payloads import (
        Attachment,
        ContentType,
        Continue,
        ErrorReport,
        MemoryContext,
        MemoryFact,
        MemoryQuery,
        MemoryTier,
        MemoryWrite,
        ModelAnswer,
        ModelChoice,
        ModelRequest,
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
        WindowRollup,
    )
    from hermesbus.contract.snapshot import ContextSnapshot, ToolCallTrace

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
    "ModelAnswer",
    "ModelChoice",
    "ModelRequest",
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
    "WindowRollup",
    "__version__",
    "errors",
]

_LAZY = {
    "Client": "hermesbus.client",
    "ContextSnapshot": "hermesbus.contract.snapshot",
    "ToolCallTrace": "hermesbus.contract.snapshot",
    **dict.fromkeys(
        ("Diagnostics", "Envelope", "ExternalCalls", "Metadata", "Priority", "RetryPolicy"),
        "hermesbus.contract.envelope",
    ),
}
"""Where each name of the API is defined: imported when first used, so that a command
line that needs none of them (``hermesbus --help``) does not pay for pydantic models
and Kafka clients. Every other name of ``__all__`` is a payload."""


def __getattr__(name: str) -> object:
    if name not in __all__ or name in ("__version__", "errors"):
        raise AttributeError(f"module 'hermesbus' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY.get(name, "hermesbus.contract.payloads")), name)
    globals()[name] = value
    return value

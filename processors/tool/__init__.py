"""The tool processor: certified tools, isolated and verified.

A :class:`ToolRegistry` admits a tool only with input/output JSON Schemas, a health
probe, a verifier and a fallback strategy; :class:`ToolService` runs calls (python tools
in a pool of ``ToolSpec.workers`` warm worker processes with a timeout kill, a memory
limit and a minimal environment, HTTP tools with httpx under a deadline and a size cap),
verifies results before release (the verifier in the tool's worker), falls back, and
records health (with the calls queued for a worker); :func:`handle` is the handler of the
``tool`` processor (topic ``hermes.tool``).
"""

from hermesbus.processors.tool._access import ToolAccess, windows_of
from hermesbus.processors.tool._chaos import FAULTS, ChaosReport, FaultOutcome, chaos
from hermesbus.processors.tool._executor import (
    IDEMPOTENCY_ENV,
    SIGNATURE_HEADER,
    Execution,
    Executor,
    PythonWorker,
)
from hermesbus.processors.tool._groups import MODEL_GROUP, group_name, modelling, serving
from hermesbus.processors.tool._handler import NAME, PORT, TOPIC, handle
from hermesbus.processors.tool._health import RegistryHealth
from hermesbus.processors.tool._http import IDEMPOTENCY_HEADER, HttpExecutor
from hermesbus.processors.tool._mcp import McpConnection, McpExecutor, definition_of, pin_of
from hermesbus.processors.tool._mcp_specs import McpDocument, ProbeCall, mcp_specs
from hermesbus.processors.tool._model import (
    MAX_CHOICES,
    MODEL_PORT,
    ChatModel,
    ModelPort,
    RecordedModel,
    SpecSource,
    checked_answer,
    functions_of,
)
from hermesbus.processors.tool._registry import ToolRegistry
from hermesbus.processors.tool._release import arguments_digest
from hermesbus.processors.tool._service import CallReport, Progress, ToolPort, ToolService
from hermesbus.processors.tool._settings import (
    DEMO_MODULES,
    ToolEnvironment,
    ToolSettings,
    module_allowed,
    private_part,
)
from hermesbus.processors.tool._spec import (
    DEFAULT_MAX_RESULT_BYTES,
    MAX_RESULT_CAP,
    TOOL_NAME_PATTERN,
    Access,
    Fallback,
    McpBinding,
    McpServer,
    Quota,
    RateLimit,
    SignatureConfig,
    SignedResult,
    ToolKind,
    ToolSpec,
    spec_from_json,
    tool_name_problem,
)
from hermesbus.processors.tool._store import (
    KEEP_ADMITTED_MS,
    CallStats,
    Probe,
    StoredResult,
    ToolStore,
    Window,
)
from hermesbus.processors.tool._verify import Verified, check_signature, json_depth

__all__ = [
    "DEFAULT_MAX_RESULT_BYTES",
    "DEMO_MODULES",
    "FAULTS",
    "IDEMPOTENCY_ENV",
    "IDEMPOTENCY_HEADER",
    "KEEP_ADMITTED_MS",
    "MAX_CHOICES",
    "MAX_RESULT_CAP",
    "MODEL_GROUP",
    "MODEL_PORT",
    "NAME",
    "PORT",
    "SIGNATURE_HEADER",
    "TOOL_NAME_PATTERN",
    "TOPIC",
    "Access",
    "CallReport",
    "CallStats",
    "ChaosReport",
    "ChatModel",
    "Execution",
    "Executor",
    "Fallback",
    "FaultOutcome",
    "HttpExecutor",
    "McpBinding",
    "McpConnection",
    "McpDocument",
    "McpExecutor",
    "McpServer",
    "ModelPort",
    "Probe",
    "ProbeCall",
    "Progress",
    "PythonWorker",
    "Quota",
    "RateLimit",
    "RecordedModel",
    "RegistryHealth",
    "SignatureConfig",
    "SignedResult",
    "SpecSource",
    "StoredResult",
    "ToolAccess",
    "ToolEnvironment",
    "ToolKind",
    "ToolPort",
    "ToolRegistry",
    "ToolService",
    "ToolSettings",
    "ToolSpec",
    "ToolStore",
    "Verified",
    "Window",
    "arguments_digest",
    "chaos",
    "check_signature",
    "checked_answer",
    "definition_of",
    "functions_of",
    "group_name",
    "handle",
    "json_depth",
    "mcp_specs",
    "modelling",
    "module_allowed",
    "pin_of",
    "private_part",
    "serving",
    "spec_from_json",
    "tool_name_problem",
    "windows_of",
]

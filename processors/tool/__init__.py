"""The tool processor (seed 000 §3, seed 001 §3): certified tools, isolated and verified.

A :class:`ToolRegistry` admits a tool only with input/output JSON Schemas, a health
probe, a verifier and a fallback strategy; :class:`ToolService` runs calls (python tools
in a warm worker process with a timeout kill and a memory limit, HTTP tools with httpx),
verifies results before release, falls back, and records health; :func:`handle` is the
handler of the ``tool`` processor (topic ``hermes.tool``).
"""

from ._executor import SIGNATURE_HEADER, Execution, Executor, HttpExecutor, PythonWorker
from ._groups import group_name, serving
from ._handler import NAME, PORT, TOPIC, handle
from ._health import RegistryHealth
from ._registry import ToolRegistry
from ._release import arguments_digest
from ._service import CallReport, ToolPort, ToolService, probe_all
from ._settings import ToolSettings
from ._spec import (
    DEFAULT_MAX_RESULT_BYTES,
    Fallback,
    SignatureConfig,
    SignedResult,
    ToolKind,
    ToolSpec,
)
from ._store import CallStats, Probe, StoredResult, ToolStore
from ._verify import Verified, check_signature, verify

__all__ = [
    "DEFAULT_MAX_RESULT_BYTES",
    "NAME",
    "PORT",
    "SIGNATURE_HEADER",
    "TOPIC",
    "CallReport",
    "CallStats",
    "Execution",
    "Executor",
    "Fallback",
    "HttpExecutor",
    "Probe",
    "PythonWorker",
    "RegistryHealth",
    "SignatureConfig",
    "SignedResult",
    "StoredResult",
    "ToolKind",
    "ToolPort",
    "ToolRegistry",
    "ToolService",
    "ToolSettings",
    "ToolSpec",
    "ToolStore",
    "Verified",
    "arguments_digest",
    "check_signature",
    "group_name",
    "handle",
    "probe_all",
    "serving",
    "verify",
]

"""Flows as data: the flow spec (models and its published JSON Schema), reading a spec
file with every problem named by line and field, and the lint that checks its machine.

A flow is what the conversation processor runs and the dispatcher checks snapshots
against: states with their on-enter actions, waits, exception exits and timeouts, and the
transitions between them. ``flow.schema.json`` beside this module is the published schema
(generated from the models: ``python -m hermesbus.processors.flow`` writes it; a test
holds it current).
"""

from hermesbus.processors.flow._catalog import (
    FLOWS_PORT,
    FlowCatalog,
    PinnedCatalog,
    StaticCatalog,
    machine_of,
)
from hermesbus.processors.flow._expense import (
    EXPENSE_FILE,
    EXPENSE_MACHINE,
    EXPENSE_SPEC,
    EXPENSE_TERMINAL,
)
from hermesbus.processors.flow._hooks import HOOKS_PORT, Hooks
from hermesbus.processors.flow._lint import BUILTIN_TRIGGERS, FAILURE, Finding, lint, tools_of
from hermesbus.processors.flow._load import (
    MAX_BYTES,
    SCHEMA_FILE,
    FlowSpecError,
    Lines,
    Problem,
    load_flow,
    schema,
)
from hermesbus.processors.flow._paths import (
    PATH_COUNT,
    PATHS_NAMESPACE,
    PATHS_PORT,
    MemoryPaths,
    PathCounts,
    RecordedPaths,
    StorePaths,
)
from hermesbus.processors.flow._registry import (
    DIGEST_CHARS,
    FLOW_SIGNER,
    FlowVersion,
    Refused,
    Registered,
    digest_of,
    record_key,
)
from hermesbus.processors.flow._render import MISSING, lookup, render, resolve
from hermesbus.processors.flow._spec import (
    NAME_PATTERN,
    ROOTS,
    SUMMARY_MAX,
    ArmAction,
    Call,
    CallAction,
    CarryAction,
    Decide,
    DecideAction,
    DisarmAction,
    Entity,
    FlowSpec,
    HookAction,
    Instant,
    Intent,
    ParallelAction,
    PatternEntity,
    PinAction,
    RememberAction,
    RememberDeclined,
    RememberFact,
    RememberItem,
    RememberPreference,
    RememberSymbol,
    ReplyAction,
    SetAction,
    SnapshotHook,
    State,
    Transition,
    duration_ms,
    pattern_of,
    placeholders,
    placeholders_in,
)

__all__ = [
    "BUILTIN_TRIGGERS",
    "DIGEST_CHARS",
    "EXPENSE_FILE",
    "EXPENSE_MACHINE",
    "EXPENSE_SPEC",
    "EXPENSE_TERMINAL",
    "FAILURE",
    "FLOWS_PORT",
    "FLOW_SIGNER",
    "HOOKS_PORT",
    "MAX_BYTES",
    "MISSING",
    "NAME_PATTERN",
    "PATHS_NAMESPACE",
    "PATHS_PORT",
    "PATH_COUNT",
    "ROOTS",
    "SCHEMA_FILE",
    "SUMMARY_MAX",
    "ArmAction",
    "Call",
    "CallAction",
    "CarryAction",
    "Decide",
    "DecideAction",
    "DisarmAction",
    "Entity",
    "Finding",
    "FlowCatalog",
    "FlowSpec",
    "FlowSpecError",
    "FlowVersion",
    "HookAction",
    "Hooks",
    "Instant",
    "Intent",
    "Lines",
    "MemoryPaths",
    "ParallelAction",
    "PathCounts",
    "PatternEntity",
    "PinAction",
    "PinnedCatalog",
    "Problem",
    "RecordedPaths",
    "Refused",
    "Registered",
    "RememberAction",
    "RememberDeclined",
    "RememberFact",
    "RememberItem",
    "RememberPreference",
    "RememberSymbol",
    "ReplyAction",
    "SetAction",
    "SnapshotHook",
    "State",
    "StaticCatalog",
    "StorePaths",
    "Transition",
    "digest_of",
    "duration_ms",
    "generated_schema",
    "lint",
    "load_flow",
    "lookup",
    "machine_of",
    "pattern_of",
    "placeholders",
    "placeholders_in",
    "record_key",
    "render",
    "resolve",
    "schema",
    "tools_of",
]


def generated_schema() -> dict[str, object]:
    """The JSON Schema the models make (what ``flow.schema.json`` must hold)."""
    made = FlowSpec.model_json_schema(by_alias=True)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **made}

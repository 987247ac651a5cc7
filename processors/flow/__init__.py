"""Flows as data: the flow spec (models and its published JSON Schema), reading a spec
file with every problem named by line and field, and the lint that checks its machine.

A flow is what the conversation processor runs and the dispatcher checks snapshots
against: states with their on-enter actions, waits, exception exits and timeouts, and the
transitions between them. ``flow.schema.json`` beside this module is the published schema
(generated from the models: ``python -m hermesbus.processors.flow`` writes it; a test
holds it current).
"""

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
from hermesbus.processors.flow._registry import (
    DIGEST_CHARS,
    FLOW_SIGNER,
    FlowVersion,
    Refused,
    Registered,
    digest_of,
    record_key,
)
from hermesbus.processors.flow._spec import (
    ROOTS,
    SUMMARY_MAX,
    FlowSpec,
    State,
    Transition,
    duration_ms,
    placeholders,
)

__all__ = [
    "BUILTIN_TRIGGERS",
    "DIGEST_CHARS",
    "FAILURE",
    "FLOW_SIGNER",
    "MAX_BYTES",
    "ROOTS",
    "SCHEMA_FILE",
    "SUMMARY_MAX",
    "Finding",
    "FlowSpec",
    "FlowSpecError",
    "FlowVersion",
    "Lines",
    "Problem",
    "Refused",
    "Registered",
    "State",
    "Transition",
    "digest_of",
    "duration_ms",
    "generated_schema",
    "lint",
    "load_flow",
    "placeholders",
    "record_key",
    "schema",
    "tools_of",
]


def generated_schema() -> dict[str, object]:
    """The JSON Schema the models make (what ``flow.schema.json`` must hold)."""
    made = FlowSpec.model_json_schema(by_alias=True)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **made}

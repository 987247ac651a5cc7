"""The topic catalog (``catalog.yaml``) and the code that provisions it."""

from hermesbus.topics.catalog import CATALOG_FILE, SESSION_KEY, Catalog, TopicSpec, parse_retention
from hermesbus.topics.plan import (
    Drift,
    ExistingTopic,
    TopicPlan,
    apply_command_line,
    plan,
    session_partitions,
    sized_by_existing,
)
from hermesbus.topics.routes import (
    ALERTS,
    AUDIT,
    CONVERSATION_IN,
    CONVERSATION_OUT,
    DIAGNOSTICS,
    DLQ,
    FLOWS,
    ROUTES,
    identity_of,
    topic_for,
)

__all__ = [
    "ALERTS",
    "AUDIT",
    "CATALOG_FILE",
    "CONVERSATION_IN",
    "CONVERSATION_OUT",
    "DIAGNOSTICS",
    "DLQ",
    "FLOWS",
    "ROUTES",
    "SESSION_KEY",
    "Catalog",
    "Drift",
    "ExistingTopic",
    "TopicPlan",
    "TopicSpec",
    "apply_command_line",
    "identity_of",
    "parse_retention",
    "plan",
    "session_partitions",
    "sized_by_existing",
    "topic_for",
]

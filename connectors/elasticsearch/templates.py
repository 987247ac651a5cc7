"""The data stream's index template, component templates and lifecycle policy.

Installed idempotently when the index starts (a PUT of the same body changes nothing).
The index template's priority is above the built-in ``logs`` template (100), so these
explicit mappings win for ``logs-hermes.envelopes-*``. A lifecycle policy is installed
and referenced only where the server has index lifecycle management.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "INDEX_TEMPLATE",
    "LIFECYCLE_POLICY",
    "PRIORITY",
    "component_templates",
    "index_template",
    "lifecycle_policy",
    "mappings",
]

PRIORITY = 250
LIFECYCLE_POLICY = "hermes-envelopes"
_NAME = "hermes-envelopes"
INDEX_TEMPLATE = _NAME

_KEYWORD = {"type": "keyword"}
_LONG = {"type": "long"}
_INT = {"type": "integer"}
_DOUBLE = {"type": "double"}
_DATE = {"type": "date"}
_TEXT = {"type": "text"}
_OFF = {"type": "object", "enabled": False}


def _obj(**fields: dict[str, Any]) -> dict[str, Any]:
    return {"properties": fields}


def mappings() -> dict[str, Any]:
    """Every field a document has, with its type; what is not listed is kept, not indexed."""
    return {
        "dynamic": False,
        "properties": {
            "@timestamp": _DATE,
            "message": _TEXT,
            "event": _obj(
                id=_KEYWORD,
                action=_KEYWORD,
                outcome=_KEYWORD,
                kind=_KEYWORD,
                dataset=_KEYWORD,
                created=_DATE,
                duration=_LONG,
            ),
            "trace": _obj(id=_KEYWORD),
            "span": _obj(id=_KEYWORD),
            "parent": _obj(id=_KEYWORD),
            "service": _obj(name=_KEYWORD, node=_obj(name=_KEYWORD)),
            "user": _obj(id=_KEYWORD),
            "gen_ai": _obj(conversation=_obj(id=_KEYWORD)),
            "messaging": _obj(
                destination=_obj(name=_KEYWORD),
                kafka=_obj(
                    message=_obj(key=_KEYWORD, offset=_LONG),
                    destination=_obj(partition=_INT),
                ),
            ),
            "labels": _obj(priority=_KEYWORD, attempt=_KEYWORD, state=_KEYWORD),
            "error": _obj(type=_KEYWORD, message=_TEXT),
            "hermes": _obj(
                source=_KEYWORD,
                target=_KEYWORD,
                causation_id=_KEYWORD,
                task=_KEYWORD,
                payload=_OFF,
                payload_text=_TEXT,
                payload_truncated=_LONG,
                raw={"type": "binary"},
                kafka=_obj(timestamp_ms=_LONG, headers=_OFF),
                diagnostics=_obj(
                    processing_time_ms=_DOUBLE,
                    memory_used_kb=_LONG,
                    external_calls=_INT,
                    external_avg_latency_ms=_DOUBLE,
                    confidence_score=_DOUBLE,
                ),
                dlq=_obj(topic=_KEYWORD, partition=_INT, offset=_LONG, processor=_KEYWORD),
            ),
        },
    }


def component_templates(*, lifecycle: bool) -> dict[str, dict[str, Any]]:
    """Name → body of the component templates: mappings, and settings."""
    settings: dict[str, Any] = {"index": {"codec": "best_compression"}}
    if lifecycle:
        settings["index"]["lifecycle"] = {"name": LIFECYCLE_POLICY}
    return {
        f"{_NAME}@mappings": {"template": {"mappings": mappings()}},
        f"{_NAME}@settings": {"template": {"settings": settings}},
    }


def index_template(pattern: str) -> dict[str, Any]:
    """The composable index template that makes ``pattern`` data streams of these docs."""
    return {
        "index_patterns": [pattern],
        "data_stream": {},
        "priority": PRIORITY,
        "composed_of": [f"{_NAME}@mappings", f"{_NAME}@settings"],
        "_meta": {"managed_by": "hermesbus", "description": "one document per envelope"},
    }


def lifecycle_policy() -> dict[str, Any]:
    """Roll over daily or at 50 GB a primary shard; delete after 30 days (the DLQ's retention)."""
    return {
        "phases": {
            "hot": {"actions": {"rollover": {"max_age": "1d", "max_primary_shard_size": "50gb"}}},
            "delete": {"min_age": "30d", "actions": {"delete": {}}},
        }
    }

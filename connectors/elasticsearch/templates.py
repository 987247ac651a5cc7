"""The data stream's index template, component templates and lifecycle policy.

Installed idempotently when the index starts (a PUT of the same body changes nothing).
The index template's priority is above the built-in ``logs`` template (100), so these
explicit mappings win for ``logs-hermes.envelopes-*``. A lifecycle policy is installed
and referenced only where the server has index lifecycle management. Another dataset
(``HERMES_ELASTICSEARCH_DATA_STREAM=logs-other-default``) gets templates of its own
(``hermes-envelopes-other``): two buses on one cluster do not overwrite each other's.
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
    "rollup_template_name",
    "template_name",
    "wrongly_mapped",
]

PRIORITY = 250
LIFECYCLE_POLICY = "hermes-envelopes"
_NAME = "hermes-envelopes"
INDEX_TEMPLATE = _NAME
"""The index template's name for the default dataset (``template_name``)."""
_DATASET = "hermes.envelopes"

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
                rollup=_obj(
                    key=_KEYWORD,
                    window=_KEYWORD,
                    start=_DATE,
                    end=_DATE,
                    part=_INT,
                    partition=_INT,
                    **dict.fromkeys(_ROLLUP_COUNTS, _LONG),
                    **dict.fromkeys(_ROLLUP_FIGURES, _DOUBLE),
                ),
                alert=_obj(
                    state=_KEYWORD,
                    rule=_KEYWORD,
                    key=_KEYWORD,
                    figure=_KEYWORD,
                    value=_DOUBLE,
                    limit=_DOUBLE,
                    windows=_INT,
                    window_start=_DATE,
                    window_end=_DATE,
                    since=_DATE,
                ),
            ),
        },
    }


_ROLLUP_COUNTS = (
    "count", "errors", "retries", "fallbacks", "dead_letters", "refused", "misrouted",
    "confidence_n", "external_calls",
)  # fmt: skip
_ROLLUP_FIGURES = (
    "error_rate", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms", "latency_sum_ms",
    "confidence_mean", "external_latency_ms",
)  # fmt: skip
"""``hermes.rollup``: a closed window's figures (the diagnostics rollup's own stream)."""


def rollup_template_name(name: str = _NAME) -> str:
    """The index template of the rollup streams next to index template ``name``'s."""
    return f"{name}-diagnostics"


def template_name(dataset: str = _DATASET) -> str:
    """The index template of ``dataset``'s streams (its component templates are named
    after it): ``hermes-envelopes`` for the default one, ``hermes-envelopes-<dataset>``."""
    return _NAME if dataset == _DATASET else f"{_NAME}-{dataset}"


def component_templates(*, lifecycle: bool, name: str = _NAME) -> dict[str, dict[str, Any]]:
    """Name → body of the component templates of index template ``name``: mappings, and
    settings."""
    settings: dict[str, Any] = {"index": {"codec": "best_compression"}}
    if lifecycle:
        settings["index"]["lifecycle"] = {"name": LIFECYCLE_POLICY}
    return {
        f"{name}@mappings": {"template": {"mappings": mappings()}},
        f"{name}@settings": {"template": {"settings": settings}},
    }


def index_template(
    pattern: str, name: str = _NAME, what: str = "one document per envelope"
) -> dict[str, Any]:
    """The composable index template that makes ``pattern`` data streams of these docs,
    from index template ``name``'s component templates."""
    return {
        "index_patterns": [pattern],
        "data_stream": {},
        "priority": PRIORITY,
        "composed_of": [f"{name}@mappings", f"{name}@settings"],
        "_meta": {"managed_by": "hermesbus", "description": what},
    }


def lifecycle_policy() -> dict[str, Any]:
    """Roll over daily or at 50 GB a primary shard; delete after 30 days (the DLQ's retention)."""
    return {
        "phases": {
            "hot": {"actions": {"rollover": {"max_age": "1d", "max_primary_shard_size": "50gb"}}},
            "delete": {"min_age": "30d", "actions": {"delete": {}}},
        }
    }


def wrongly_mapped(actual: dict[str, Any], limit: int = 3) -> list[str]:
    """How a backing index's ``actual`` mappings differ from :func:`mappings` (up to
    ``limit`` differences, e.g. ``trace.id is text, not keyword``); none: it was made from
    our template. A field the index lacks is no difference (no document had it yet)."""
    found: list[str] = []
    if str(actual.get("dynamic", "true")) != "false":
        found.append("dynamic mapping on (made without hermesbus's template)")
    _compare(mappings()["properties"], actual.get("properties", {}), "", found)
    return found[:limit]


def _compare(want: dict[str, Any], have: dict[str, Any], path: str, found: list[str]) -> None:
    for field, spec in want.items():
        there = have.get(field)
        if there is None:
            continue
        name = path + field
        if "properties" in spec:
            _compare(spec["properties"], there.get("properties", {}), name + ".", found)
        elif spec.get("enabled") is False:
            if there.get("enabled", True) is not False:
                found.append(f"{name} is indexed, not kept unindexed")
        elif there.get("type", "object") != spec["type"]:
            found.append(f"{name} is {there.get('type', 'object')}, not {spec['type']}")

"""The topic catalog: what it declares, what it refuses, and the apply plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hermesbus.cli import app
from hermesbus.errors import CatalogError
from hermesbus.topics import Catalog, ExistingTopic, parse_retention, plan

DESIGN_TOPICS = {
    "hermes.conversation.in",
    "hermes.conversation.out",
    "hermes.dispatcher",
    "hermes.tool",
    "hermes.memory",
    "hermes.audit",
    "hermes.alerts",
    "hermes.dlq",
    "hermes.flows",
    "hermes.diagnostics",
    "hermes.rollup-tallies-changelog",
}
CHANGELOG = "hermes.rollup-tallies-changelog"
"""The diagnostics rollup's faust table: compacted, never indexed."""


def test_the_catalog_names_every_topic_of_the_design() -> None:
    catalog = Catalog.load()
    assert set(catalog.names()) == DESIGN_TOPICS
    for spec in catalog:
        assert spec.partitions >= 1
        if spec.name == CHANGELOG:  # a table's changelog: the latest value per key
            assert spec.cleanup_policy == "compact" and not spec.indexed
            assert spec.key == "session_id"  # sized with the session topics
            continue
        assert spec.cleanup_policy == "delete"  # never compact: the flow registry neither
        if spec.name != "hermes.flows":
            assert spec.indexed and spec.retention_ms > 0
    flows = catalog.get("hermes.flows")  # a registry: every record kept for ever
    assert (flows.retention_ms, flows.partitions) == (-1, 1)
    assert not flows.indexed and "hermes.flows" not in catalog.indexed_names()
    assert catalog.get("hermes.tool").key == "session_id"
    assert catalog.get("hermes.tool").value_schema == "hermes.mcp.Envelope"
    assert catalog.get("hermes.dlq").value_schema is None  # original bytes, unchanged
    assert catalog.get("hermes.audit").retention_ms == 365 * 86_400_000


def test_session_keyed_topics_share_one_partition_count() -> None:
    counts = {s.partitions for s in Catalog.load() if s.key == "session_id"}
    assert len(counts) == 1


def raw(**topic: Any) -> dict[str, Any]:
    base = {
        "partitions": 3,
        "replication_factor": 1,
        "key": "session_id",
        "value_schema": "hermes.mcp.Envelope",
        "cleanup_policy": "delete",
        "retention": "1d",
    }
    return {"defaults": base, "topics": [{"name": "a.in"}, {"name": "a.out", **topic}]}


@pytest.mark.parametrize(
    ("topic", "message"),
    [
        ({"partitions": 4}, "must share one partition count"),
        ({"name": "a.in"}, "declared twice"),
        ({"name": "bad name!"}, "not a valid Kafka topic name"),
        ({"retention": "a week"}, "use a duration like"),
        ({"cleanup_policy": "archive"}, "cleanup_policy"),
        ({"partitions": 0}, "partitions"),
        ({"colour": "blue"}, "colour"),
        ({"retention_ms": 1000}, "write 'retention'"),
        ({"retention": -7}, "must be >= 0 ms"),
        ({"configs": {"cleanup.policy": "compact"}}, "use cleanup_policy and retention"),
    ],
)
def test_invalid_catalogs_are_refused_with_the_reason(topic: dict[str, Any], message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        Catalog.from_mapping(raw(**topic))


def test_defaults_must_be_a_mapping() -> None:
    with pytest.raises(CatalogError, match="must be mappings"):
        Catalog.from_mapping({"defaults": ["x"], "topics": [{"name": "a"}]})


def test_unknown_value_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(
        "topics:\n  - {name: x, partitions: 1, replication_factor: 1, key: k,"
        " value_schema: hermes.mcp.Nope, cleanup_policy: delete, retention: 1d}\n"
    )
    with pytest.raises(CatalogError, match="hermes.mcp.Nope is not in schemas/"):
        Catalog.load(path)


def test_retention() -> None:
    assert parse_retention("90s") == 90_000
    assert parse_retention("15m") == 900_000
    assert parse_retention("forever") == -1
    assert parse_retention(1234) == 1234


def test_overrides_prefix_every_name_and_keep_co_partitioning() -> None:
    catalog = Catalog.load().with_overrides(prefix="t1.", partitions=2, replication_factor=3)
    assert all(name.startswith("t1.hermes.") for name in catalog.names())
    assert {s.partitions for s in catalog if s.key == "session_id"} == {2}
    assert catalog.get("t1.hermes.alerts").partitions == 1  # not session-keyed
    assert {s.replication_factor for s in catalog} == {3}


def existing(spec: Any, **change: Any) -> ExistingTopic:
    values = {
        "name": spec.name,
        "partitions": spec.partitions,
        "replication_factor": spec.replication_factor,
        "configs": spec.kafka_configs(),
    }
    return ExistingTopic(**{**values, **change})


def test_plan_creates_missing_and_reports_drift() -> None:
    catalog = Catalog.load()
    tool, memory, dlq = (catalog.get(n) for n in ("hermes.tool", "hermes.memory", "hermes.dlq"))
    result = plan(
        catalog,
        {
            tool.name: existing(tool),
            memory.name: existing(memory, partitions=12),
            dlq.name: existing(dlq, configs={**dlq.kafka_configs(), "retention.ms": "1000"}),
        },
    )
    assert {s.name for s in result.create} == DESIGN_TOPICS - {tool.name, memory.name, dlq.name}
    assert result.in_sync == (tool.name,)
    assert [str(d) for d in result.drift] == [
        "hermes.memory: partitions is 12, the catalog says 6",
        "hermes.dlq: retention.ms is 1000, the catalog says 2592000000",
    ]


def test_plan_marks_topics_whose_configs_cannot_be_read() -> None:
    catalog = Catalog.load()
    tool = catalog.get("hermes.tool")
    result = plan(catalog, {tool.name: existing(tool, configs=None)})
    assert result.unverified == (tool.name,)
    assert tool.name not in result.in_sync


def test_topics_list_prints_the_catalog() -> None:
    result = CliRunner().invoke(app, ["topics", "list", "--prefix", "demo."])
    assert result.exit_code == 0, result.output
    assert "demo.hermes.conversation.in" in result.output
    assert "raw bytes" in result.output  # the dead-letter topic keeps original bytes


def test_replicas_above_one_come_with_a_majority_in_sync() -> None:
    for replicas, in_sync in ((3, "2"), (2, "2"), (5, "3")):
        catalog = Catalog.load().with_overrides(replication_factor=replicas)
        assert {s.configs.get("min.insync.replicas") for s in catalog} == {in_sync}
        assert all(s.kafka_configs()["min.insync.replicas"] == in_sync for s in catalog)
    single = Catalog.load().with_overrides(replication_factor=1)
    assert all("min.insync.replicas" not in s.configs for s in single)


def test_more_replicas_than_the_catalog_says_are_no_drift_fewer_are() -> None:
    tool = Catalog.load().get("hermes.tool")
    more = plan(Catalog.load(), {tool.name: existing(tool, replication_factor=3)})
    assert tool.name in more.in_sync and not more.drift
    three = Catalog.load().with_overrides(replication_factor=3)
    fewer = plan(three, {tool.name: existing(three.get(tool.name), replication_factor=1)})
    assert [str(d) for d in fewer.drift] == [
        "hermes.tool: replication_factor is 1, the catalog says 3"
    ]

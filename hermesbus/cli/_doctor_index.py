"""``hermesbus doctor``'s trace index checks: the index answers with the right template and
its stream is mapped by it, and how far the indexer is behind the topics. Read-only, like
the other checks."""

from __future__ import annotations

from hermesbus.compose.backends import trace_index
from hermesbus.compose.settings import Settings
from hermesbus.connectors.elasticsearch import ElasticsearchConfig, ElasticsearchTraceIndex
from hermesbus.connectors.elasticsearch.index import ServerState
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.connectors.kafka.groups import behind
from hermesbus.connectors.sqlite.index import SqliteTraceIndex
from hermesbus.errors import ConfigError, StoreError
from hermesbus.topics import Catalog
from hermesbus.trace.index import INDEXER_GROUP

from ._check import Check

__all__ = ["BEHIND_WARN", "indexing_check", "trace_index_check"]

NAME = "trace index"
BEHIND_WARN = 10_000
"""Records not yet indexed above which ``indexing`` warns (below, it is the usual wake)."""
_SHOWN_TOPICS = 3


async def trace_index_check(settings: Settings) -> list[Check]:
    """The index the settings pick, as ``up`` picks it (``compose.backends``): Elasticsearch
    when ``HERMES_ELASTICSEARCH_URL`` is set, else SQLite. Opened read only."""
    index = trace_index(settings, install=False)
    if isinstance(index, ElasticsearchTraceIndex):
        return [await _elasticsearch(index)]
    if isinstance(index, SqliteTraceIndex):
        return [await _sqlite(index)]
    raise ConfigError(f"doctor cannot check a trace index of type {type(index).__name__}")


async def _elasticsearch(index: ElasticsearchTraceIndex) -> Check:
    config = index.config
    where = f"Elasticsearch at {config.shown_url} ({config.data_stream})"
    try:
        async with index:
            state = await index.state()
    except StoreError as exc:
        fix = "start it, or fix HERMES_ELASTICSEARCH_URL (and HERMES_ELASTICSEARCH_API_KEY)"
        return Check(NAME, "FAIL", str(exc), fix)
    if state.health == "red":
        said = f"{where}: the cluster is red (a primary shard is unassigned)"
        fix = "GET _cluster/allocation/explain says which shard and why"
        return Check(NAME, "FAIL", said, fix)
    template = index.template
    if state.wrong:
        return _wrongly_mapped(config, state, where, template)
    ours = dict(state.templates).get(template)
    if ours is None:
        said = f"{where}: the index template {template} is not installed yet"
        return Check(NAME, "warn", said, "`hermesbus up` installs it before the first write")
    winner, priority = state.templates[0]
    if winner != template:
        said = (
            f"{where}: the index template {winner} (priority {priority}) wins over "
            f"{template} (priority {ours}): its mappings would apply to new indices"
        )
        fix = f"give {winner} a priority below {ours}, or patterns that leave the stream out"
        return Check(NAME, "FAIL", said, fix)
    lifecycle = (
        "lifecycle management on: a new backing index daily, deleted after 30 days"
        if state.lifecycle
        else "no lifecycle management on this server: the stream grows until deleted"
    )
    said = (
        f"{where}: {state.documents:,} envelopes, cluster {state.health}; index template "
        f"{template} (priority {ours}); {lifecycle}"
    )
    return Check(NAME, "ok", said)


def _wrongly_mapped(
    config: ElasticsearchConfig, state: ServerState, where: str, template: str
) -> Check:
    """FAIL naming the backing indices made without the template (Elasticsearch came back
    empty and a write came before the template), with the commands that repair the stream."""
    names = ", ".join(f"{w.name} ({'; '.join(w.differences)})" for w in state.wrong)
    said = (
        f"{where}: backing indices mapped without the index template {template}: {names}. "
        "Searches of the stream fail on them (400 search_phase_execution_exception)"
    )
    return Check(NAME, "FAIL", said, _repair(config, state, template))


def _repair(config: ElasticsearchConfig, state: ServerState, template: str) -> str:
    """The exact commands: roll the stream over (its write index is wrong) once the
    template is back, then delete each wrongly mapped backing index."""
    auth = ' -H "Authorization: ApiKey $HERMES_ELASTICSEARCH_API_KEY"' if config.api_key else ""
    url = config.shown_url.rstrip("/")
    steps = []
    if template not in dict(state.templates):
        steps.append(f"start `hermesbus up` (it puts the template {template} back)")
    if any(w.write_index and w.data_stream for w in state.wrong):
        steps.append(f"curl -X POST{auth} '{url}/{config.data_stream}/_rollover'")
    steps += [f"curl -X DELETE{auth} '{url}/{w.name}'" for w in state.wrong]
    return (
        "; then ".join(steps)
        + " (the deleted indices' documents leave the trace index; their records stay "
        "in Kafka, where `hermesbus trace --from-log` reads them)"
    )


async def _sqlite(index: SqliteTraceIndex) -> Check:
    path, why = index.path, "HERMES_ELASTICSEARCH_URL unset"
    if not path.exists():  # doctor creates nothing
        return Check(NAME, "ok", f"SQLite {path} ({why}); not created yet: `hermesbus up` does")
    try:
        async with index:
            count = await index.count()
    except StoreError as exc:
        return Check(NAME, "FAIL", str(exc), f"move {path} away; `hermesbus up` makes a new one")
    return Check(NAME, "ok", f"SQLite {path} ({why}): {count:,} envelopes")


async def indexing_check(kafka: KafkaConfig, prefix: str) -> list[Check]:
    """The indexer group's committed offsets against the ends of the catalog's topics."""
    names = Catalog.load().with_overrides(prefix=prefix).indexed_names()
    async with KafkaAdmin(kafka) as admin:
        existing = await admin.describe(names)
        if not existing:
            return [Check("indexing", "ok", "no topics yet: nothing to index")]
    partitions = {name: topic.partitions for name, topic in existing.items()}
    lag, committed = await behind(kafka, prefix + INDEXER_GROUP, partitions)
    total = sum(lag.values())
    group = f"the indexer (group {prefix + INDEXER_GROUP})"
    if total == 0:
        said = f"{group} has indexed every record of the {len(existing)} topics"
        return [Check("indexing", "ok", said)]
    by_topic: dict[str, int] = {}
    for tp, waiting in lag.items():
        by_topic[tp.topic] = by_topic.get(tp.topic, 0) + waiting
    worst = sorted(by_topic.items(), key=lambda item: -item[1])[:_SHOWN_TOPICS]
    where = ", ".join(f"{topic} {waiting:,}" for topic, waiting in worst if waiting)
    if not committed:
        said = f"{group} has indexed nothing yet: {total:,} records wait ({where})"
        return [Check("indexing", "warn", said, "`hermesbus up` runs the indexer")]
    said = f"{group} is {total:,} records behind ({where})"
    if total > BEHIND_WARN:
        fix = (
            "is `hermesbus up` running and the index answering? while the index is away, "
            "its log says 'indexer paused'"
        )
        return [Check("indexing", "warn", said, fix)]
    return [Check("indexing", "ok", said)]

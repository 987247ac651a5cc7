"""The ACLs a bus needs on a cluster that enforces them: one principal per component.

What each component may write comes from ``processors.protocol.WRITERS`` (the table every
processor's runtime already checks signatures against), plus, for the four processors,
their own input topic (a failed envelope is re-sent there for its retry) and the
dead-letter topic, and the flow registry for the conversation (a flow's versions are
signed by it). What each reads is the topic its group consumes and the few it reads whole: the
flow registry (every processor), the alerts (the dispatcher, for tools' health; the
rollup's judge), every indexed topic (the indexer), every session-keyed topic and the
rollup's changelog (the diagnostics). Each runs in its own consumer group, named with the
prefix (the tool processor's groups, ``tool`` and ``tool-<name>``, under one prefixed ACL);
in exactly-once mode each also owns the transactional ids under its group's name. The
processors may describe every topic of the bus (their start checks the catalog's topics
are there, as they should be). An app writes only the ingress topic and reads the replies.
Nothing here creates topics or ACLs: an operator's principal does (``topics apply``,
``acls --apply``).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Final

from hermesbus.compose.diagnostics import APP_ID, CHANGELOG, source_topics
from hermesbus.connectors.kafka.acls import Acl
from hermesbus.errors import ConfigError
from hermesbus.processors import protocol, tool
from hermesbus.topics import (
    ALERTS,
    CONVERSATION_IN,
    CONVERSATION_OUT,
    DIAGNOSTICS,
    DLQ,
    FLOWS,
    Catalog,
)
from hermesbus.trace.index import INDEXER_GROUP

__all__ = ["COMPONENTS", "bus_acls", "commands", "principals_of"]

PROCESSORS: Final = (protocol.CONVERSATION, protocol.DISPATCHER, protocol.TOOL, protocol.MEMORY)
INDEXER: Final = "indexer"
COMPONENTS: Final = (*PROCESSORS, INDEXER, protocol.DIAGNOSTICS, protocol.APP)
"""Every principal of a bus, by component."""

_READS: Final[Mapping[str, tuple[str, ...]]] = {
    protocol.CONVERSATION: (CONVERSATION_IN, FLOWS),
    protocol.DISPATCHER: (protocol.DISPATCHER_TOPIC, FLOWS, ALERTS),
    protocol.TOOL: (protocol.TOOL_TOPIC, FLOWS),
    protocol.MEMORY: (protocol.MEMORY_TOPIC, FLOWS),
    protocol.APP: (CONVERSATION_OUT,),
}
_GROUPS: Final[Mapping[str, tuple[tuple[str, bool], ...]]] = {
    protocol.CONVERSATION: ((protocol.CONVERSATION, False),),
    protocol.DISPATCHER: ((protocol.DISPATCHER, False),),
    protocol.TOOL: ((tool.NAME, False), (tool.group_name(""), True)),  # tool-<name>, model's
    protocol.MEMORY: ((protocol.MEMORY, False),),
    INDEXER: ((INDEXER_GROUP, False),),
    protocol.DIAGNOSTICS: ((APP_ID, False),),
}
_EVERY_TOPIC: Final = "hermes."
"""What every topic name of the catalog begins with (after the prefix)."""


def principals_of(given: Mapping[str, str]) -> dict[str, str]:
    """Each component's principal: ``User:<component>`` unless ``given`` names another;
    ConfigError for a component that is not one, or a principal not ``TYPE:NAME``."""
    unknown = sorted(set(given) - set(COMPONENTS))
    if unknown:
        raise ConfigError(
            f"no component {', '.join(unknown)} (components: {', '.join(COMPONENTS)})"
        )
    for component, principal in given.items():
        kind, colon, name = principal.partition(":")
        if not (kind and colon and name):
            raise ConfigError(
                f"{component}={principal}: a principal is TYPE:NAME (User:{name or component})"
            )
    return {c: given.get(c, f"User:{c}") for c in COMPONENTS}


def _writes(catalog: Catalog) -> dict[str, list[str]]:
    writes: dict[str, list[str]] = {c: [] for c in COMPONENTS}
    for topic, writers in protocol.WRITERS.items():
        for identity in writers:
            writes[identity].append(topic)
    writes = {c: list(dict.fromkeys(topics)) for c, topics in writes.items()}
    for processor in PROCESSORS:  # a retry is re-sent to its own input; a dead letter
        writes[processor] += [_READS[processor][0], DLQ]
    writes[protocol.CONVERSATION].append(FLOWS)
    writes[protocol.DIAGNOSTICS].append(CHANGELOG)
    known = set(catalog.names())
    missing = sorted({t for topics in writes.values() for t in topics} - known)
    if missing:  # a table and the catalog that disagree are a bug, not a cluster's problem
        raise ConfigError(f"the writers table names topics the catalog lacks: {missing}")
    return writes


def _reads(catalog: Catalog) -> dict[str, tuple[str, ...]]:
    return {  # every `run` reads the flow registry at its start
        **_READS,
        INDEXER: (*catalog.indexed_names(), FLOWS),
        protocol.DIAGNOSTICS: (*source_topics(catalog), CHANGELOG, ALERTS, DIAGNOSTICS, FLOWS),
    }


def bus_acls(
    prefix: str,
    principals: Mapping[str, str] | None = None,
    *,
    exactly_once: bool = False,
    catalog: Catalog | None = None,
) -> list[Acl]:
    """Every ACL a bus under ``prefix`` needs, sorted by principal (see the module)."""
    catalog = catalog or Catalog.load()
    who = principals_of(principals or {})
    reads, writes = _reads(catalog), _writes(catalog)
    acls: set[Acl] = set()
    for component in COMPONENTS:
        principal = who[component]
        acls |= {Acl(principal, "topic", prefix + t, "Read") for t in reads.get(component, ())}
        acls |= {Acl(principal, "topic", prefix + t, "Write") for t in writes[component]}
        for group, prefixed in _GROUPS.get(component, ()):
            acls.add(Acl(principal, "group", prefix + group, "Read", prefixed=prefixed))
        if component == protocol.DIAGNOSTICS:  # the lag rule reads the processors' groups
            for group, prefixed in (g for p in PROCESSORS for g in _GROUPS[p]):
                acls.add(Acl(principal, "group", prefix + group, "Describe", prefixed=prefixed))
        if component != protocol.APP:  # a component's start checks the bus's topics
            every = prefix + _EVERY_TOPIC
            acls.add(Acl(principal, "topic", every, "Describe", prefixed=True))
            acls.add(Acl(principal, "topic", every, "DescribeConfigs", prefixed=True))
        if exactly_once and component in PROCESSORS:  # ids <group>.<topic>.<partition>
            for group, _ in _GROUPS[component]:
                ids = prefix + group
                acls.add(Acl(principal, "transactional-id", ids, "Write", prefixed=True))
                acls.add(Acl(principal, "transactional-id", ids, "Describe", prefixed=True))
    return sorted(acls)


def commands(acls: Sequence[Acl], bootstrap: str) -> list[str]:
    """``kafka-acls.sh`` command lines adding ``acls``: one per principal, operation and
    kind of resource (literal or prefixed names), naming every resource it covers."""
    grouped: dict[tuple[str, str, bool, str], list[Acl]] = {}
    for acl in acls:
        key = (acl.principal, acl.resource, acl.prefixed, acl.operation)
        grouped.setdefault(key, []).append(acl)
    lines = []
    for (principal, _, prefixed, operation), same in grouped.items():
        words = [
            "kafka-acls.sh --bootstrap-server", bootstrap, "--command-config admin.properties",
            "--add --allow-principal", principal, "--operation", operation,
            *(word for acl in same for word in acl.where()),
        ]  # fmt: skip
        if prefixed:
            words.append("--resource-pattern-type prefixed")
        lines.append(" ".join(shlex.quote(word) if word == principal else word for word in words))
    return lines

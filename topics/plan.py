"""What ``topics apply`` has to do: compare the catalog with the cluster's topics."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hermesbus.connectors.kafka import ExistingTopic
from hermesbus.topics.catalog import SESSION_KEY, Catalog, TopicSpec

__all__ = [
    "Drift",
    "ExistingTopic",
    "TopicPlan",
    "apply_command_line",
    "plan",
    "session_partitions",
    "sized_by_existing",
]


@dataclass(frozen=True, slots=True)
class Drift:
    """One setting of an existing topic that differs from the catalog."""

    topic: str
    setting: str
    wanted: str
    actual: str

    def __str__(self) -> str:
        return f"{self.topic}: {self.setting} is {self.actual}, the catalog says {self.wanted}"


@dataclass(frozen=True, slots=True)
class TopicPlan:
    create: tuple[TopicSpec, ...]
    in_sync: tuple[str, ...]
    drift: tuple[Drift, ...]
    unverified: tuple[str, ...] = field(default=())
    """Existing topics without drift in partitions, whose configs the broker would not describe."""


def plan(catalog: Catalog, existing: Mapping[str, ExistingTopic]) -> TopicPlan:
    create: list[TopicSpec] = []
    drift: list[Drift] = []
    in_sync: list[str] = []
    unverified: list[str] = []
    for spec in catalog:
        actual = existing.get(spec.name)
        if actual is None:
            create.append(spec)
            continue
        found = _drift(spec, actual)
        drift.extend(found)
        if found:
            continue
        (unverified if actual.configs is None else in_sync).append(spec.name)
    return TopicPlan(tuple(create), tuple(in_sync), tuple(drift), tuple(unverified))


def _drift(spec: TopicSpec, actual: ExistingTopic) -> list[Drift]:
    found = []
    if actual.partitions != spec.partitions:
        found.append(Drift(spec.name, "partitions", str(spec.partitions), str(actual.partitions)))
    if actual.replication_factor < spec.replication_factor:  # more replicas: an operator's
        # choice for a replicated cluster (`topics apply --replication-factor 3`), not drift
        found.append(
            Drift(
                spec.name,
                "replication_factor",
                str(spec.replication_factor),
                str(actual.replication_factor),
            )
        )
    if actual.configs is not None:
        for key, wanted in spec.kafka_configs().items():
            value = actual.configs.get(key)
            if value != wanted:
                found.append(Drift(spec.name, key, wanted, "unset" if value is None else value))
    return found


def session_partitions(catalog: Catalog, existing: Mapping[str, ExistingTopic]) -> dict[str, int]:
    """The partition count of the catalog's existing session-keyed topics: one of them
    (``{name: count}``) when they all agree, every one when they differ, none when none
    exists. They must agree: a session's partition number is the same on every topic."""
    counts = {
        spec.name: existing[spec.name].partitions
        for spec in catalog
        if spec.key == SESSION_KEY and spec.name in existing
    }
    if len(set(counts.values())) <= 1:
        return dict(list(counts.items())[:1])
    return counts


def sized_by_existing(
    catalog: Catalog, existing: Mapping[str, ExistingTopic]
) -> tuple[Catalog, dict[str, int]]:
    """``catalog`` with its session topics sized as the existing ones, and their counts
    (:func:`session_partitions`): when they differ, ``catalog`` is returned unchanged."""
    counts = session_partitions(catalog, existing)
    if len(counts) != 1:
        return catalog, counts
    (count,) = counts.values()
    return catalog.with_overrides(partitions=count), counts


def apply_command_line(bootstrap: str | None, prefix: str, partitions: int | None = None) -> str:
    """The ``hermesbus topics apply`` that creates a catalog's missing topics there."""
    options = f" --prefix {prefix}" if prefix else ""
    if partitions is not None:
        options += f" --partitions {partitions}"
    return f"hermesbus topics apply --bootstrap {bootstrap}{options}"

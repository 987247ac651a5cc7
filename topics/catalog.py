"""The topic catalog: load ``catalog.yaml`` into validated, frozen topic specs."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hermesbus.codec.schemaset import SchemaSet
from hermesbus.errors import CatalogError
from hermesbus.schemas import SCHEMAS_DIR

__all__ = ["CATALOG_FILE", "SESSION_KEY", "Catalog", "TopicSpec", "parse_retention"]

CATALOG_FILE = Path(__file__).resolve().parent / "catalog.yaml"
SESSION_KEY = "session_id"
MIN_INSYNC = "min.insync.replicas"
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
FOREVER = -1


def parse_retention(value: object) -> int:
    """``7d`` / ``12h`` / ``forever`` / milliseconds -> Kafka ``retention.ms``."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < FOREVER:
            raise ValueError(f"retention {value}: must be >= 0 ms, or -1 for forever")
        return value
    text = str(value).strip().lower()
    if text in ("forever", "-1"):
        return FOREVER
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"retention {value!r}: use a duration like 90s, 15m, 12h, 7d or forever")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


class TopicSpec(BaseModel):
    """One topic as the catalog wants it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str = ""
    partitions: Annotated[int, Field(ge=1)]
    replication_factor: Annotated[int, Field(ge=1)]
    key: str
    value_schema: str | None
    cleanup_policy: Literal["delete", "compact", "compact,delete"]
    retention_ms: int
    configs: dict[str, str] = Field(default_factory=dict)
    indexed: bool = True
    """Whether the trace indexer reads it (the flow registry's YAML records are no trace)."""

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        if not _TOPIC_NAME.match(name) or name in (".", ".."):
            raise ValueError(f"{name!r} is not a valid Kafka topic name")
        return name

    @field_validator("configs")
    @classmethod
    def _no_shadowing(cls, configs: dict[str, str]) -> dict[str, str]:
        shadowed = sorted(set(configs) & {"cleanup.policy", "retention.ms"})
        if shadowed:
            raise ValueError(
                f"configs may not set {', '.join(shadowed)}: use cleanup_policy and retention"
            )
        return configs

    def kafka_configs(self) -> dict[str, str]:
        """The topic-level configs ``apply`` sets and compares."""
        return {
            "cleanup.policy": self.cleanup_policy,
            "retention.ms": str(self.retention_ms),
            **self.configs,
        }


class Catalog(BaseModel):
    """Every topic of the bus; session-keyed topics share one partition count."""

    model_config = ConfigDict(frozen=True)

    topics: tuple[TopicSpec, ...]

    @classmethod
    def load(cls, path: Path = CATALOG_FILE, schemas_dir: Path = SCHEMAS_DIR) -> Catalog:
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise CatalogError(f"{path}: cannot read the catalog: {exc}") from exc
        catalog = cls.from_mapping(raw, str(path))
        catalog.check_schemas(SchemaSet.from_dir(schemas_dir))
        return catalog

    @classmethod
    def from_mapping(cls, raw: object, origin: str = "catalog") -> Catalog:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("topics"), list):
            raise CatalogError(f"{origin}: expected a mapping with a 'topics' list")
        defaults = raw.get("defaults") or {}
        entries = raw["topics"]
        if not isinstance(defaults, Mapping) or not all(isinstance(e, Mapping) for e in entries):
            raise CatalogError(f"{origin}: 'defaults' and every topic must be mappings")
        try:
            specs = tuple(_spec({**defaults, **entry}) for entry in entries)
        except (ValidationError, ValueError, TypeError) as exc:
            raise CatalogError(f"{origin}: {exc}") from exc
        catalog = cls(topics=specs)
        catalog._check(origin)
        return catalog

    def __iter__(self) -> Iterator[TopicSpec]:  # type: ignore[override]
        return iter(self.topics)

    def names(self) -> list[str]:
        return [t.name for t in self.topics]

    def indexed_names(self) -> list[str]:
        """The topics the trace indexer reads (every one but the flow registry)."""
        return [t.name for t in self.topics if t.indexed]

    def get(self, name: str) -> TopicSpec:
        for spec in self.topics:
            if spec.name == name:
                return spec
        raise CatalogError(f"no topic {name!r} in the catalog")

    def with_overrides(
        self,
        *,
        prefix: str = "",
        partitions: int | None = None,
        replication_factor: int | None = None,
    ) -> Catalog:
        """The same catalog with a name prefix (one per tenant or test) or other sizes. A
        replication factor above 1 comes with ``min.insync.replicas`` at a majority of the
        replicas (2 of 3), unless the topic sets its own: a write the producers' ``acks=all``
        saw acknowledged is then on a majority, and with fewer replicas in sync writes
        wait (the bus pauses) rather than land on one broker alone."""
        changed = []
        for spec in self.topics:
            update: dict[str, Any] = {"name": prefix + spec.name}
            if partitions is not None and spec.key == SESSION_KEY:
                update["partitions"] = partitions
            if replication_factor is not None:
                update["replication_factor"] = replication_factor
                if replication_factor > 1 and MIN_INSYNC not in spec.configs:
                    majority = str(replication_factor // 2 + 1)
                    update["configs"] = {**spec.configs, MIN_INSYNC: majority}
            changed.append(TopicSpec.model_validate({**spec.model_dump(), **update}))
        catalog = Catalog(topics=tuple(changed))
        catalog._check("overrides")
        return catalog

    def check_schemas(self, schemas: SchemaSet) -> None:
        for spec in self.topics:
            if spec.value_schema is not None and spec.value_schema not in schemas:
                raise CatalogError(
                    f"topic {spec.name}: value schema {spec.value_schema} is not in schemas/"
                )

    def _check(self, origin: str) -> None:
        names = self.names()
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise CatalogError(f"{origin}: topics declared twice: {', '.join(duplicates)}")
        counts = {t.partitions for t in self.topics if t.key == SESSION_KEY}
        if len(counts) > 1:
            detail = ", ".join(
                f"{t.name}={t.partitions}" for t in self.topics if t.key == SESSION_KEY
            )
            raise CatalogError(
                f"{origin}: topics keyed by {SESSION_KEY} must share one partition count "
                f"so a session maps to the same partition everywhere ({detail})"
            )


def _spec(entry: dict[str, Any]) -> TopicSpec:
    entry = dict(entry)
    if "retention_ms" in entry:
        raise ValueError(
            f"topic {entry.get('name')}: write 'retention' (e.g. 7d), not retention_ms"
        )
    entry["retention_ms"] = parse_retention(entry.pop("retention", "7d"))
    entry["configs"] = {str(k): str(v) for k, v in (entry.get("configs") or {}).items()}
    return TopicSpec.model_validate(entry)

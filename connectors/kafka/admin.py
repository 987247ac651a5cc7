"""Topic administration over aiokafka: describe what exists, create what is missing."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError

from hermesbus.base.lifecycle import Service
from hermesbus.connectors.kafka.client import kafka_reason, start_or_close
from hermesbus.connectors.kafka.clients import admin_client
from hermesbus.connectors.kafka.config import KafkaConfig
from hermesbus.connectors.kafka.refusals import ACLS_HINT, unauthorized_topics
from hermesbus.errors import BrokerError

__all__ = ["ExistingTopic", "KafkaAdmin", "NewTopicSpec"]

log = logging.getLogger(__name__)

_TOPIC_EXISTS = 36


@dataclass(frozen=True, slots=True)
class ExistingTopic:
    """A topic as the cluster describes it; ``configs`` is None if it cannot say."""

    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str] | None


class NewTopicSpec(Protocol):
    """What creating a topic takes (the catalog's ``TopicSpec`` is one): the connector
    knows Kafka, not the catalog."""

    @property
    def name(self) -> str: ...

    @property
    def partitions(self) -> int: ...

    @property
    def replication_factor(self) -> int: ...

    def kafka_configs(self) -> dict[str, str]: ...


class KafkaAdmin(Service):
    """An async context manager around aiokafka's admin client; start/stop are idempotent."""

    def __init__(self, config: KafkaConfig) -> None:
        self._config = config
        self._client: AIOKafkaAdminClient | None = None

    async def start(self) -> None:
        if self._client is not None:
            return
        client = admin_client(self._config)
        where = f"cannot reach Kafka at {self._config.address}"
        await start_or_close(client.start, client.close, where, self._config)
        self._client = client

    async def stop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            # aiokafka's close swallows a cancellation that comes while it waits for its
            # metadata task (up's watch, cancelled by Ctrl-C then, ran on and up hung
            # until killed): it closes in a task of its own, the caller stays cancellable
            await asyncio.shield(client.close())

    @property
    def client(self) -> AIOKafkaAdminClient:
        if self._client is None:
            raise BrokerError("the admin client is not started")
        return self._client

    async def describe(self, names: Sequence[str]) -> dict[str, ExistingTopic]:
        """The topics among ``names`` that exist, with partitions, replicas and configs."""
        try:
            existing = set(await self.client.list_topics())
            wanted = [n for n in names if n in existing]
            described = await self.client.describe_topics(wanted) if wanted else []
        except KafkaError as exc:
            raise BrokerError(f"cannot describe topics: {kafka_reason(exc)}") from exc
        await self._refuse_hidden([n for n in names if n not in existing])
        configs = await self._configs(wanted)
        result = {}
        for topic in described:
            if topic["error_code"] != 0:  # unknown, or not described now (no leader yet):
                continue  # treated as missing; creating one that exists is not an error
            partitions = topic["partitions"]
            replicas = max((len(p["replicas"]) for p in partitions), default=0)
            result[topic["topic"]] = ExistingTopic(
                topic["topic"], len(partitions), replicas, configs.get(topic["topic"])
            )
        return result

    async def missing(self, names: Sequence[str]) -> list[str]:
        """The topics among ``names`` the cluster does not list (asking creates none)."""
        try:
            existing = set(await self.client.list_topics())
        except KafkaError as exc:
            raise BrokerError(f"cannot list topics: {kafka_reason(exc)}") from exc
        missing = [name for name in names if name not in existing]
        await self._refuse_hidden(missing)
        return missing

    async def _refuse_hidden(self, unlisted: Sequence[str]) -> None:
        """BrokerError naming the principal when the cluster left any of ``unlisted`` out
        because no ACL lets it describe them (a secured cluster says the same of a topic
        that does not exist: both are said)."""
        hidden = await unauthorized_topics(self.client, unlisted)
        if hidden:
            raise BrokerError(
                f"the cluster at {self._config.bootstrap} does not let {self._config.principal}"
                f" use the topics {', '.join(hidden)}: no ACL allows it (or they do not exist:"
                f" is the prefix right?); {ACLS_HINT}"
            )

    async def create(self, specs: Iterable[NewTopicSpec]) -> list[str]:
        """Create ``specs``; a topic that appeared meanwhile is not an error. Returns created."""
        new = [
            NewTopic(s.name, s.partitions, s.replication_factor, topic_configs=s.kafka_configs())
            for s in specs
        ]
        if not new:
            return []
        try:
            response = (await self.client.create_topics(new)).to_object()
        except KafkaError as exc:
            raise BrokerError(f"cannot create topics: {kafka_reason(exc)}") from exc
        created, failed = [], []
        for item in response["topic_errors"]:
            code = item["error_code"]
            if code == 0:
                created.append(item["topic"])
            elif code != _TOPIC_EXISTS:
                failed.append(f"{item['topic']}: error {code} {item.get('error_message') or ''}")
        if failed:
            raise BrokerError("cannot create topics: " + "; ".join(failed))
        return created

    async def _configs(self, names: Sequence[str]) -> dict[str, dict[str, str]]:
        if not names:
            return {}
        resources = [ConfigResource(ConfigResourceType.TOPIC, n) for n in names]
        try:
            responses = await self.client.describe_configs(resources)
        except KafkaError as exc:
            log.warning("broker does not describe topic configs: %s", exc)
            return {}
        return _config_values(r.to_object() for r in responses)


def _config_values(responses: Iterable[dict[str, Any]]) -> dict[str, dict[str, str]]:
    result: dict[str, dict[str, str]] = {}
    for response in responses:
        for resource in response["resources"]:
            if resource["error_code"] != 0:
                continue
            result[resource["resource_name"]] = {
                entry["config_names"]: entry["config_value"]
                for entry in resource["config_entries"]
                if entry["config_value"] is not None
            }
    return result

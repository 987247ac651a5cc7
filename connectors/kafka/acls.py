"""Kafka ACLs: one allow rule (principal, operation, resource) and how the cluster is told.

An :class:`Acl` says what Kafka's own tools say: ``--allow-principal User:dispatcher
--operation Write --topic prod.hermes.tool``; ``prefixed`` names every resource whose name
begins with ``name`` (``--resource-pattern-type prefixed``). :func:`create_acls` sends them
with CreateAcls (which adds an ACL that exists already as a no-op). The codes are the Kafka
protocol's (``ResourceType``, ``PatternType``, ``AclOperation``, ``AclPermissionType``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.admin import CreateAclsRequest

from hermesbus.errors import BrokerError

__all__ = ["Acl", "create_acls"]

Resource = Literal["topic", "group", "transactional-id"]
Operation = Literal["Read", "Write", "Describe", "DescribeConfigs"]

_RESOURCES: dict[str, int] = {"topic": 2, "group": 3, "transactional-id": 5}
_OPERATIONS: dict[str, int] = {"Read": 3, "Write": 4, "Describe": 8, "DescribeConfigs": 10}
_LITERAL, _PREFIXED, _ALLOW = 3, 4, 3


@dataclass(frozen=True, order=True, slots=True)
class Acl:
    """Allow ``principal`` (``User:NAME``) ``operation`` on the resource, from any host."""

    principal: str
    resource: Resource
    name: str
    operation: Operation
    prefixed: bool = False

    @property
    def shown(self) -> str:
        """``Write topic prod.hermes.tool`` (``... prod.hermes.* (prefixed)``)."""
        return f"{self.operation} {self.resource} {self.name}" + (
            " (prefixed)" if self.prefixed else ""
        )

    def where(self) -> list[str]:
        """Its resource as ``kafka-acls.sh`` options: ``--topic NAME``, ``--group NAME``."""
        return [f"--{self.resource}", self.name]


async def create_acls(client: AIOKafkaAdminClient, acls: Sequence[Acl]) -> None:
    """Add ``acls`` to the cluster ``client`` talks to (one CreateAcls each); BrokerError
    naming the first the cluster refused, and why."""
    for acl in acls:
        request = CreateAclsRequest(
            _RESOURCES[acl.resource],
            acl.name,
            _PREFIXED if acl.prefixed else _LITERAL,
            acl.principal,
            "*",
            _OPERATIONS[acl.operation],
            _ALLOW,
        )
        try:
            response: Any = await client._send_request(request)  # aiokafka has no create_acls
        except KafkaError as exc:
            raise BrokerError(f"cannot add the ACL {acl.principal} {acl.shown}: {exc}") from exc
        for code, message in response.creation_responses:
            if code:
                why = message or for_code(code).__name__
                raise BrokerError(f"the cluster refused the ACL {acl.principal} {acl.shown}: {why}")

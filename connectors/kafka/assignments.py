"""A group leader takes only the assignment it gave itself.

The embedded broker (tansu) keeps a group at generation 0 through every rebalance, and
answers a member's SyncGroup with the assignment it stored for that generation: the
first one. A processor that joined while its topic was missing (the broker came back
empty, and ``up`` had not made the topics again yet) was given no partition, and when
the topic was back and it joined again, it computed the new assignment as the group's
leader, sent it, and got the empty one back: it consumed nothing from then on (the
first turn after the broker came back got no reply).

So every aiokafka consumer of this process, when it leads its group, compares what the
broker returns with what it assigned itself; if they differ it leaves the group and
joins again as a new member, whose first SyncGroup tansu answers with the assignment
sent. Apache Kafka returns what the leader sent, so nothing changes there. Installed
when the connector is imported, as :mod:`.client` installs its own.
"""

from __future__ import annotations

import logging
from typing import Any

from aiokafka.consumer.group_coordinator import CoordinatorGroupRebalance, GroupCoordinator
from aiokafka.errors import KafkaError
from aiokafka.protocol.group import LeaveGroupRequest

__all__: list[str] = []

log = logging.getLogger(__name__)

_OWN = "hermes_own_assignment"
"""The coordinator's attribute holding the assignment its member, as leader, gave itself."""


def _install() -> None:
    perform = GroupCoordinator._perform_assignment
    on_join_leader = CoordinatorGroupRebalance._on_join_leader

    async def _perform_assignment(self: Any, response: Any) -> Any:
        assignments = await perform(self, response)
        own = assignments.get(self.member_id)
        if own is not None and not isinstance(own, bytes):
            own = own.encode()
        setattr(self, _OWN, own)
        return assignments

    async def _on_join_leader(self: Any, response: Any) -> Any:
        got = await on_join_leader(self, response)
        coordinator = self._coordinator
        own = getattr(coordinator, _OWN, None)
        setattr(coordinator, _OWN, None)
        if got is None or own is None or bytes(got) == own:
            return got
        log.info(
            "group %s: the broker answered the leader's SyncGroup with another assignment "
            "than it sent (a stale one): joining again as a new member",
            self.group_id,
        )
        try:
            await coordinator._send_req(LeaveGroupRequest(self.group_id, coordinator.member_id))
        except KafkaError as exc:  # its session ends it anyway
            log.debug("group %s: LeaveGroup failed: %s", self.group_id, exc)
        coordinator.reset_generation()
        return None  # aiokafka joins again after its backoff

    GroupCoordinator._perform_assignment = _perform_assignment
    CoordinatorGroupRebalance._on_join_leader = _on_join_leader


_install()

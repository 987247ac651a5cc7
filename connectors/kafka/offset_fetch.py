"""A group's committed offsets are never read as "none" while its coordinator loads them.

From version 2 on, an OffsetFetch response carries the group's own error beside each
partition's, and a coordinator still loading the group's offsets (after the broker that
holds them restarted, or a whole cluster did) says so there, with every partition's offset
at -1 and no partition error. aiokafka reads only the partitions' errors, so it took that
answer for "nothing committed": a consumer joining then started from the earliest record
(what finished was run again), and ``groups.committed`` read an empty group (measured on a
three-node cluster killed and restarted: ``{}`` for about a second, then the offsets).

So the coordinator's requests raise the group's error when an OffsetFetch has one: aiokafka
retries the retriable ones (a loading coordinator, a moved one, after marking it dead), as
it does for a partition's, and raises the rest (a group the principal may not read: its
authorization error, not an empty group). Installed when the connector is imported.
"""

from __future__ import annotations

from typing import Any

from aiokafka import errors
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.protocol.commit import OffsetFetchRequest

__all__: list[str] = []


def _install() -> None:
    send = GroupCoordinator._send_req

    async def _send_req(self: Any, request: Any) -> Any:
        response = await send(self, request)
        code = getattr(response, "error_code", 0) if isinstance(request, OffsetFetchRequest) else 0
        if code:
            error = errors.for_code(code)
            if error in (
                errors.NotCoordinatorForGroupError,
                errors.GroupCoordinatorNotAvailableError,
            ):
                self.coordinator_dead()  # found again before the retry
            if error is errors.GroupAuthorizationFailedError:
                raise error(self.group_id)
            raise error()
        return response

    GroupCoordinator._send_req = _send_req


_install()

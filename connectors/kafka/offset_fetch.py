"""An OffsetFetch's own error is acted on, never read as "nothing committed".

From version 2 on, an OffsetFetch response carries the group's own error beside each
partition's (a coordinator still loading the group's offsets, a moved one, a group the
principal may not read), with every partition's offset at -1 and no partition error.
aiokafka reads only the partitions' errors, so it would take that answer for "nothing
committed": a consumer joining would start from the earliest record, and
``groups.committed`` would read an empty group.

So the coordinator's requests raise the group's error when an OffsetFetch has one: aiokafka
retries the retriable ones (after marking a moved or unavailable coordinator dead), as it
does for a partition's, and raises the rest (an authorization error, not an empty group).
This follows the protocol; the three-node cluster's full restart did not show it (there,
for about a second, Kafka 4.4 answered -1 with no error at all, which no client can tell
from "nothing committed"). Installed when the connector is imported.
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

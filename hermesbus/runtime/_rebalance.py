"""aiokafka's rebalance callbacks, forwarded to a consumer group's owner."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from aiokafka import ConsumerRebalanceListener, TopicPartition

__all__ = ["RebalanceListener"]


class RebalanceListener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Tells ``adopt`` the partitions assigned and awaits ``release`` with those revoked
    before the group rejoins, so in-flight work can finish and commit first."""

    def __init__(
        self,
        adopt: Callable[[Sequence[TopicPartition]], None],
        release: Callable[[Sequence[TopicPartition]], Awaitable[None]],
    ) -> None:
        self._adopt = adopt
        self._release = release

    async def on_partitions_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        await self._release(list(revoked))

    async def on_partitions_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        self._adopt(list(assigned))

"""Which offset of a partition may be committed: the end of the contiguous finished prefix."""

from __future__ import annotations

from collections import deque

__all__ = ["OffsetTracker"]


class OffsetTracker:
    """Offsets handed out in order; ``committable`` never passes an unfinished one."""

    __slots__ = ("_done", "_next", "_pending")

    def __init__(self) -> None:
        self._pending: deque[int] = deque()
        self._done: set[int] = set()
        self._next: int | None = None

    @property
    def next(self) -> int | None:
        """The offset expected next: one past the last handed out (None before the first)."""
        return self._next

    def follows(self, offset: int) -> bool:
        """Whether ``offset`` may come next: not before one already handed out."""
        return self._next is None or offset >= self._next

    def add(self, offset: int) -> None:
        """An offset fetched for processing (offsets arrive in increasing order)."""
        if self._next is not None and offset < self._next:
            raise ValueError(f"offset {offset} arrived after {self._next - 1}")
        self._pending.append(offset)
        self._next = offset + 1

    def finish(self, offset: int) -> None:
        """An offset whose effects are complete."""
        self._done.add(offset)
        pending = self._pending
        while pending and pending[0] in self._done:
            self._done.discard(pending.popleft())

    def committable(self) -> int | None:
        """The offset to commit: the first unfinished one, or one past the last fetched."""
        if self._pending:
            return self._pending[0]
        return self._next

    @property
    def in_flight(self) -> int:
        return len(self._pending)

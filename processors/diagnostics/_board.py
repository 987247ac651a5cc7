"""What ``hermesbus stats`` shows: the closed windows read back, merged per key and window.

The rollup emits each window in parts (one per source partition, and a later part for
records that arrived after it closed); a :class:`Board` keeps one part per id (a re-send
after a crash is the same record) and adds the parts of each key's tumbling windows up,
histograms bucket by bucket. A :class:`Row` is one key over the last windows seen.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hermesbus.base.histogram import LATENCY_BOUNDS_MS, Histogram
from hermesbus.contract.fields import epoch_ms
from hermesbus.contract.payloads import WindowRollup
from hermesbus.processors.diagnostics._rollup import Tally

__all__ = ["Board", "Row", "tally_of"]

_KINDS = ("component", "tool", "state")
"""The order rows are shown in: components, then tools, then flow states."""


def tally_of(body: WindowRollup) -> Tally:
    """A closed window's part as a tally that merges with others of the same key."""
    if tuple(body.latency_bounds_ms) != tuple(LATENCY_BOUNDS_MS):
        raise ValueError("a latency histogram of other buckets than the rollup's")
    counts = {"counts": list(body.latency_counts), "sum": body.latency_sum_ms}
    latency = Histogram.from_dict(counts)
    mean = body.confidence_mean or 0.0
    return Tally(
        count=body.count,
        errors=body.errors,
        retries=body.retries,
        fallbacks=body.fallbacks,
        dead_letters=body.dead_letters,
        refused=body.refused,
        misrouted=body.misrouted,
        latency=latency,
        confidence_sum=mean * body.confidence_n,
        confidence_n=body.confidence_n,
        external_calls=body.external_calls,
        external_latency_sum_ms=body.external_latency_ms * body.external_calls,
    )


@dataclass(frozen=True, slots=True)
class Row:
    """One key over the windows shown: its figures merged, and its count per window."""

    key: str
    tally: Tally
    counts: tuple[int, ...]
    seconds: float
    """How long the windows shown cover (for the rate)."""

    @property
    def kind(self) -> str:
        return self.key.partition(":")[0]

    @property
    def name(self) -> str:
        return self.key.partition(":")[2]

    @property
    def rate(self) -> float:
        """Records a second over the windows shown."""
        return self.tally.count / self.seconds if self.seconds else 0.0


class Board:
    """The tumbling windows read so far, one part per id, merged per key and window."""

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._cells: dict[tuple[str, int], Tally] = {}
        self._sizes: dict[int, int] = {}  # window start -> its size (ms)
        self.parts = 0

    def add(self, message_id: str, body: WindowRollup) -> bool:
        """Take one part; False for a hopping window's or one already taken (same id)."""
        if body.window != "tumbling" or message_id in self._ids:
            return False
        tally = tally_of(body)  # ValueError for a histogram of other buckets: not taken
        self._ids.add(message_id)
        self.parts += 1
        start = epoch_ms(body.start)
        self._sizes[start] = epoch_ms(body.end) - start
        cell = self._cells.setdefault((body.key, start), Tally())
        cell.merge(tally)
        return True

    def starts(self, last: int) -> list[int]:
        """The starts of the ``last`` windows anything was counted in, oldest first. Windows
        are on the records' time, which is an app's clock: a demo that starts its clock in
        2024 has its windows there, beside today's, so the windows with records are shown
        rather than a span of the wall clock."""
        return sorted(self._sizes)[-last:]

    def rows(self, last: int) -> list[Row]:
        """Each key seen in the ``last`` windows: components, tools, then flow states."""
        starts = self.starts(last)
        if not starts:
            return []
        seconds = sum(self._sizes[start] for start in starts) / 1000
        shown = set(starts)
        keys = sorted({key for key, start in self._cells if start in shown}, key=_order)
        return [self._row(key, starts, seconds) for key in keys]

    def _row(self, key: str, starts: Iterable[int], seconds: float) -> Row:
        merged, counts = Tally(), []
        for start in starts:
            cell = self._cells.get((key, start))
            counts.append(cell.count if cell is not None else 0)
            if cell is not None:
                merged.merge(cell)
        return Row(key, merged, tuple(counts), seconds)


def _order(key: str) -> tuple[int, str]:
    kind = key.partition(":")[0]
    return (_KINDS.index(kind) if kind in _KINDS else len(_KINDS), key)

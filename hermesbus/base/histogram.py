"""A latency histogram that merges: fixed bucket bounds, so two of them add up bucket by
bucket, and a percentile is read from the counts, not from a list of samples.

A processor keeps one for its handler's time (served as a Prometheus histogram); the
diagnostics rollup keeps one per window and key, and a window's p50/p95/p99 come from it.
Memory is one integer per bucket, whatever the traffic. A percentile is exact to within
its bucket: it is interpolated linearly inside the bucket it falls in (the bounds below
are about 25-40% apart, so p99 of a 120 ms tail reads between 100 and 150 ms).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Final, Self

__all__ = ["LATENCY_BOUNDS_MS", "Histogram"]

LATENCY_BOUNDS_MS: Final[tuple[float, ...]] = (
    0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750,
    1_000, 1_500, 2_000, 3_000, 5_000, 7_500, 10_000, 15_000, 30_000, 60_000,
)  # fmt: skip
"""Upper bounds (inclusive) of the buckets, in milliseconds; one more bucket takes what is
above the last (Prometheus's ``+Inf``)."""


class Histogram:
    """Counts of observations per bucket (``bounds`` ascending, each an inclusive upper
    bound), with their sum; two with the same bounds merge by adding."""

    __slots__ = ("_bounds", "_counts", "_sum")

    def __init__(self, bounds: Sequence[float] = LATENCY_BOUNDS_MS) -> None:
        if not bounds or any(b <= a for a, b in itertools.pairwise(bounds)):
            raise ValueError("histogram bounds must be a non-empty ascending sequence")
        self._bounds = tuple(float(b) for b in bounds)
        self._counts = [0] * (len(self._bounds) + 1)
        self._sum = 0.0

    @property
    def bounds(self) -> tuple[float, ...]:
        return self._bounds

    @property
    def count(self) -> int:
        return sum(self._counts)

    @property
    def counts(self) -> tuple[int, ...]:
        """The count per bucket: one per bound, then the one past the last bound."""
        return tuple(self._counts)

    @property
    def sum(self) -> float:
        return self._sum

    def observe(self, value: float) -> None:
        """Count one observation. A negative or NaN one counts as 0 (a clock step back); an
        infinite one in the last bucket, adding the last bound to the sum (a figure from
        elsewhere never makes the sum infinite for good)."""
        value = value if value > 0 else 0.0
        if value == math.inf:
            self._counts[-1] += 1
            self._sum += self._bounds[-1]
            return
        self._counts[bisect.bisect_left(self._bounds, value)] += 1
        self._sum += value

    def merge(self, other: Histogram) -> None:
        """Add ``other``'s counts into this one (the same bounds, or ValueError)."""
        if other._bounds != self._bounds:
            raise ValueError("only histograms with the same bounds merge")
        for i, n in enumerate(other._counts):
            self._counts[i] += n
        self._sum += other._sum

    def cumulative(self) -> Iterator[tuple[float, int]]:
        """(upper bound, observations at or below it) per bucket, the last bound ``inf``:
        Prometheus's ``le`` buckets."""
        seen = 0
        for bound, n in zip((*self._bounds, math.inf), self._counts, strict=True):
            seen += n
            yield bound, seen

    def quantile(self, q: float) -> float:
        """The value below which a fraction ``q`` (0..1) of observations falls, interpolated
        inside its bucket; 0.0 with no observation. Past the last bound the last bound is
        said (the histogram knows no more of the tail than that)."""
        if not 0 <= q <= 1:
            raise ValueError(f"quantile {q} is not between 0 and 1")
        total = self.count
        if total == 0:
            return 0.0
        rank = q * total
        below, lower = 0, 0.0
        for bound, n in zip(self._bounds, self._counts, strict=False):
            if n and below + n >= rank:
                return lower + (bound - lower) * max(0.0, rank - below) / n
            below += n
            lower = bound
        return self._bounds[-1]

    def to_dict(self) -> dict[str, object]:
        """The counts and sum, as JSON keeps them (bounds are the caller's to agree on)."""
        return {"counts": list(self._counts), "sum": self._sum}

    @classmethod
    def from_dict(
        cls, data: Mapping[str, object], bounds: Sequence[float] = LATENCY_BOUNDS_MS
    ) -> Self:
        """What :meth:`to_dict` wrote, with the same ``bounds``; ValueError if it does not fit."""
        made = cls(bounds)
        counts, total = data.get("counts"), data.get("sum")
        if not isinstance(counts, list) or len(counts) != len(made._counts):
            raise ValueError(f"a histogram needs {len(made._counts)} counts")
        if not all(isinstance(n, int) and n >= 0 for n in counts):
            raise ValueError("a histogram's counts are non-negative integers")
        if not isinstance(total, int | float):
            raise TypeError("a histogram's sum is a number")
        made._counts, made._sum = list(counts), float(total)
        return made

    __hash__ = None  # type: ignore[assignment]  # it changes: never a set member or key

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Histogram):
            return NotImplemented
        return (self._bounds, self._counts, self._sum) == (other._bounds, other._counts, other._sum)

    def __repr__(self) -> str:
        return f"Histogram(count={self.count}, p50={self.quantile(0.5):.3g}, sum={self._sum:.6g})"

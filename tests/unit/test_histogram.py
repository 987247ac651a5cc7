"""The mergeable latency histogram: percentiles read from bucket counts, merging by adding."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermesbus.base.histogram import LATENCY_BOUNDS_MS, Histogram


def _of(values: list[float]) -> Histogram:
    made = Histogram()
    for value in values:
        made.observe(value)
    return made


def test_an_empty_histogram_says_zero() -> None:
    empty = Histogram()
    assert (empty.count, empty.sum, empty.quantile(0.99)) == (0, 0.0, 0.0)


def test_percentiles_fall_in_the_bucket_of_the_true_value() -> None:
    rng = random.Random(7)
    values = [rng.lognormvariate(3, 1) for _ in range(10_000)]  # ms: median about 20
    made = _of(values)
    ordered = sorted(values)
    for q in (0.5, 0.95, 0.99):
        true = ordered[int(q * len(ordered)) - 1]
        upper = next(b for b in LATENCY_BOUNDS_MS if b >= true)
        lower = max((b for b in LATENCY_BOUNDS_MS if b < true), default=0.0)
        assert lower <= made.quantile(q) <= upper, (q, true, made.quantile(q))
    assert made.count == len(values)
    assert made.sum == pytest.approx(sum(values))


def test_a_value_past_the_last_bound_is_counted_and_said_as_the_last_bound() -> None:
    made = _of([90_000.0, 120_000.0])
    assert list(made.cumulative())[-1] == (math.inf, 2)
    assert list(made.cumulative())[-2] == (LATENCY_BOUNDS_MS[-1], 0)
    assert made.quantile(0.5) == LATENCY_BOUNDS_MS[-1]


def test_a_negative_time_counts_as_zero_and_an_endless_one_never_poisons_the_sum() -> None:
    made = _of([-3.0, math.nan])
    assert (made.count, made.sum, next(made.cumulative())) == (2, 0.0, (0.5, 2))
    made.observe(math.inf)
    assert (made.count, made.sum) == (3, LATENCY_BOUNDS_MS[-1])
    assert list(made.cumulative())[-1] == (math.inf, 3)


@given(
    st.lists(st.floats(0, 100_000, allow_nan=False)),
    st.lists(st.floats(0, 100_000, allow_nan=False)),
)
def test_merging_two_is_observing_both(first: list[float], second: list[float]) -> None:
    merged = _of(first)
    merged.merge(_of(second))
    both = _of(first + second)
    assert list(merged.cumulative()) == list(both.cumulative())
    assert merged.sum == pytest.approx(both.sum)


def test_it_keeps_through_json_and_refuses_what_does_not_fit() -> None:
    made = _of([1.0, 12.0, 400.0])
    assert Histogram.from_dict(made.to_dict()) == made
    with pytest.raises(ValueError, match="counts"):
        Histogram.from_dict({"counts": [1, 2], "sum": 3.0})
    with pytest.raises(ValueError, match="same bounds"):
        made.merge(Histogram((1.0, 2.0)))
    with pytest.raises(ValueError, match="ascending"):
        Histogram((2.0, 1.0))
    with pytest.raises(ValueError, match="between 0 and 1"):
        made.quantile(1.5)

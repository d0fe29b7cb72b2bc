"""The bootstrap intervals that every target line of benchmark v2 rests on."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.pipeline.metrics import spearman
from bench.v2.stats import bootstrap, paired_difference, spearman_rows


def test_interval_of_a_mean_covers_it_and_narrows_with_more_candidates():
    rng = np.random.default_rng(1)
    small, large = rng.normal(1.0, 1.0, 30), rng.normal(1.0, 1.0, 600)
    a = bootstrap(lambda i: float(small[i].mean()), len(small))
    b = bootstrap(lambda i: float(large[i].mean()), len(large))
    assert a.low < a.point < a.high and b.low < b.point < b.high
    assert math.isclose(a.point, small.mean())
    assert (b.high - b.low) < 0.5 * (a.high - a.low)  # width shrinks ~ 1/sqrt(n)
    assert 0.85 < b.low < 1.0 < b.high < 1.15


def test_paired_difference_of_a_method_with_itself_is_exactly_zero():
    rng = np.random.default_rng(2)
    scores, target = rng.normal(size=50), rng.normal(size=50)

    def stat(i):
        return spearman(scores[i], target[i])

    diff = paired_difference(stat, stat, 50)
    assert diff.point == diff.low == diff.high == 0.0
    assert not diff.above_zero


def test_a_clearly_better_ranking_has_its_difference_interval_above_zero():
    rng = np.random.default_rng(3)
    target = rng.normal(size=80)
    good, noisy = target + 0.2 * rng.normal(size=80), target + 3.0 * rng.normal(size=80)
    diff = paired_difference(lambda i: spearman(good[i], target[i]), lambda i: spearman(noisy[i], target[i]), 80)
    assert diff.above_zero and diff.point > 0.3


def test_resamples_where_a_statistic_is_undefined_are_left_out_and_counted():
    flags = np.zeros(40, dtype=bool)
    flags[0] = True  # one positive: about (39/40)^40 = 36 % of resamples draw none (nan there)

    def stat(i):
        return float(flags[i].mean()) if flags[i].any() else math.nan

    result = bootstrap(stat, 40)
    assert 600 < result.undefined < 850
    assert result.low >= 1 / 40 and math.isfinite(result.high)


def test_a_statistic_undefined_on_most_resamples_gets_no_interval():
    result = bootstrap(lambda i: math.nan if i[0] % 4 else 1.0, 40)  # defined on ~a quarter
    assert math.isnan(result.low) and math.isnan(result.high) and result.undefined > 1000


def test_vectorized_spearman_equals_the_scalar_one_on_every_resample():
    rng = np.random.default_rng(4)
    scores, target = rng.normal(size=30), rng.normal(size=30)
    scores[[2, 7]] = np.nan  # nan ranks as the worst score in both
    target[5] = -np.inf
    index = rng.integers(0, 30, size=(50, 30))
    fast = spearman_rows(scores, target)(index)
    slow = [spearman(scores[i], target[i]) for i in index]
    np.testing.assert_allclose(fast, slow, rtol=1e-12)
    both = bootstrap(spearman_rows(scores, target), 30, rows=True)
    one = bootstrap(lambda i: spearman(scores[i], target[i]), 30)
    assert (both.point, both.low, both.high) == pytest.approx((one.point, one.low, one.high))

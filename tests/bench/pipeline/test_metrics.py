"""Rank correlations and pruning figures against scipy and hand-counted tables."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from bench.pipeline import metrics


def test_spearman_and_kendall_agree_with_scipy_on_random_data():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=50), rng.normal(size=50)
    assert metrics.spearman(a, b) == pytest.approx(stats.spearmanr(a, b).statistic, abs=1e-12)
    assert metrics.kendall(a, b) == pytest.approx(stats.kendalltau(a, b).statistic, abs=1e-12)


def test_nan_scores_rank_as_the_worst():
    # nan is treated as -inf: the candidate with nan is ranked below every finite score.
    assert metrics.spearman([math.nan, 1.0, 2.0], [0.0, 1.0, 2.0]) == pytest.approx(1.0)
    assert metrics.spearman([math.nan, 1.0, 2.0], [3.0, 1.0, 2.0]) == pytest.approx(-0.5)


def test_correlation_of_a_constant_is_nan():
    assert math.isnan(metrics.spearman([1, 1, 1], [1, 2, 3]))
    assert math.isnan(metrics.kendall([1, 2, 3], [5, 5, 5]))


@pytest.mark.parametrize(
    ("scores", "bad", "fraction", "expected"),
    [
        ([1, 2, 3, 4, 5, 6, 7, 8], [1, 1, 0, 0, 0, 0, 0, 0], 0.25, (2, 1.0, 1.0)),
        ([1, 2, 3, 4, 5, 6, 7, 8], [0, 1, 0, 0, 0, 0, 0, 1], 0.25, (2, 0.5, 0.5)),
        ([8, 7, 6, 5, 4, 3, 2, 1], [1, 1, 0, 0, 0, 0, 0, 0], 0.25, (2, 0.0, 0.0)),
        ([math.nan, 2, 3, 4], [1, 0, 0, 0], 0.25, (1, 1.0, 1.0)),
    ],
)
def test_pruning_the_worst_quarter(scores, bad, fraction, expected):
    got = metrics.prune_fraction(scores, bad, fraction)
    assert (got.flagged, got.precision, got.recall) == expected


def test_pruning_fraction_is_validated():
    with pytest.raises(ValueError, match="fraction"):
        metrics.prune_fraction([1, 2], [0, 1], 0.0)


def test_precision_at_recall_takes_the_best_threshold_reaching_the_recall():
    # Pruning k = 1..4 of [1, 2, 3, 4] with bad = [1, 0, 1, 0]: recall 0.5, 0.5, 1, 1;
    # precision 1, 0.5, 0.67, 0.5 -> best precision with recall >= 0.8 is 2/3.
    assert metrics.precision_at_recall([1, 2, 3, 4], [1, 0, 1, 0], 0.8) == pytest.approx(2 / 3)
    assert metrics.precision_at_recall([1, 2, 3, 4], [1, 0, 1, 0], 0.5) == pytest.approx(1.0)


def test_precision_at_recall_never_splits_candidates_of_one_score_whatever_their_order():
    """No threshold prunes half of a tie: the curve followed the input's order, so a proxy whose
    tied scores happened to come bad first (NAS-Bench-201's cells, listed lowest accuracy first)
    was credited with a precision no cut reaches."""
    scores, bad = [0, 0, 0, 0, 1, 2], [1, 1, 0, 0, 0, 1]
    for order in ([0, 1, 2, 3, 4, 5], [2, 3, 0, 1, 4, 5]):
        got = metrics.precision_at_recall([scores[i] for i in order], [bad[i] for i in order], 0.6)
        assert got == pytest.approx(2 / 4)  # the whole tie, or nothing of it; 2 / 2 was credited
    precision, recall = metrics.precision_recall_curve(scores, bad)
    assert np.isnan(precision[:3]).all() and np.isnan(recall[:3]).all()
    assert precision[3:] == pytest.approx([2 / 4, 2 / 5, 3 / 6])


def test_verdict_flags_figures():
    got = metrics.flags_figures([True, True, False, False], [True, False, True, False])
    assert (got.flagged, got.precision, got.recall) == (2, 0.5, 0.5)
    assert math.isnan(metrics.flags_figures([False, False], [True, False]).precision)


def test_tuning_comparison_counts_wins_and_excludes_double_divergence():
    got = metrics.tuning_comparison([0.1, 0.5, math.inf, math.inf], [0.2, 0.25, 1.0, math.inf])
    assert got["n"] == 3
    assert got["better"] == pytest.approx(1 / 3)
    assert got["median_improvement"] == pytest.approx(-0.25)


def test_the_ranking_curve_fits_on_the_drawn_candidates_and_scores_the_others():
    rng = np.random.default_rng(0)
    meco = rng.normal(size=60)
    values = meco + 0.05 * rng.normal(size=60)
    features = [{"meco": float(m), "naswot": float(rng.normal())} for m in meco]
    curve = metrics.ranking_curve(features, values, 20, 5, np.random.default_rng(1), {"noise": rng.normal(size=60)})
    assert len(curve["fit"]) == len(curve["noise"]) == 5
    assert min(curve["fit"]) > 0.95  # the fit found MeCo's term on 20 and ranks the other 40
    assert max(abs(v) for v in curve["noise"]) < 0.5
    # the baselines are read on the same held-out candidates as the fit: the values themselves rank at 1
    assert (
        metrics.ranking_curve(features, values, 20, 3, np.random.default_rng(1), {"truth": values})["truth"]
        == [pytest.approx(1.0)] * 3
    )

"""The ranking a search fits on the candidates it has trained (nas.ranking)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nas import ranking
from nas.ranking import Ranker, rank_among_trained, ranking_features
from nas.testing import sample_report


def _rows(n: int, seed: int = 0) -> tuple[list[dict[str, float | None]], np.ndarray]:
    """Candidates whose objective rises with MeCo's term and falls with the probe's loss."""
    rng = np.random.default_rng(seed)
    meco, probe = rng.normal(size=n), rng.normal(size=n)
    noise = rng.normal(size=n) * 0.1
    rows: list[dict[str, float | None]] = [
        {"meco": float(m), "probe_loss": float(p), "naswot": float(rng.normal())}
        for m, p in zip(meco, probe, strict=True)
    ]
    return rows, 2.0 * meco - 1.0 * probe + noise


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def test_a_fit_on_trained_candidates_ranks_unseen_ones_and_orients_each_feature():
    rows, values = _rows(60)
    ranker = Ranker.fit(rows[:30], values[:30])
    assert _spearman(ranker.predict(rows[30:]), values[30:]) > 0.9
    weights = dict(zip(ranker.names, ranker.weights, strict=True))
    # oriented higher-is-better: the probe's loss is a penalty, so its oriented weight is positive too
    assert weights["meco"] > weights["probe_loss"] > 0.3 > abs(weights["naswot"])


def test_a_minimized_objective_ranks_the_other_way():
    rows, values = _rows(40)
    up = Ranker.fit(rows, values).predict(rows)
    down = Ranker.fit(rows, -values, higher_is_better=False).predict(rows)
    np.testing.assert_allclose(up, down)
    assert _spearman(up, values) > 0.9


def test_leave_one_out_shrinks_a_fit_of_noise_and_not_a_fit_of_a_clean_signal():
    rng = np.random.default_rng(1)
    noise = [{"meco": float(a), "probe_loss": float(b)} for a, b in rng.normal(size=(12, 2))]
    assert Ranker.fit(noise, rng.normal(size=12)).ridge == max(ranking.RIDGES)
    rows, values = _rows(200)
    assert Ranker.fit(rows, values).ridge == min(ranking.RIDGES)


def test_the_shipped_score_is_not_shrunk_where_the_other_features_are():
    """A fit on a few candidates starts from the calibrated score: with noise beside it, the ridge
    shrinks the noise and leaves the score's weight at its least-squares size."""
    rng = np.random.default_rng(3)
    score = rng.normal(size=12)
    rows = [{"score": float(s), "meco": float(m), "naswot": float(w)} for s, m, w in rng.normal(size=(12, 3))]
    for row, s in zip(rows, score, strict=True):
        row["score"] = float(s)
    values = score + 0.3 * rng.normal(size=12)
    ranker = Ranker.fit(rows, values)
    weights = dict(zip(ranker.names, ranker.weights, strict=True))
    assert ranker.ridge >= 1.0  # shrinks the others hard...
    assert abs(weights["meco"]) < 0.1 and abs(weights["naswot"]) < 0.1
    assert weights["score"] > 0.8  # ...and not the score (shrunk by 1.0 as well, it would be about 0.45)


def test_the_leave_one_out_error_equals_refitting_without_each_candidate():
    """Each refit has its own intercept (the fit's centred features leave it implicit), and the
    target's mean is off zero, as tied objective values leave the normal scores'."""
    rng = np.random.default_rng(2)
    z, target = rng.normal(size=(15, 3)), rng.normal(size=15) + 0.7
    z -= z.mean(axis=0)  # the fit standardizes its features on the trained rows
    design = np.column_stack([np.ones(15), z])
    for ridge in (0.01, 1.0, np.array([0.0, 1.0, 1.0])):  # one for all, or per feature (0: not shrunk)
        penalty = np.zeros((4, 4))  # the intercept is never shrunk
        penalty[1:, 1:] = 15 * np.diag(np.broadcast_to(ridge, (3,)))  # the whole sample's, held fixed
        refits = []
        for i in range(15):
            kept = np.arange(15) != i
            w = np.linalg.solve(design[kept].T @ design[kept] + penalty, design[kept].T @ target[kept])
            refits.append((target[i] - design[i] @ w) ** 2)
        assert ranking._loo_error(z, target, ridge) == pytest.approx(np.mean(refits), rel=1e-6)


def test_a_missing_value_counts_as_the_worst_the_trained_candidates_showed():
    rows, values = _rows(30)
    ranker = Ranker.fit(rows, values)
    worst_meco = min(r["meco"] for r in rows)
    base = {"probe_loss": 0.0, "naswot": 0.0}
    missing, worst = ranker.predict([base | {"meco": None}, base | {"meco": worst_meco}])
    assert missing == pytest.approx(worst)


def test_features_measured_on_too_few_candidates_or_constant_are_left_out():
    rows, values = _rows(10)
    rows = [r | {"non_finite": 0.0, "log_params": None} for r in rows]
    rows[0]["log_params"] = 5.0  # one candidate only
    ranker = Ranker.fit(rows, values)
    assert set(ranker.names) == {"meco", "probe_loss", "naswot"}


@pytest.mark.parametrize(("n", "values"), [(2, [0.1, 0.2]), (3, [0.1, math.nan, 0.3])])
def test_a_fit_needs_three_candidates_with_finite_values(n, values):
    rows, _ = _rows(n)
    with pytest.raises(ValueError, match="at least 3"):
        Ranker.fit(rows, values)


def test_a_candidate_predicted_below_the_quantile_is_not_kept():
    rows, values = _rows(40)
    best = {"meco": 3.0, "probe_loss": -3.0, "naswot": 0.0}
    worst = {"meco": -3.0, "probe_loss": 3.0, "naswot": 0.0}
    keep = rank_among_trained(rows, values, best, below=0.5)
    drop = rank_among_trained(rows, values, worst, below=0.5)
    assert keep.keep and keep.quantile == 1.0
    assert not drop.keep and drop.quantile == 0.0
    with pytest.raises(ValueError, match="below"):
        rank_among_trained(rows, values, best, below=1.0)


def test_ranking_features_read_the_reports_components_expressivity_and_size():
    report = sample_report(components={"probe_loss": 0.4, "jacobian_log": math.inf})
    features = ranking_features(report, parameters=10_000)
    assert features["log_params"] == pytest.approx(4.0)
    assert features["probe_loss"] == 0.4
    assert features["jacobian_log"] is None and features["kernel_log_range"] is None  # not finite, not measured
    assert features["naswot"] is None and features["meco"] is None  # options.expressivity was off
    assert features["score"] == report.score
    assert ranking_features(report)["log_params"] is None


@pytest.mark.parametrize("degenerate", ["constant features", "equal values"])
def test_a_fit_that_cannot_tell_the_trained_candidates_apart_keeps_every_candidate(degenerate):
    """Otherwise every prediction ties at the 0.5 quantile, and a rank_below above it would skip
    every candidate from then on, so that no trial completes to change the fit."""
    rows, values = _rows(12)
    if degenerate == "constant features":
        rows = [{"meco": 1.0, "probe_loss": 0.5} for _ in rows]
    else:
        values = np.full(12, 0.8)
    decision = rank_among_trained(rows, values, rows[0], below=0.9)
    assert decision.keep and decision.quantile == 0.5
    informed = rank_among_trained(*_rows(12), {"meco": 0.0, "probe_loss": 0.0, "naswot": 0.0}, below=0.9)
    assert not informed.keep  # the same rank_below skips once the fit ranks


def test_a_candidate_equal_to_a_trained_one_ties_with_it():
    rows, values = _rows(9)
    decision = rank_among_trained(rows, values, dict(rows[4]), below=0.5)
    ranker = Ranker.fit(rows, values)
    theirs = ranker.predict(rows)
    expected = (np.sum(theirs < theirs[4]) + 0.5) / 9  # itself counts half, whatever the last bits
    assert decision.quantile == pytest.approx(expected)


def test_the_quantile_among_values_counts_ties_within_float_noise_half():
    theirs = np.array([1.0, 2.0, 3.0, 3.0 * (1 + 1e-12), 4.0])
    assert ranking.quantile_among(theirs, 3.0) == pytest.approx((2 + 0.5 * 2) / 5)
    assert ranking.quantile_among(theirs, 2.5) == pytest.approx(2 / 5)
    assert ranking.quantile_among(theirs, 0.0) == 0.0 and ranking.quantile_among(theirs, 9.0) == 1.0

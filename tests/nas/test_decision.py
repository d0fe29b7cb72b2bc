"""The one keep/prune rule (nas.decision) that the gate and the pruner both decide by."""

from __future__ import annotations

import math

import pytest

from nas.decision import MIN_INFEASIBLE, conditioning_margin, keeps, keeps_figures
from nas.options import Thresholds
from nas.report import ConditioningReport
from nas.testing import sample_report


def report(score: float | None, verdict: str, cut: float | None = None) -> ConditioningReport:
    return sample_report(score=score, verdict=verdict, thresholds=Thresholds(score=cut))


@pytest.mark.parametrize(
    ("score", "verdict", "cut", "threshold", "expected"),
    [
        (1.0, "keep", -3.0, None, -4.0),
        (-5.0, "prune", -3.0, None, 2.0),
        # The engine also prunes on hard failures: the margin follows the verdict.
        (0.0, "prune", -3.0, None, MIN_INFEASIBLE),
        (-4.0, "keep", -3.0, None, 0.0),
        # The gate's own threshold is the whole rule.
        (0.5, "prune", -3.0, 1.0, 0.5),
        # No stated threshold: 0 when kept, graded by the score when pruned.
        (-2.0, "prune", None, None, 3.0),
        (2.0, "keep", None, None, 0.0),
        # NaN policy: a missing or NaN score is infinitely infeasible.
        (None, "prune", None, None, math.inf),
        (math.nan, "keep", None, 0.0, math.inf),
    ],
)
def test_the_conditioning_margin_is_graded_and_follows_the_decision(
    score: float | None, verdict: str, cut: float | None, threshold: float | None, expected: float
) -> None:
    assert conditioning_margin(report(score, verdict, cut), threshold) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("score", "verdict", "threshold", "kept"),
    [
        (1.0, "keep", None, True),
        (1.0, "prune", None, False),
        (1.0, "prune", 0.5, True),
        (0.4, "keep", 0.5, False),
        (0.5, "prune", 0.5, True),  # at the threshold is kept
        (None, "keep", None, False),
        (math.nan, "keep", -1e9, False),
        (-math.inf, "keep", None, False),
    ],
)
def test_a_candidate_is_kept_by_threshold_else_by_verdict_and_never_without_a_score(
    score: float | None, verdict: str, threshold: float | None, kept: bool
) -> None:
    assert keeps(report(score, verdict), threshold) is kept
    assert keeps_figures(score, verdict, threshold) is kept


@pytest.mark.parametrize("verdict", ["failed:prune", "failed:raise", None])
def test_a_verdict_other_than_keep_is_not_kept(verdict: str | None) -> None:
    assert keeps_figures(1.0, verdict) is False


def test_the_margin_of_a_calibrated_verdict_is_measured_from_the_cut_it_used() -> None:
    """No thresholds.score (the calibrated cut applied): the margin is prune_below - score."""
    pruned = sample_report(score=-0.5, verdict="prune", prune_below=-0.4)
    kept = sample_report(score=-0.1, verdict="keep", prune_below=-0.4)
    assert conditioning_margin(pruned) == pytest.approx(0.1)
    assert conditioning_margin(kept) == pytest.approx(-0.3)


def test_a_report_states_its_cut_once_as_prune_below() -> None:
    body = sample_report(score=-0.5, verdict="prune", prune_below=-0.4).model_dump(mode="json")
    assert body["prune_below"] == -0.4 and "score" not in body["thresholds"]
    assert ConditioningReport.model_validate(body).prune_below == -0.4

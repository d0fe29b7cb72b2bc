"""The keep/prune rule, in one place: what the gate and the pruner both decide by.

A candidate is kept when its score is at or above ``threshold`` (the caller's own cut), or,
without one, when the engine's verdict is ``keep``. A missing or NaN score is never kept: the
engine could not measure the candidate. The *conditioning margin* says how far a candidate
is from the keep side, as an Optuna constraint value (feasible when <= 0).
"""

from __future__ import annotations

import math

from nas.report import ConditioningReport

__all__ = ["MIN_INFEASIBLE", "conditioning_margin", "decision_margin", "keeps", "keeps_figures", "report_threshold"]

# The smallest constraint value of a candidate pruned by the engine's verdict (> 0: infeasible).
MIN_INFEASIBLE = 1e-3


def keeps_figures(score: float | None, verdict: str | None, threshold: float | None = None) -> bool:
    """The rule on the two figures a trial records (its score and the engine's verdict)."""
    if score is None or math.isnan(score) or score == -math.inf:
        return False
    if threshold is not None:
        return score >= threshold
    return verdict == "keep"


def keeps(report: ConditioningReport, threshold: float | None = None) -> bool:
    """Whether to train the candidate: ``score >= threshold`` when a threshold is given, else
    the engine's verdict; a missing score is never kept."""
    return keeps_figures(report.score, report.verdict, threshold)


def report_threshold(report: ConditioningReport) -> float | None:
    """The cut the report's verdict used (``prune_below``: the caller's ``thresholds.score``, else
    the calibrated cut); a report without one falls back to ``thresholds.score``."""
    return report.prune_below if report.prune_below is not None else report.thresholds.score


def conditioning_margin(report: ConditioningReport, threshold: float | None = None) -> float:
    """How far a candidate is from the keep side: ``threshold - score`` (<= 0 is kept).

    With an explicit ``threshold`` (the gate's own) that is the whole rule. Without one, the
    engine's verdict decides and the margin follows it: ``report_threshold - score``, clipped to
    ``<= 0`` for a kept candidate and to ``>= MIN_INFEASIBLE`` for a pruned one (the engine also
    prunes on hard failures whatever the score). Without any stated threshold a pruned
    candidate gets ``1 + max(0, -score)``. A missing score is ``+inf`` (infinitely infeasible),
    since NaN is no constraint value.
    """
    score = report.score
    if score is None or math.isnan(score):
        return math.inf
    if threshold is not None:
        return threshold - score
    stated = report_threshold(report)
    keep = report.verdict == "keep"
    if stated is None:
        return 0.0 if keep else 1.0 + max(0.0, -score)
    margin = stated - score
    return min(margin, 0.0) if keep else max(margin, MIN_INFEASIBLE)


def decision_margin(prune: bool, score: float | None, cut: float | None) -> float:
    """The constraint value of a decision taken on the recorded figures (the pruner's): ``cut -
    score`` where a cut decided (a threshold, a percentile's), else what the verdict says (0 kept,
    ``1 + max(0, -score)`` pruned, as :func:`conditioning_margin` without a stated threshold); a
    missing or NaN score is ``+inf``. Always on the side of the decision, so that a trial the
    rule trained is feasible."""
    if score is None or math.isnan(score):
        return math.inf
    if cut is None:
        return 1.0 + max(0.0, -score) if prune else 0.0
    return max(cut - score, MIN_INFEASIBLE) if prune else min(cut - score, 0.0)

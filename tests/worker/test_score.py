"""The conditioning score: a table of components and the verdict they must give."""

from __future__ import annotations

import math

import pytest

from worker.options import Thresholds
from worker.score import WEIGHTS, score

PERFECT = {"jacobian_log": 0.0, "kernel_log_range": 0.0, "output_log_ratio": 0.0, "non_finite": 0.0}


@pytest.mark.parametrize(
    ("components", "verdict"),
    [
        (PERFECT, "keep"),
        ({**PERFECT, "jacobian_log": 0.35}, "keep"),  # at its threshold: penalty 1
        ({**PERFECT, "jacobian_log": math.log(14.2)}, "prune"),  # J stuck at 14.2
        ({**PERFECT, "output_log_ratio": math.log(8.0)}, "prune"),  # output 8x off target
        ({**PERFECT, "non_finite": 1.0}, "prune"),  # hard failure, whatever else
        ({**PERFECT, "jacobian_log": math.nan}, "prune"),  # NaN counts as non-finite
        ({**PERFECT, "gamma_log_spread": None, "kappa_d_log": None}, "keep"),  # not measured
    ],
)
def test_verdict_table(components: dict[str, float | None], verdict: str) -> None:
    assert score(components, Thresholds()).verdict == verdict


def test_perfect_conditioning_scores_zero_and_worse_scores_lower() -> None:
    """Higher is better: 0 when nothing is off, strictly decreasing in every component."""
    assert score(PERFECT, Thresholds()).score == 0.0
    for name in ("jacobian_log", "kernel_log_range", "output_log_ratio"):
        values = [score({**PERFECT, name: v}, Thresholds()).score for v in (0.1, 0.5, 2.0)]
        assert values[0] > values[1] > values[2]


def test_penalty_is_the_weight_at_the_threshold() -> None:
    """Calibration contract: a component at its threshold costs exactly its weight."""
    t = Thresholds()
    result = score({**PERFECT, "jacobian_log": t.jacobian_log}, t)
    assert result.penalties["jacobian_log"] == pytest.approx(WEIGHTS["jacobian_log"])
    assert result.over == ["jacobian_log"]


def test_thresholds_are_settings() -> None:
    """A stricter score threshold prunes what the default keeps."""
    components = {**PERFECT, "jacobian_log": 0.5}
    assert score(components, Thresholds()).verdict == "keep"
    assert score(components, Thresholds(score=-1.0)).verdict == "prune"


def test_unknown_component_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown score components"):
        score({"jacobian": 0.0}, Thresholds())

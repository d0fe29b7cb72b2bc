"""The conditioning score: its calibrated form, missing and non-finite components, the verdict.

The weights come from the benchmark's fit (``worker/engine/score_weights.json``), so these tests
prove the form's behaviour for whatever weights ship, never particular numbers.
"""

from __future__ import annotations

import json
import math
from typing import cast

import pytest

from nas.options import Thresholds
from worker.engine import _calibration
from worker.engine.score import CUTS, FILLS, FIT_FILLS, FIT_WEIGHTS, NON_FINITE_PENALTY, WEIGHTS, score

T = Thresholds()
THRESHOLD = {
    "jacobian_log": T.jacobian_log,
    "kernel_log_range": T.kernel_log_ratio,
    "output_log_ratio": T.output_log_ratio,
    "gamma_log_spread": T.gamma_log_spread,
    "hessian_log_spread": T.hessian_log_spread,
    "kappa_d_log": T.kappa_d_log,
    "probe_loss": T.probe_loss,
}
# the probe measured: the default fit
PERFECT = cast(dict[str, float | None], {name: 0.0 for name in WEIGHTS} | {"non_finite": 0.0})
WEIGHTED = [name for name, w in WEIGHTS.items() if w > 0]
BUT_PROBE = [name for name in THRESHOLD if name != "probe_loss"]


def _beyond_cut(name: str) -> float:
    """A value of ``name`` whose penalty alone exceeds the default fit's cut by 1."""
    return THRESHOLD[name] * math.expm1((abs(CUTS["with_probe"]) + 1.0) / WEIGHTS[name])


def test_the_shipped_calibration_is_consistent_with_the_thresholds() -> None:
    """The weights were fitted with the default t_c; the default cuts are the fitted ones, and
    a perfectly conditioned candidate (every component 0) is kept."""
    shipped = _calibration.load()
    assert shipped["thresholds"] == pytest.approx(THRESHOLD)
    assert T.score is None  # the verdict uses the cut of the fit that scores the candidate
    assert CUTS == {"with_probe": shipped["prune_below"], "without_probe": shipped["without_probe"]["prune_below"]}
    assert all(cut < 0 for cut in CUTS.values())
    for fit, weights in FIT_WEIGHTS.items():
        assert any(w > 0 for w in weights.values()), f"a calibration that weighs nothing cannot rank ({fit})"
    assert FIT_WEIGHTS["without_probe"]["probe_loss"] == 0.0


def test_perfect_conditioning_scores_zero_and_is_kept() -> None:
    result = score(PERFECT, T)
    assert result.score == 0.0
    assert result.verdict == "keep" and result.over == []


@pytest.mark.parametrize("name", list(THRESHOLD))
def test_the_score_never_rises_as_a_component_grows(name: str) -> None:
    values = [score({**PERFECT, name: v}, T).score for v in (0.0, 0.1, 0.5, 2.0, 50.0)]
    assert values == sorted(values, reverse=True)
    if WEIGHTS[name] > 0:
        assert len(set(values)) == len(values)  # strictly decreasing when it has a weight


@pytest.mark.parametrize("name", list(THRESHOLD))
def test_a_component_at_its_threshold_costs_its_weight_times_ln2(name: str) -> None:
    result = score({**PERFECT, name: THRESHOLD[name]}, T)
    assert result.penalties[name] == pytest.approx(WEIGHTS[name] * math.log(2.0), rel=1e-12)
    assert result.over == [name]  # named in the reasons even with weight 0: a true diagnosis


REALISTIC = 1e4  # a component 10,000 times its threshold: as far as a real network goes


@pytest.mark.parametrize("name", WEIGHTED)
def test_a_component_prunes_on_its_own_only_if_its_weight_lets_it_at_a_realistic_value(name: str) -> None:
    """Whether one component alone can prune is a property of the shipped calibration: with weight
    w it needs log1p(c / t_c) > (|cut| + 1) / w. A component that would need more than 10,000 times
    its threshold never decides a verdict alone (today gamma_log_spread and kappa_d_log, with
    weights near 0.01: they would need e^70 and beyond), and the test says so instead of feeding
    it such a value; the others prune on their own at a realistic one."""
    needed = _beyond_cut(name)
    if needed <= REALISTIC * THRESHOLD[name]:
        result = score({**PERFECT, name: needed}, T)
        assert result.verdict == "prune" and result.over[0] == name
    else:
        assert score({**PERFECT, name: REALISTIC * THRESHOLD[name]}, T).verdict == "keep"


def test_the_probe_alone_can_prune_at_a_realistic_value() -> None:
    assert _beyond_cut("probe_loss") <= REALISTIC * THRESHOLD["probe_loss"]


@pytest.mark.parametrize("name", BUT_PROBE)
def test_a_missing_component_costs_its_calibrated_mean_penalty_not_zero(name: str) -> None:
    """A diagnostic skipped under the budget is neither rewarded nor punished: it costs what
    the component costs at the fill value (the training half's mean of log1p(c / t_c))."""
    at_fill = THRESHOLD[name] * math.expm1(FILLS[name])
    missing = score({**PERFECT, name: None}, T)
    assert missing.score == pytest.approx(score({**PERFECT, name: at_fill}, T).score, abs=1e-12)
    assert missing.penalties[name] == pytest.approx(WEIGHTS[name] * FILLS[name], abs=1e-12)
    assert name not in missing.over
    left_out = {k: v for k, v in PERFECT.items() if k != name}
    assert score(left_out, T).score == missing.score


def test_without_the_probe_the_fit_of_the_other_components_scores_with_its_own_cut() -> None:
    """A report whose probe did not run is scored by the calibration fitted without it: its
    weights, its fills for skipped diagnostics, and its cut; the probe costs nothing."""
    alone = {**PERFECT, "probe_loss": None}
    assert score(alone, T).fit == "without_probe" and score(PERFECT, T).fit == "with_probe"
    assert score(alone, T).cut == CUTS["without_probe"] and score(PERFECT, T).cut == CUTS["with_probe"]
    name = max(BUT_PROBE, key=lambda n: FIT_WEIGHTS["without_probe"][n])
    result = score({**alone, name: THRESHOLD[name]}, T)
    assert result.penalties[name] == pytest.approx(FIT_WEIGHTS["without_probe"][name] * math.log(2.0), rel=1e-12)
    assert result.penalties["probe_loss"] == 0.0
    skipped = score({**alone, name: None}, T)
    assert skipped.penalties[name] == pytest.approx(
        FIT_WEIGHTS["without_probe"][name] * FIT_FILLS["without_probe"][name]
    )
    assert score({**alone, name: THRESHOLD[name]}, Thresholds(score=0.0)).cut == 0.0  # a set cut overrides both


@pytest.mark.parametrize(
    "components",
    [
        {**PERFECT, "non_finite": 1.0},  # hard failure
        {**PERFECT, "jacobian_log": math.nan},  # NaN counts as non-finite
        {**PERFECT, "kappa_d_log": math.inf},
    ],
)
def test_non_finite_is_a_hard_prune_below_every_finite_score(components: dict) -> None:
    result = score(components, Thresholds(score=-1e6))
    assert result.verdict == "prune"
    assert result.components["non_finite"] == 1.0
    assert result.over[0] == "non_finite"
    assert result.score <= -NON_FINITE_PENALTY
    assert all(v is None or math.isfinite(v) for v in result.components.values())


def test_the_cut_is_a_setting() -> None:
    """Prune exactly when the score is below ``thresholds.score``."""
    name = WEIGHTED[0]
    s = score({**PERFECT, name: THRESHOLD[name]}, T).score
    assert score({**PERFECT, name: THRESHOLD[name]}, Thresholds(score=s + 1e-9)).verdict == "prune"
    assert score({**PERFECT, name: THRESHOLD[name]}, Thresholds(score=s - 1e-9)).verdict == "keep"


def test_a_larger_component_threshold_makes_the_same_value_cheaper() -> None:
    name = WEIGHTED[0]
    field = "kernel_log_ratio" if name == "kernel_log_range" else name
    loose = Thresholds(**{field: 2 * THRESHOLD[name]})
    assert score({**PERFECT, name: 1.0}, loose).score > score({**PERFECT, name: 1.0}, T).score


@pytest.mark.parametrize("name", list(THRESHOLD))
def test_a_subnormal_threshold_gives_a_finite_score_not_a_nan_that_no_cut_prunes(name: str) -> None:
    """|c| / 1e-320 overflows to infinity; unbounded, a zero weight times its infinite log is NaN,
    and NaN < cut is false: the candidate was kept with no score. Capped, the component costs at
    most its weight times log1p of the largest float (709.8)."""
    field = "kernel_log_ratio" if name == "kernel_log_range" else name
    tiny = Thresholds(**{field: 1e-320})
    result = score({**PERFECT, name: 0.35}, tiny)
    assert math.isfinite(result.score)
    assert result.score == pytest.approx(-WEIGHTS[name] * math.log1p(1.7976931348623157e308))
    assert result.verdict == ("prune" if -WEIGHTS[name] * 709.8 < CUTS["with_probe"] else "keep")
    assert name in result.over


def test_unknown_component_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown score components"):
        score({"jacobian": 0.0}, T)


def _file(**changes: object) -> str:
    data = _calibration.load() | changes
    return json.dumps(data)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_file(weights={"jacobian_log": 1.0}), "must name"),
        (_file(weights=dict.fromkeys(_calibration.COMPONENTS, 0.0) | {"jacobian_log": -1.0}), "finite and >= 0"),
        (_file(fill=dict.fromkeys(_calibration.COMPONENTS, math.nan)), "finite and >= 0"),
        (_file(prune_below=None), "prune_below"),
        (_file(without_probe=None), "without_probe"),
        (
            _file(
                without_probe=_calibration.load()["without_probe"]
                | {"weights": dict.fromkeys(_calibration.COMPONENTS, 0.5)}
            ),
            "without_probe.weights.probe_loss' must be 0",
        ),
    ],
)
def test_a_malformed_calibration_file_is_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _calibration.load(text)

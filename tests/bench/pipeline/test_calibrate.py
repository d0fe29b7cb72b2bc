"""The calibration fit: split, features, missing components, the NNLS recovering known weights,
and agreement with the engine's shipped form."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import cast

import numpy as np
import pytest

from bench.pipeline import calibrate


def test_split_alternates_within_each_family():
    train, held = calibrate.split({"a": ["a-2", "a-0", "a-1"], "b": ["b-0", "b-1"]})
    assert train == ["a-0", "a-2", "b-0"]
    assert held == ["a-1", "b-1"]


def test_features_mark_missing_as_nan_and_cap_non_finite():
    row = calibrate.features({"x": 1.0, "y": None, "z": math.inf}, {"x": 0.5}, ["x", "y", "z"])
    assert row[0] == pytest.approx(math.log1p(2.0))
    assert math.isnan(row[1]) and row[2] == 50.0


def test_a_missing_feature_is_filled_with_the_mean_of_the_measured_ones():
    rows = [np.array([1.0, 2.0]), np.array([3.0, math.nan]), np.array([5.0, 4.0])]
    model = calibrate.fit(rows, [0.1, 0.2, 0.3], [False, False, True], ["a", "b"])
    assert model["fill"] == pytest.approx({"a": 3.0, "b": 3.0})
    assert calibrate.apply(model, np.array([0.0, math.nan]), ["a", "b"]) == pytest.approx(
        calibrate.apply(model, np.array([0.0, 3.0]), ["a", "b"])
    )
    zero = calibrate.fit(rows, [0.1, 0.2, 0.3], [False, False, True], ["a", "b"], fill="zero")
    assert zero["fill"] == {"a": 0.0, "b": 0.0}


def test_fit_recovers_non_negative_weights_and_keeps_negative_ones_at_zero():
    rng = np.random.default_rng(0)
    rows = [rng.uniform(0, 1, size=3) for _ in range(200)]
    true = np.array([0.5, 0.0, 0.2])
    targets = [0.1 + float(r @ true) for r in rows]
    bad = [t > 0.5 for t in targets]
    model = calibrate.fit(rows, targets, bad, ["a", "b", "c"])
    assert model["weights"]["a"] == pytest.approx(0.5, abs=1e-9)
    assert model["weights"]["b"] == pytest.approx(0.0, abs=1e-9)
    assert model["weights"]["c"] == pytest.approx(0.2, abs=1e-9)
    assert model["intercept"] == pytest.approx(0.1, abs=1e-9)


@pytest.mark.parametrize("rule", calibrate.CUT_RULES)
def test_a_separable_training_split_is_cut_between_its_classes(rule: str):
    # Features grow with badness: the three worst rows are the untrainable ones.
    rows = [np.array([v]) for v in (0.0, 0.1, 0.2, 0.9, 1.0, 1.1)]
    targets = [0.1, 0.1, 0.1, 1.0, 1.0, 1.0]
    model = calibrate.fit(rows, targets, [False, False, False, True, True, True], ["a"], cut_rule=rule)
    scores = [calibrate.apply(model, r, ["a"]) for r in rows]
    pruned = [s < model["prune_below"] for s in scores]
    assert pruned == [False, False, False, True, True, True]


def test_the_logistic_cut_is_where_untrainable_becomes_more_likely_than_not():
    """Labels drawn from P(untrainable | s) = 1 / (1 + exp(8 (s + 0.5))): the cut is -0.5,
    recovered within 0.05 from 4000 candidates (the logistic MLE's standard error there is
    about 0.01); hard failures (score -100 and below) do not move it."""
    rng = np.random.default_rng(0)
    s = rng.uniform(-1.5, 0.5, size=4000)
    bad = rng.uniform(size=s.size) < 1.0 / (1.0 + np.exp(8.0 * (s + 0.5)))
    cut = calibrate.prune_cut(s, bad, "logistic")
    assert cut == pytest.approx(-0.5, abs=0.05)
    with_failures = calibrate.prune_cut(
        np.concatenate([s, [-100.0, -101.0]]), np.concatenate([bad, [True, False]]), "logistic"
    )
    assert with_failures == pytest.approx(cut, abs=1e-6)
    with pytest.raises(ValueError, match="cut_rule must be one of"):
        calibrate.prune_cut(s, bad, "median")


def test_the_recall_rule_cuts_above_a_tie_it_means_to_prune_not_at_it():
    """The cut was the tied score itself, and the engine prunes below it: neither was flagged."""
    cut = calibrate.prune_cut(np.array([0.0, 0.0, 1.0, 2.0]), [True, True, False, False], "recall", 0.5)
    assert cut == pytest.approx(0.5)
    assert [s < cut for s in (0.0, 0.0, 1.0, 2.0)] == [True, True, False, False]


def test_the_recall_rule_orders_a_nan_score_as_the_curve_does_worst_first():
    """The curve ranks a NaN score worst; the cut sorted it last, so pruning "the lowest one"
    cut between 0.5 and 0.6 and pruned a candidate that trains, not the NaN one."""
    scores = np.array([0.5, np.nan, 0.6, 0.7])
    cut = calibrate.prune_cut(scores, [False, True, False, False], "recall", 0.8)
    assert cut == pytest.approx(0.5)
    assert [s < cut for s in (0.5, 0.6, 0.7)] == [False, False, False]


def test_the_recall_rule_cuts_at_the_best_precision_reaching_the_target_recall():
    scores = np.array([-3.0, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0])
    bad = [True, True, False, True, True, False, False, True, False, False]
    cut = calibrate.prune_cut(scores, bad, "recall")
    # recall 0.8 needs the 5 lowest (4 of 5 untrainable): precision 0.8, the best reaching it
    assert cut == pytest.approx(-0.25)


def _row(i: int, comps: dict, family: str = "f") -> dict:
    bad = comps.get("jacobian_log") is not None and comps["jacobian_log"] > 1.0
    loss = 0.1 + 0.3 * math.log1p((comps.get("jacobian_log") or 0.0) / 0.35)
    return {
        "id": f"{family}-{i:03d}",
        "family": family,
        "components": comps,
        "component_thresholds": {
            "jacobian_log": 0.35,
            "kernel_log_range": 2.0,
            "output_log_ratio": 0.7,
            "gamma_log_spread": 2.0,
            "hessian_log_spread": 2.0,
            "kappa_d_log": 2.3,
            "probe_loss": 1.0,
        },
        "norm_loss": 1.0,
        "untrainable": True,
        "tuned_norm_loss": loss,
        "tuned_untrainable": bad,
    }


def _synthetic(n: int = 60) -> list[dict]:
    rng = np.random.default_rng(1)
    rows = []
    for i in range(n):
        comps = cast(
            dict[str, float | None],
            {name: float(rng.uniform(0, 3)) for name in calibrate.COMPONENTS} | {"non_finite": 0.0},
        )
        if i % 3 == 0:
            comps["hessian_log_spread"] = None  # skipped under the budget
        rows.append(_row(i, comps, family="ab"[i % 2]))
    return rows


def test_fit_rows_weighs_the_component_that_drives_ground_truth_b_and_keeps_the_split():
    rows = _synthetic()
    model = calibrate.fit_rows(rows, "B")
    assert max(model["weights"], key=model["weights"].get) == "jacobian_log"
    assert model["weights"]["jacobian_log"] == pytest.approx(0.3, rel=1e-6)
    assert not set(model["train_ids"]) & set(model["heldout_ids"])
    assert len(model["train_ids"]) + len(model["heldout_ids"]) == len(rows)
    # Ground truth A is uninformative here (every row untrainable from the spec's init).
    assert calibrate.fit_rows(rows, "A")["weights"]["jacobian_log"] == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError, match="truth must be one of"):
        calibrate.fit_rows(rows, "C")


def test_the_fit_scores_rows_exactly_as_the_engine_scores_components():
    """The form bench.pipeline.calibrate fits is the form worker.engine.score ships: the same components give
    the same score, missing and non-finite ones included (an independent implementation)."""
    from nas.options import Thresholds
    from worker.engine import _calibration
    from worker.engine.score import score

    shipped = _calibration.load()
    rows = _synthetic(12)
    rows[0]["components"]["kappa_d_log"] = None
    rows[1]["components"] |= {"jacobian_log": None, "non_finite": 1.0}
    for r in rows:
        expected = score(r["components"], Thresholds()).score
        assert calibrate.score_row(shipped, r) == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_same_fit_compares_weights_fills_thresholds_and_cut_of_both_fits():
    model, alone = calibrate.fit_shipped(_synthetic(), "B")
    fresh = model | {"without_probe": alone}
    shipped = calibrate.shipped_file(model, alone, "x")
    assert calibrate.same_fit(shipped, fresh)
    assert alone["weights"]["probe_loss"] == 0.0
    moved = shipped | {"prune_below": model["prune_below"] - 0.01}
    assert not calibrate.same_fit(moved, fresh)
    moved_alone = shipped | {"without_probe": shipped["without_probe"] | {"prune_below": alone["prune_below"] - 0.01}}
    assert not calibrate.same_fit(moved_alone, fresh)
    assert not calibrate.same_fit({}, fresh)


def test_write_engine_weights_is_the_writer_of_the_file_the_engine_loads(tmp_path):
    """The one writer of worker/engine/score_weights.json: it writes by default the file the
    engine ships, what it writes loads in the engine and matches the fresh fit as ``--check``
    compares it, and a fit the engine would refuse is not written."""
    from worker.engine import _calibration

    assert calibrate.WEIGHTS_FILE.is_file()
    assert calibrate.write_engine_weights.__defaults__ == (calibrate.WEIGHTS_FILE,)
    model, alone = calibrate.fit_shipped(_synthetic(), "B")
    fresh = calibrate.shipped_file(model, alone, "x")
    path = calibrate.write_engine_weights(fresh, tmp_path / "score_weights.json")
    assert path == tmp_path / "score_weights.json"
    written = json.loads(path.read_text())
    assert _calibration.load(path.read_text()) == written
    assert calibrate.same_fit(written, model | {"without_probe": alone})
    with pytest.raises(ValueError, match="must name"):
        calibrate.write_engine_weights(fresh | {"weights": {}}, tmp_path / "bad.json")
    assert not (tmp_path / "bad.json").exists()


def test_the_command_writes_through_write_engine_weights_and_check_compares(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m bench.pipeline.calibrate`` then ``--check``: the file written matches a fresh
    fit (exit 0), and a moved cut does not (exit 1)."""
    from bench.pipeline import rows as rows_module

    monkeypatch.setattr(rows_module, "collect", lambda *_args: _synthetic())
    written: list = []
    original = calibrate.write_engine_weights
    monkeypatch.setattr(
        calibrate,
        "write_engine_weights",
        lambda fit, path: written.append(path) or original(fit, path),  # type: ignore[func-returns-value]
    )
    target = tmp_path / "weights.json"
    assert calibrate.main(["--out", str(tmp_path), "--weights", str(target)]) == 0
    assert written == [target]
    assert calibrate.main(["--out", str(tmp_path), "--weights", str(target), "--check"]) == 0
    data = json.loads(target.read_text())
    target.write_text(json.dumps(data | {"prune_below": data["prune_below"] - 0.01}))
    assert calibrate.main(["--out", str(tmp_path), "--weights", str(target), "--check"]) == 1

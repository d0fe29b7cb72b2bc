"""The Gaussian-path comparison scores each path's own score and verdict against ground truth B."""

from __future__ import annotations

import pytest

from bench.ablations.gaussian_path import summarize


def _row(cid: str, loss: float, untrainable: bool, real: tuple[float, str], gaussian: tuple[float, str]) -> dict:
    return {
        "id": cid,
        "tuned_norm_loss": loss,
        "tuned_untrainable": untrainable,
        "preflight": real[0],
        "verdict": real[1],
        "gaussian_score": gaussian[0],
        "gaussian_verdict": gaussian[1],
    }


def test_each_path_is_measured_with_its_own_verdict_on_each_half():
    rows = [
        _row("a", 0.1, False, (-0.1, "keep"), (-0.2, "keep")),
        _row("b", 0.2, False, (-0.2, "keep"), (-0.9, "prune")),  # the Gaussian path flags a trainable one
        _row("c", 0.9, True, (-0.9, "prune"), (-0.8, "prune")),
        _row("d", 0.8, True, (-0.8, "prune"), (-0.1, "keep")),  # and misses an untrainable one
    ]
    out = summarize(rows, heldout={"a", "b"})
    real, gaussian = out["all"]["real batch"], out["all"]["gaussian"]
    assert (real["precision"], real["recall"], real["flagged"]) == (1.0, 1.0, 2)
    assert (gaussian["precision"], gaussian["recall"], gaussian["flagged"]) == (0.5, 0.5, 2)
    assert real["spearman"] == pytest.approx(1.0)
    assert gaussian["spearman"] < real["spearman"]
    assert out["held-out"]["gaussian"]["n"] == 2 and out["held-out"]["gaussian"]["untrainable"] == 0

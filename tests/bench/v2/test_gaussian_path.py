"""The default path's verdict on the test set: the swap that measures it against each truth."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.pipeline.candidates import Candidate
from bench.v2.analysis import Row
from bench.v2.gaussian_path import _swapped


def _row() -> Row:
    candidate = Candidate(id="x", family="mlp", dataset="digits", spec={})
    row = Row(candidate, "test", preflight={"verdict": "keep", "score": 0.1})
    row.runs = {("sgd", "tuned"): [{"run": "tuned"}], ("sgd", "spec"): [{"run": "spec"}], ("adamw", "spec"): []}
    return row


def test_the_gaussian_verdict_is_measured_against_the_chosen_init_s_runs() -> None:
    swapped = _swapped(_row(), {"verdict": "prune"}, "spec")
    assert swapped.preflight == {"verdict": "prune"}
    assert swapped.runs[("sgd", "tuned")] == [{"run": "spec"}] and swapped.runs[("adamw", "tuned")] == []


def test_the_labelled_verdict_stays_as_cached() -> None:
    row = _row()
    swapped = _swapped(row, None, "tuned")
    assert swapped.preflight is row.preflight and swapped.runs[("sgd", "tuned")] == [{"run": "tuned"}]


def test_a_cached_default_path_report_is_rescored_by_the_shipped_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refit of the score changes no cached report: its score and verdict are recomputed from its
    components, so a stale stored score (here one no fit would give) is never compared with the cut."""
    import bench.v2.gaussian_path as gaussian_path
    from bench.pipeline.run import write_json
    from nas.options import Thresholds
    from worker.engine.score import score

    components: dict[str, float | None] = {"probe_loss": 0.99, "non_finite": 0.0}
    write_json(tmp_path / "c.json", {"score": 123.0, "verdict": "keep", "components": components})
    monkeypatch.setattr(gaussian_path, "OUT", tmp_path)
    cached = gaussian_path._cached("c")
    expected = score(components, Thresholds())
    assert cached["score"] == expected.score != 123.0
    assert cached["verdict"] == expected.verdict

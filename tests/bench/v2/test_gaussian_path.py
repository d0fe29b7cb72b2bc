"""The default path's verdict on the test set: the swap that measures it against each truth."""

from __future__ import annotations

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

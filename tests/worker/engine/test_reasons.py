"""The report's reasons: the verdict's cause first, every pruned candidate with one, and what the
engine did (rather than found) apart, in ``notes``."""

from __future__ import annotations

from nas.testing import well_conditioned_mlp
from worker.engine import condition


def test_a_candidate_pruned_by_the_cut_alone_names_the_cut_and_its_costliest_component_first() -> None:
    report = condition(well_conditioned_mlp(), options={"thresholds": {"score": 0.0}})  # every score is below 0
    assert report.verdict == "prune"
    assert report.reasons, "a pruned candidate has at least one reason"
    first = report.reasons[0]
    assert first.startswith(f"score {report.score:.3g} is below the cut 0")
    assert "mostly from probe_loss: the trainability probe kept" in first  # the shipped score is the probe's


def test_a_component_over_its_threshold_comes_before_the_tuning_status() -> None:
    # a probe threshold so low that the probe is over it; AutoInit given no steps stops short
    report = condition(well_conditioned_mlp(), options={"steps": 0, "thresholds": {"probe_loss": 1e-6}})
    assert report.reasons[0].startswith("the trainability probe kept")
    status = [i for i, r in enumerate(report.reasons) if r.startswith("tuning ")]
    assert status and status[0] > 0


def test_housekeeping_goes_to_the_notes_not_the_reasons() -> None:
    report = condition(
        well_conditioned_mlp(), options={"diagnostics": True, "budget_steps": 14.0, "hessian_iterations": 3}
    )
    assert any("Hessian figures" in note for note in report.notes)
    assert not any("Hessian figures" in reason for reason in report.reasons)

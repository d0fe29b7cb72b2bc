"""The report's reasons: the verdict's cause first, every pruned candidate with one, and what the
engine did (rather than found) apart, in ``notes``."""

from __future__ import annotations

import math

import pytest

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


def _two_blocks(middle: dict[str, object], *, spec_format: str = "1.0") -> dict[str, object]:
    return {
        "format": spec_format,
        "input_shape": [3, 6, 6],
        "blocks": [
            {"layers": [{"type": "conv2d", "out": 4, "kernel": 3, "padding": 1}, {"type": "relu"}]},
            {"layers": [middle]},
            {"layers": [{"type": "flatten"}, {"type": "linear", "out": 3}]},
        ],
    }


ZERO_CELL = {
    "type": "cell",
    "nodes": 3,
    "edges": [{"from": a, "to": b, "op": [{"type": "zero"}]} for a, b in ((0, 1), (0, 2), (1, 2))],
}


@pytest.mark.parametrize(
    "spec",
    [
        _two_blocks(ZERO_CELL, spec_format="1.1"),
        _two_blocks({"type": "scale", "factor": 0}),
        _two_blocks({"type": "residual", "alpha": 0, "beta": 0, "body": [{"type": "relu"}]}),
    ],
    ids=["nas-bench-201-none-cell", "scale-of-zero", "residual-alpha-beta-zero"],
)
def test_a_network_whose_output_is_zero_is_pruned_for_that_not_for_non_finite_values(spec: dict[str, object]) -> None:
    """NAS-Bench-201's dead cells (every path through a `none` op) were pruned with "non-finite values
    in the forward pass": the zero output's log ratio is infinite, but nothing was non-finite."""
    report = condition(spec, options={"diagnostics": False})
    assert report.verdict == "prune"
    assert report.reasons[0].startswith("the network's output is zero for every input, from the output of blocks[1] on")
    assert not any("non-finite" in reason for reason in report.reasons)


def test_a_network_whose_output_no_longer_depends_on_its_input_is_pruned_for_that() -> None:
    """NAS-Bench-201's own dead cell, in its macro skeleton: the signal is zero after the cell, but
    the head's bias makes the output a non-zero constant, which read "non-finite values"."""
    from nas.space import nasbench201_spec

    spec = nasbench201_spec(["none"] * 6, channels=4, cells_per_stage=1, input_shape=(3, 8, 8))
    report = condition(spec, options={"diagnostics": False})
    assert report.verdict == "prune"
    assert report.reasons[0].startswith(
        "the network's output does not depend on its input: the Jacobian of blocks[1] is zero"
    ), report.reasons
    assert not any("non-finite" in reason for reason in report.reasons)


def test_a_forward_pass_that_overflowed_is_still_called_non_finite() -> None:
    from types import SimpleNamespace

    import torch

    from worker.engine.reasons import _non_finite_reason

    overflowed = SimpleNamespace(
        after=SimpleNamespace(k=torch.tensor([1.0, 4.0, math.inf, math.nan]), apjn=torch.tensor([1.0, 0.0, math.nan]))
    )
    assert _non_finite_reason(overflowed) == "non-finite values in the forward pass or the diagnostics"  # type: ignore[arg-type]
    zero = SimpleNamespace(after=SimpleNamespace(k=torch.tensor([1.0, 4.0, 0.0, 0.0])))
    assert "from the output of blocks[1] on" in _non_finite_reason(zero)  # type: ignore[arg-type]

"""worker.engine.pipeline end to end: the report contract, data handling, devices, block cuts."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from nas import build_model
from nas.examples import EXAMPLE_CNN, EXAMPLE_MLP
from worker.engine import ConditioningReport, ConditionOptions, condition
from worker.engine.jacobian import block_jacobians

FAST = {"hessian_iterations": 3, "batch_size": 32, "diagnostics": True, "budget_steps": 40.0}
LEAN = {**FAST, "diagnostics": False}
TOP_LEVEL = {
    "score",
    "verdict",
    "reasons",
    "scales",
    "blocks",
    "layers",
    "tuning",
    "components",
    "environment",
    "spec_hash",
}


@pytest.fixture(scope="module")
def cnn_report() -> ConditioningReport:
    return condition(EXAMPLE_CNN, options=FAST)


def test_report_keeps_the_contract_fields_and_is_plain_json(cnn_report: ConditioningReport) -> None:
    """docs/contracts.md: the top-level names the service and the NAS clients rely on; the
    JSON has no NaN (non-finite figures are null)."""
    data = json.loads(cnn_report.model_dump_json(), parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert TOP_LEVEL <= set(data)
    assert data["verdict"] in ("keep", "prune")
    assert set(data["blocks"][0]) >= {"index", "apjn_before", "apjn_after", "k_before", "k_after"}
    assert set(data["layers"][0]) >= {
        "name",
        "fan_in",
        "fan_out",
        "gamma",
        "nu",
        "hessian_top_eigenvalue",
        "kappa_d",
    }
    assert set(data["tuning"]) >= {
        "steps",
        "converged",
        "status",
        "loss_curve",
        "seconds",
        "device",
    }
    assert data["environment"]["versions"]["torch"] == torch.__version__
    assert ConditioningReport.model_validate_json(cnn_report.model_dump_json()) == cnn_report


def test_scales_rebuild_the_conditioned_model(cnn_report: ConditioningReport) -> None:
    """``nas.build_model(spec, scales=report.scales)`` takes the scales as they are and gives
    the tuned network: its hidden blocks measure within 25 % of their targets, its output
    std within a factor 2 of the report's options.output_std (the number "auto" resolved to)."""
    model = build_model(EXAMPLE_CNN, scales=cnn_report.scales, seed=0)
    x = torch.randn(32, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    model.train()
    profile = block_jacobians(model, x, 8, torch.Generator().manual_seed(1))
    targets = torch.tensor([b.apjn_target for b in cnn_report.blocks], dtype=torch.float64)
    ratio = profile.apjn[:-1] / targets[:-1]
    assert torch.all((ratio > 0.75) & (ratio < 1.25)), ratio
    out_std = math.sqrt(profile.k[-1].item())
    target = cnn_report.options.head_std
    assert target is not None and target / 2 < out_std < target * 2


def _root_mean_square_output(spec: dict[str, Any], report: ConditioningReport, x: torch.Tensor) -> float:
    model = report.build_model(spec).train()
    with torch.no_grad():
        return float(model(x).pow(2).mean().sqrt())


def test_output_std_auto_puts_the_head_at_1_with_batchnorm_and_at_0_5_without() -> None:
    """Claim (docs/conditioning.md section 8, "The head's std"): by default the head's output std
    target is 1.0 for a network with a BatchNorm layer and 0.5 for one without; the report's options
    name the number applied, the tuned network's output is at it, and a number given is used as given."""

    def mlp(norm: bool) -> dict[str, Any]:
        hidden = [{"type": "linear", "out": 32}] + ([{"type": "batchnorm"}] if norm else []) + [{"type": "relu"}]
        return {
            "input_shape": [16],
            "blocks": [{"layers": hidden}, {"layers": hidden}, {"layers": [{"type": "linear", "out": 4}]}],
        }

    x = torch.randn(64, 16, generator=torch.Generator().manual_seed(0))
    for norm, expected in ((False, 0.5), (True, 1.0)):
        spec = mlp(norm)
        report = condition(spec, data=x, options={"probe_steps": 0})
        assert report.options.output_std == expected
        assert expected / 1.3 < _root_mean_square_output(spec, report, x) < expected * 1.3
        given = condition(spec, data=x, options={"probe_steps": 0, "output_std": 0.25})
        assert given.options.output_std == 0.25
        assert 0.25 / 1.3 < _root_mean_square_output(spec, given, x) < 0.25 * 1.3
    layer_norm = {
        "input_shape": [16],
        "blocks": [
            {"layers": [{"type": "linear", "out": 32}, {"type": "layernorm"}, {"type": "relu"}]},
            {"layers": [{"type": "linear", "out": 4}]},
        ],
    }
    # the rule was measured on BatchNorm networks only: a LayerNorm network keeps 0.5
    assert condition(layer_norm, data=x, options={"probe_steps": 0}).options.output_std == 0.5
    with pytest.raises(ValueError, match="auto"):
        _ = ConditionOptions().head_std


def test_the_same_seed_gives_the_same_report() -> None:
    """Reproducible up to floating-point summation order (threaded CPU kernels may change the
    last bits): every scale and the score agree to 1e-9 relative."""
    a = condition(EXAMPLE_MLP, options=LEAN)
    b = condition(EXAMPLE_MLP, options=LEAN)
    assert a.scales.keys() == b.scales.keys()
    assert a.scales == pytest.approx(b.scales, rel=1e-9)
    assert a.score == pytest.approx(b.score, rel=1e-9, abs=1e-12)


def test_float_targets_of_shape_n_give_the_report_of_shape_n_by_1_for_a_single_output() -> None:
    """One float target per sample, given as [N], is the [N, 1] output's shape: every
    diagnostic and the probe score it as such (worker.engine._moments.task_loss reshapes rather than
    broadcasting to [N, N], which gave other figures without an error)."""
    spec = {
        "input_shape": [16],
        "blocks": [
            {"layers": [{"type": "linear", "out": 32}, {"type": "relu"}]},
            {"layers": [{"type": "linear", "out": 1}]},
        ],
    }
    x = torch.randn(32, 16, generator=torch.Generator().manual_seed(0))
    flat = condition(spec, data={"x": x, "y": x[:, 0] * 2.0}, options=FAST)
    column = condition(spec, data={"x": x, "y": x[:, :1] * 2.0}, options=FAST)
    assert not [r for r in flat.reasons + flat.notes if "failed" in r], flat.notes
    assert {"scaling", "hessian"} <= set(flat.environment.diagnostics)
    measured = {k: v for k, v in column.components.items() if v is not None}
    assert measured.keys() >= {"gamma_log_spread", "probe_loss"}
    assert {k: flat.components[k] for k in measured} == pytest.approx(measured, rel=1e-9)


def test_non_finite_data_is_a_value_error_not_a_prune() -> None:
    """One NaN in the batch used to prune the candidate at score -100: in a search, every candidate,
    for a fault of the data. The docstring promised a ValueError; the service's upload refuses it too."""
    x = np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32)
    x[3, 5] = np.nan
    with pytest.raises(ValueError, match="'x' holds NaN or infinite values"):
        condition(EXAMPLE_MLP, data=x, options=LEAN)


def test_a_network_without_parameters_is_a_spec_error_at_blocks_not_a_torch_error() -> None:
    """It failed inside the probe's backward pass with torch's "element 0 of tensors does not
    require grad"; the service and the CLI refused it first, the Python entry point did not."""
    from nas import SpecError

    relu = {"input_shape": [16], "blocks": [{"layers": [{"type": "relu"}]}]}
    with pytest.raises(SpecError, match="no parameters") as caught:
        condition(relu, options=LEAN)
    assert [issue.path for issue in caught.value.issues] == ["blocks"]


def test_options_are_validated() -> None:
    with pytest.raises(ValidationError):
        ConditionOptions.model_validate({"loss": "cubic"})
    with pytest.raises(ValidationError):
        ConditionOptions.model_validate({"device": "tpu"})
    with pytest.raises(ValidationError):
        ConditionOptions.model_validate({"stepz": 3})
    with pytest.raises(ValidationError, match="less than or equal to 4611686018427387904"):
        ConditionOptions.model_validate({"seed": 2**70})  # torch's generators take < 2**64: refuse it here
    bad: object
    for bad in ("bogus", 0.0, -1.0):
        with pytest.raises(ValidationError, match="output_std"):
            ConditionOptions.model_validate({"output_std": bad})
    assert ConditionOptions.model_validate({"output_std": "auto"}).output_std == "auto"
    assert ConditionOptions.model_validate({"output_std": None}).head_std is None
    for field, bad in (("probe_lrs", [0.1, 1e308]), ("probe_lower_lr", 101.0)):  # 1e308 overflowed the probe
        with pytest.raises(ValidationError, match="less than or equal to 100"):
            ConditionOptions.model_validate({field: bad})
    assert ConditionOptions.model_validate({"probe_lrs": [100.0]}).probe_lrs == (100.0,)


def _cut(spec: dict[str, Any], cut: int) -> dict[str, Any]:
    layers = [layer for block in spec["blocks"] for layer in block["layers"]]
    bounds = {0: [2, 4], 1: [3, 5]}[cut]
    pieces = [layers[: bounds[0]], layers[bounds[0] : bounds[1]], layers[bounds[1] :]]
    return {**spec, "blocks": [{"layers": p} for p in pieces]}


GAP_CNN: dict[str, Any] = {
    "input_shape": [3, 12, 12],
    "blocks": [
        {"layers": [{"type": "conv2d", "out": 16, "kernel": 3}, {"type": "relu"}]},
        {"layers": [{"type": "conv2d", "out": 32, "kernel": 3}, {"type": "relu"}]},
        {"layers": [{"type": "global_avgpool"}, {"type": "linear", "out": 10}]},
    ],
}


def test_block_cuts_agree_on_score_verdict_and_initialization() -> None:
    """Issue 3 pitfall 3: the same GAP-head CNN cut into blocks two ways gets scores within a
    twelfth of the prune cut of each other (0.25 when the cut was -3), the same verdict, and
    equivalent tuned initializations: the two rebuilt networks compute the same function within
    1 % (ReLU is positively homogeneous, so gains may move between layers of one path without changing it)."""
    reports = [condition(_cut(GAP_CNN, c), options=FAST) for c in (0, 1)]
    tolerance = abs(reports[0].prune_below or 0) / 12
    assert abs((reports[0].score or 0) - (reports[1].score or 0)) < tolerance, [r.score for r in reports]
    assert reports[0].verdict == reports[1].verdict
    x = torch.randn(16, 3, 12, 12, generator=torch.Generator().manual_seed(0))
    outs = []
    for c, report in enumerate(reports):
        with torch.no_grad():
            outs.append(build_model(_cut(GAP_CNN, c), scales=report.scales, seed=0)(x))
    assert ((outs[0] - outs[1]).abs().max() / outs[0].abs().max()).item() < 0.01


def test_weights_feeding_batchnorm_keep_the_spec_scale() -> None:
    """Claim: the scale of a weight that feeds BatchNorm does not change the network's
    function, only its effective learning rate, so the tuned scales leave it at the spec's
    (multiplier exactly 1) while the layers that do matter are still tuned."""
    spec = {
        "input_shape": [16],
        "init": {"scheme": "torch_default", "gain": 0.4},
        "blocks": [
            {"layers": [{"type": "linear", "out": 32}, {"type": "batchnorm"}, {"type": "relu"}]},
            {"layers": [{"type": "linear", "out": 32}, {"type": "batchnorm"}, {"type": "relu"}]},
            {"layers": [{"type": "linear", "out": 4}]},
        ],
    }
    report = condition(spec, options={"seed": 0})
    invariant = set(report.tuning.invariant)
    assert {"blocks.0.0", "blocks.1.0"} <= invariant
    for name in build_model(spec).state_dict():
        if name.rsplit(".", 1)[0] in invariant:
            assert report.scales.get(name, 1.0) == 1.0, name
    assert report.scales["blocks.2.0.weight"] != 1.0  # the head is tuned (output std)


def test_an_infinite_kappa_d_is_reported_not_dropped() -> None:
    """A constant input feature makes kappa(D) of the first layer infinite (BNP paper, eq. 12):
    JSON cannot carry it, so the layer's figure is null and the reasons name the layer."""
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(0))
    x[:, 5] = 1.0
    report = condition(EXAMPLE_MLP, data=x, options=FAST | {"probe_steps": 2})
    first = next(layer for layer in report.layers if layer.name == "blocks.0.0")
    assert first.kappa_d is None
    assert any("kappa(D) is infinite at blocks.0.0" in reason for reason in report.reasons), report.reasons
    clean = condition(EXAMPLE_MLP, data=torch.randn(32, 64), options=FAST | {"probe_steps": 2})
    assert not any("kappa(D) is infinite" in reason for reason in clean.reasons)

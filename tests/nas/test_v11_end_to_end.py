"""Format 1.1 end to end: a NAS-Bench-201 cell network and a ViT go through the REST API (uvicorn),
the queue, the embedded worker and the Optuna gate; a 1.0 spec using a 1.1 type is refused with
the version named."""

from __future__ import annotations

import optuna
import pytest
import torch

import nas
from nas.client import PreflightClient
from nas.errors import SpecRejectedError
from nas.gate import ATTR_VERDICT, ConditioningGate
from nas.space import NASBench201Space, SearchSpace, ViTSpace, nasbench201_spec, vit_spec
from nas.testing import FAST_OPTIONS

optuna.logging.set_verbosity(optuna.logging.WARNING)

CELL_NET = nasbench201_spec(
    ["nor_conv_3x3", "skip_connect", "none", "avg_pool_3x3", "nor_conv_1x1", "nor_conv_3x3"],
    channels=4,
    cells_per_stage=1,
    input_shape=(3, 16, 16),
)
VIT = vit_spec(depth=2, width=32, heads=4, patch=7)


@pytest.mark.parametrize(("spec", "x_shape"), [(CELL_NET, (2, 3, 16, 16)), (VIT, (2, 1, 28, 28))], ids=["cell", "vit"])
def test_a_11_spec_is_conditioned_through_the_service(client: PreflightClient, spec: dict, x_shape: tuple) -> None:
    candidate = client.condition(spec, FAST_OPTIONS | {"study": "v11"}, timeout=300)
    assert candidate.status == "done", candidate.error
    report = candidate.require_report()
    assert report.spec_hash == nas.spec_hash(nas.parse_spec(spec))
    assert len(report.blocks) == len(spec["blocks"]) and report.tuning.units
    model = nas.build_model(spec, scales=report.scales, seed=0)  # the scales name this spec's parameters
    assert torch.isfinite(model(torch.randn(*x_shape))).all()


def test_a_10_spec_using_a_11_type_is_refused_with_the_version_named(client: PreflightClient) -> None:
    old = {k: v for k, v in VIT.items() if k != "format"}
    with pytest.raises(SpecRejectedError) as caught:
        client.submit(old)
    assert caught.value.status == 422
    assert caught.value.detail is not None
    assert "blocks[0].layers[0] (patch_embed)" in caught.value.detail
    assert "format 1.1" in caught.value.detail


@pytest.mark.parametrize(
    "space",
    [NASBench201Space(channels=4, cells_per_stage=1, input_shape=(3, 16, 16)), ViTSpace(depth=(1, 2), widths=(32,))],
    ids=["nasbench201", "vit"],
)
def test_the_gate_checks_11_search_spaces(client: PreflightClient, space: SearchSpace) -> None:
    gate = ConditioningGate(client, options=FAST_OPTIONS, timeout=300)
    checked = []

    def objective(trial: optuna.Trial) -> float:
        spec = space(trial)
        report = gate.check(trial, spec)  # prunes the trial when the verdict is "prune"
        assert report is not None
        checked.append(report.spec_hash)
        return float(report.score or 0.0)

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(objective, n_trials=2)
    assert len(study.trials) == 2 and all(t.state.is_finished() for t in study.trials)
    pruned = sum(t.state == optuna.trial.TrialState.PRUNED for t in study.trials)
    assert len(checked) + pruned == 2  # every trial was decided by the gate, none failed
    assert all(t.user_attrs[ATTR_VERDICT] in ("keep", "prune") for t in study.trials)

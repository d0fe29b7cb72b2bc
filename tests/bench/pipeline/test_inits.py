"""The initialization peers draw the same weights whatever the process drew before; LSUV centered is
LSUV with zero-mean layer outputs."""

from __future__ import annotations

import pytest
import torch

import nas
from bench.pipeline.inits import ALL_PEERS, LSUV_ROUNDS, initialize, lsuv_counted_
from nas.examples import EXAMPLE_MLP
from worker.engine._moments import forward_hooks


@pytest.mark.parametrize("name", sorted(ALL_PEERS))
def test_a_peer_draws_the_same_weights_after_any_earlier_draws_and_leaves_the_generator_alone(name):
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, 10, (16,), generator=torch.Generator().manual_seed(2))

    def weights_after(earlier_draws: int) -> dict[str, torch.Tensor]:
        torch.manual_seed(123)
        torch.rand(earlier_draws)  # what other candidates drew in the same process
        before = torch.random.get_rng_state()
        model = initialize(name, nas.build_model(EXAMPLE_MLP, seed=0), x, y, seed=0)
        assert torch.equal(torch.random.get_rng_state(), before), "the global generator moved"
        return {k: v.clone() for k, v in model.state_dict().items()}

    first, second = weights_after(0), weights_after(1000)
    assert first.keys() == second.keys()
    for key in first:
        assert torch.equal(first[key], second[key]), f"{name}: {key} differs"


def test_lsuv_centered_keeps_lsuvs_weights_and_centers_every_biased_layers_output_on_the_batch() -> None:
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(1)) + 0.5
    y = torch.randint(0, 10, (32,), generator=torch.Generator().manual_seed(2))
    lsuv = initialize("lsuv", nas.build_model(EXAMPLE_MLP, seed=0), x, y, seed=0)
    centered = initialize("lsuv_centered", nas.build_model(EXAMPLE_MLP, seed=0), x, y, seed=0)
    for (name, a), (_, b) in zip(lsuv.named_parameters(), centered.named_parameters(), strict=True):
        if name.endswith("weight"):
            assert torch.equal(a, b), name
    means: dict[str, torch.Tensor] = {}

    def record(name: str):  # a hook that returns None leaves the output as it is
        def hook(_module: torch.nn.Module, _inputs: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
            means[name] = out.mean(dim=0)

        return hook

    hooks = [
        (module, record(name))
        for name, module in centered.named_modules()
        if isinstance(module, torch.nn.Linear) and module.bias is not None
    ]
    with forward_hooks(hooks), torch.no_grad():
        centered.train()(x)  # as the centering measured it: BatchNorm on the batch's statistics
    assert len(means) >= 2
    for name, mean in means.items():
        assert mean.abs().max() < 1e-4, f"{name}: output mean {mean.abs().max():.2e}"
    with torch.no_grad():
        assert lsuv.train()(x).mean(dim=0).abs().max() > 1e-2  # LSUV alone leaves a mean to remove


def test_lsuv_counted_draws_lsuvs_weights_and_counts_each_forward_pass_it_ran() -> None:
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(1)) * 3.0  # far from unit variance
    y = torch.randint(0, 10, (32,), generator=torch.Generator().manual_seed(2))
    lsuv = initialize("lsuv", nas.build_model(EXAMPLE_MLP, seed=0), x, y, seed=0)
    counted = nas.build_model(EXAMPLE_MLP, seed=0)
    calls: list[int] = []
    handle = counted.register_forward_hook(lambda *_: calls.append(1))
    try:
        passes = lsuv_counted_(counted, x, seed=0)
    finally:
        handle.remove()
    for (name, a), (_, b) in zip(lsuv.state_dict().items(), counted.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    layers = sum(isinstance(m, torch.nn.Linear) for m in counted.modules())
    assert passes == len(calls)
    assert layers < passes < LSUV_ROUNDS * layers  # some layer needed a second round; none ran out

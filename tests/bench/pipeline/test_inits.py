"""The initialization peers draw the same weights whatever the process drew before."""

from __future__ import annotations

import pytest
import torch

import nas
from bench.pipeline.inits import PEERS, initialize
from nas.examples import EXAMPLE_MLP


@pytest.mark.parametrize("name", sorted(PEERS))
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

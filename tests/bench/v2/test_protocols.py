"""Benchmark v2's two training protocols: schedules, divergence, the run's record."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from bench.pipeline.datasets import Dataset
from bench.v2.protocols import ADAMW, CHECKPOINTS_PER_EPOCH, SGD, _rate, train


def _data(n: int = 256) -> Dataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=g)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    return Dataset("toy", x, y, x[:64], y[:64], classes=4)


def test_the_warm_up_rises_linearly_then_the_cosine_decays_to_zero():
    total = 200
    rates = [_rate(ADAMW, 1.0, step, total) for step in range(total)]
    warmup = round(0.05 * total)
    assert rates[0] == pytest.approx(1 / warmup) and rates[warmup - 1] == pytest.approx(1.0)
    assert all(a <= b for a, b in zip(rates[:warmup], rates[1:warmup], strict=False))
    assert all(a >= b for a, b in zip(rates[warmup:], rates[warmup + 1 :], strict=False))
    assert rates[-1] < 1e-3
    assert _rate(SGD, 0.1, 150, total) == 0.1


@pytest.mark.parametrize("protocol", [SGD, ADAMW], ids=lambda p: p.name)
def test_a_learnable_task_trains_under_both_protocols(protocol):
    data = _data(2048)

    def make() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))

    run = train(make, data, protocol, epochs=12, seed=0)
    assert len(run.final_loss) == len(protocol.lrs) and not any(run.diverged)
    assert run.best_loss < 0.5 * run.initial_loss and not run.untrainable(data.chance_loss)
    assert run.best == min(range(len(run.final_loss)), key=run.final_loss.__getitem__)
    assert all(len(c) == 12 * CHECKPOINTS_PER_EPOCH for c in run.curves)
    assert run.test_accuracy[run.best] > 0.6


class _NaN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * math.nan


@pytest.mark.parametrize("protocol", [SGD, ADAMW], ids=lambda p: p.name)
def test_a_network_with_non_finite_outputs_diverges_at_every_rate_and_is_untrainable(protocol):
    data = _data()
    run = train(_NaN, data, protocol, epochs=2, seed=0)
    assert all(run.diverged) and all(math.isinf(v) for v in run.final_loss)
    assert run.untrainable(data.chance_loss) and run.test_accuracy == [0.0] * len(protocol.lrs)
    assert all(len(c) == 2 * CHECKPOINTS_PER_EPOCH and math.isinf(c[-1]) for c in run.curves)


def test_the_seed_changes_the_batch_order_and_repeats_exactly():
    data = _data()

    def make() -> nn.Module:
        torch.manual_seed(0)
        return nn.Linear(8, 4)

    a, b, c = (train(make, data, SGD, epochs=1, seed=s) for s in (0, 0, 1))
    assert a.curves == b.curves and a.curves != c.curves

"""The fixed training protocol that gives every candidate its ground truth.

Protocol (``Protocol`` holds the numbers; ``FULL`` and ``SMOKE`` are the two used):

- SGD with momentum 0.9, no weight decay, constant learning rate, mini-batches of 64
  drawn by a seeded permutation each epoch, cross-entropy loss;
- a learning-rate grid, every rate trained from the same initial weights; the candidate's
  result is the rate with the lowest final training loss (the best a tuner would find);
- final training loss = cross-entropy on the whole training split in eval mode after the
  last epoch; test accuracy from the same model on the test split;
- a run *diverges* when a mini-batch loss is non-finite or exceeds 100 x ln C; it stops
  there and its loss counts as ``inf``;
- **untrainable**: the best final training loss over the grid is at least
  ``UNTRAINABLE_FRACTION x ln C`` (the model fails to halve the loss of the uniform
  prediction within the protocol), or every rate diverges.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F

from bench.pipeline.datasets import Dataset

__all__ = [
    "FULL",
    "SMOKE",
    "UNTRAINABLE_FRACTION",
    "Protocol",
    "RunResult",
    "step_seconds",
    "train",
]

UNTRAINABLE_FRACTION = 0.5
DIVERGENCE_FACTOR = 100.0


@dataclass(frozen=True)
class Protocol:
    epochs: int = 5
    lrs: tuple[float, ...] = (0.1, 0.03, 0.01)
    batch_size: int = 64
    momentum: float = 0.9
    seed: int = 0

    def to_json(self) -> dict[str, object]:
        return asdict(self)


FULL = Protocol()
SMOKE = Protocol(epochs=1, lrs=(0.03,))


@dataclass
class RunResult:
    """One initialization trained over the whole learning-rate grid."""

    best_loss: float  # lowest final training loss over the grid (inf if all diverged)
    best_lr: float | None
    test_accuracy: float  # at best_lr (0 if all diverged)
    initial_loss: float  # training-split loss at initialization
    diverged: list[bool]  # per learning rate
    curves: list[list[float]]  # per learning rate: mean mini-batch loss per epoch
    final_losses: list[float]  # per learning rate
    seconds: float

    def untrainable(self, chance_loss: float) -> bool:
        return all(self.diverged) or not self.best_loss < UNTRAINABLE_FRACTION * chance_loss


@torch.no_grad()
def _evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Cross-entropy (float64 mean) and accuracy on a split, in eval mode."""
    model.eval()
    logits = model(x).double()
    loss = float(F.cross_entropy(logits, y))
    accuracy = float((logits.argmax(1) == y).double().mean())
    model.train()
    return (loss if math.isfinite(loss) else math.inf), accuracy


def _train_one(model: nn.Module, data: Dataset, lr: float, protocol: Protocol) -> tuple[list[float], bool]:
    """Train in place; returns the per-epoch mean mini-batch losses and whether it diverged."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=protocol.momentum)
    generator = torch.Generator().manual_seed(protocol.seed)
    limit = DIVERGENCE_FACTOR * data.chance_loss
    curve: list[float] = []
    model.train()
    n = len(data.x_train)
    for _ in range(protocol.epochs):
        order = torch.randperm(n, generator=generator)
        total, count = 0.0, 0
        for start in range(0, n, protocol.batch_size):
            index = order[start : start + protocol.batch_size]
            if len(index) < 2:  # BatchNorm needs two samples
                continue
            loss = F.cross_entropy(model(data.x_train[index]), data.y_train[index])
            value = float(loss.detach())
            if not math.isfinite(value) or value > limit:
                curve.append(math.inf)
                return curve, True
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total, count = total + value * len(index), count + len(index)
        curve.append(total / max(count, 1))
    return curve, False


def train(make_model: Callable[[], nn.Module], data: Dataset, protocol: Protocol = FULL) -> RunResult:
    """Train fresh copies of ``make_model()`` (the same weights each call) at every rate."""
    start = time.perf_counter()
    initial_loss, _ = _evaluate(make_model(), data.x_train, data.y_train)
    curves, diverged, finals, accuracies = [], [], [], []
    for lr in protocol.lrs:
        model = make_model()
        curve, bad = _train_one(model, data, lr, protocol)
        loss, _ = (math.inf, 0.0) if bad else _evaluate(model, data.x_train, data.y_train)
        _, accuracy = (0.0, 0.0) if bad else _evaluate(model, data.x_test, data.y_test)
        bad = bad or not math.isfinite(loss)
        curves.append(curve)
        diverged.append(bad)
        finals.append(loss if not bad else math.inf)
        accuracies.append(accuracy)
    best = min(range(len(finals)), key=lambda i: finals[i])
    ok = math.isfinite(finals[best])
    return RunResult(
        best_loss=finals[best],
        best_lr=protocol.lrs[best] if ok else None,
        test_accuracy=accuracies[best] if ok else 0.0,
        initial_loss=initial_loss,
        diverged=diverged,
        curves=curves,
        final_losses=finals,
        seconds=time.perf_counter() - start,
    )


def step_seconds(model: nn.Module, data: Dataset, batch_size: int = 64, repeats: int = 5) -> float:
    """Median wall time of one training step (forward, backward, SGD update) at the
    protocol's batch size: the unit of the benchmark's "training-step equivalents"."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    x, y = data.x_train[:batch_size], data.y_train[:batch_size]
    model.train()
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return sorted(times[1:])[repeats // 2]  # first step warms up

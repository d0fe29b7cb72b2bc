"""The two training protocols that give benchmark v2 its ground truth.

- ``SGD`` (protocol S, v1's): SGD with momentum 0.9, constant rate, batch 64, rates
  {0.1, 0.03, 0.01}; a run *diverges* when a mini-batch loss is non-finite or above 100 ln C.
  The trainability probe shares this protocol's optimizer, rates, batch and divergence rule.
- ``ADAMW`` (protocol W, shared with nothing Preflight does): AdamW (weight decay 0.05), batch
  128, rates {3e-3, 1e-3, 3e-4}, linear warm-up over the first 5 % of steps then a cosine decay
  to zero; only a non-finite loss stops a run.

Every (candidate, initialization, rate) is trained once per seed; the seed fixes the model's
weights (``nas.build_model(spec, seed=seed)``, then the initialization) and the mini-batch order.
A run records its mean mini-batch loss at ``CHECKPOINTS_PER_EPOCH`` points per epoch (the curve
Optuna's pruners are replayed on), and at the end, in eval mode: the loss on a fixed training
subset, the test loss and the test accuracy. The rate with the lowest final training loss is the
run's result (the best a tuner would find); *untrainable*: that loss is at least half of ln C, or
every rate diverged.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

from bench.pipeline.datasets import Dataset

__all__ = ["ADAMW", "PROTOCOLS", "SGD", "Protocol", "Run", "epochs_for", "train"]

UNTRAINABLE_FRACTION = 0.5
DIVERGENCE_FACTOR = 100.0
CHECKPOINTS_PER_EPOCH = 4
EVAL_TRAIN = 1000  # final training loss on this many training samples (a fixed subset)
# epochs per dataset: Fashion-MNIST's 4,000 images are 63 SGD steps per epoch, digits' 1,257 are 20
EPOCHS = {"fashion_mnist": 2, "digits": 4, "breast_cancer": 4}


@dataclass(frozen=True)
class Protocol:
    name: str
    optimizer: str  # "sgd" | "adamw"
    lrs: tuple[float, ...]
    batch_size: int
    momentum: float = 0.0
    weight_decay: float = 0.0
    schedule: str = "constant"  # "constant" | "warmup_cosine"
    abort_above_chance: bool = False  # stop at loss > DIVERGENCE_FACTOR x ln C (v1's rule)
    epochs_scale: float = 1.0  # the smoke protocol trains fewer epochs

    def to_json(self) -> dict[str, object]:
        return asdict(self)


SGD = Protocol("sgd", "sgd", (0.1, 0.03, 0.01), 64, momentum=0.9, abort_above_chance=True)
ADAMW = Protocol("adamw", "adamw", (3e-3, 1e-3, 3e-4), 128, weight_decay=0.05, schedule="warmup_cosine")
PROTOCOLS = {p.name: p for p in (SGD, ADAMW)}


def epochs_for(dataset: str, protocol: Protocol) -> int:
    base = next(v for k, v in EPOCHS.items() if dataset.startswith(k))
    return max(1, round(base * protocol.epochs_scale))


@dataclass
class Run:
    """One initialization, one seed, every rate of the protocol."""

    final_loss: list[float]  # per rate: training-subset loss after training (inf: diverged)
    test_loss: list[float]
    test_accuracy: list[float]
    diverged: list[bool]
    curves: list[list[float]]  # per rate: mean mini-batch loss per checkpoint (inf after divergence)
    initial_loss: float
    steps_per_rate: int
    seconds: float
    best: int = field(init=False)

    def __post_init__(self) -> None:
        self.best = min(range(len(self.final_loss)), key=lambda i: self.final_loss[i])

    @property
    def best_loss(self) -> float:
        return self.final_loss[self.best]

    def untrainable(self, chance_loss: float) -> bool:
        return all(self.diverged) or not self.best_loss < UNTRAINABLE_FRACTION * chance_loss

    def to_json(self) -> dict[str, object]:
        return asdict(self)


@torch.no_grad()
def _evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    model.eval()
    losses, correct = 0.0, 0
    for start in range(0, len(x), 1000):
        logits = model(x[start : start + 1000]).double()
        losses += float(F.cross_entropy(logits, y[start : start + 1000], reduction="sum"))
        correct += int((logits.argmax(1) == y[start : start + 1000]).sum())
    model.train()
    loss = losses / len(x)
    return (loss if math.isfinite(loss) else math.inf), correct / len(x)


def _optimizer(model: nn.Module, protocol: Protocol, lr: float) -> torch.optim.Optimizer:
    if protocol.optimizer == "sgd":
        return torch.optim.SGD(
            model.parameters(), lr=lr, momentum=protocol.momentum, weight_decay=protocol.weight_decay
        )
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=protocol.weight_decay)


def _rate(protocol: Protocol, lr: float, step: int, total: int) -> float:
    if protocol.schedule == "constant":
        return lr
    warmup = max(1, round(0.05 * total))
    if step < warmup:
        return lr * (step + 1) / warmup
    return 0.5 * lr * (1.0 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def _train_one(
    model: nn.Module, data: Dataset, protocol: Protocol, lr: float, epochs: int, seed: int
) -> tuple[list[float], bool, int]:
    """Train in place: the loss curve per checkpoint, whether it diverged, the steps taken."""
    optimizer = _optimizer(model, protocol, lr)
    generator = torch.Generator().manual_seed(seed)
    limit = DIVERGENCE_FACTOR * data.chance_loss if protocol.abort_above_chance else math.inf
    n = len(data.x_train)
    per_epoch = math.ceil(n / protocol.batch_size)
    total = per_epoch * epochs
    every = max(1, per_epoch // CHECKPOINTS_PER_EPOCH)
    curve: list[float] = []
    total_loss, count, step = 0.0, 0, 0
    model.train()
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, protocol.batch_size):
            index = order[start : start + protocol.batch_size]
            if len(index) < 2:  # BatchNorm needs two samples
                continue
            loss = F.cross_entropy(model(data.x_train[index]), data.y_train[index])
            value = float(loss.detach())
            if not math.isfinite(value) or value > limit:
                slots = epochs * CHECKPOINTS_PER_EPOCH - len(curve)
                return curve + [math.inf] * slots, True, step + 1
            for group in optimizer.param_groups:
                group["lr"] = _rate(protocol, lr, step, total)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            total_loss, count = total_loss + value * len(index), count + len(index)
            if step % every == 0 and len(curve) < epochs * CHECKPOINTS_PER_EPOCH:
                curve.append(total_loss / count)
                total_loss, count = 0.0, 0
    while len(curve) < epochs * CHECKPOINTS_PER_EPOCH:  # a short last segment
        curve.append(total_loss / max(count, 1) if count else curve[-1])
    return curve, False, step


def train(make_model: Callable[[], nn.Module], data: Dataset, protocol: Protocol, epochs: int, seed: int) -> Run:
    """Fresh copies of ``make_model()`` (the same weights each call) at every rate."""
    import time

    start = time.perf_counter()
    x_eval, y_eval = data.x_train[:EVAL_TRAIN], data.y_train[:EVAL_TRAIN]
    initial, _ = _evaluate(make_model(), x_eval, y_eval)
    finals, test_losses, accuracies, diverged, curves = [], [], [], [], []
    steps = 0
    for lr in protocol.lrs:
        model = make_model()
        curve, bad, steps_taken = _train_one(model, data, protocol, lr, epochs, seed)
        steps = max(steps, steps_taken)
        loss, _ = (math.inf, 0.0) if bad else _evaluate(model, x_eval, y_eval)
        test_loss, accuracy = (
            (math.inf, 0.0) if bad or not math.isfinite(loss) else _evaluate(model, data.x_test, data.y_test)
        )
        bad = bad or not math.isfinite(loss)
        finals.append(math.inf if bad else loss)
        test_losses.append(test_loss)
        accuracies.append(accuracy)
        diverged.append(bad)
        curves.append(curve)
    return Run(finals, test_losses, accuracies, diverged, curves, initial, steps, time.perf_counter() - start)

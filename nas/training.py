"""A small, real training loop for searches on small datasets (the demo uses it).

:func:`load_digits` gives scikit-learn's bundled handwritten digits (1,797 images of
8 x 8, 10 classes; extra ``demo``) as standardized tensors, split into training and
validation sets; :class:`Trainer` trains a model one epoch at a time, so that an Optuna
objective can report the validation accuracy after each epoch and let a pruner stop it,
and counts what the training cost (seconds, optimizer steps, multiply-accumulates).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["Dataset", "Trainer", "accuracy", "load_digits"]

# model -> a torch.optim-style optimizer (``zero_grad()``, ``step()``), e.g. an SGD wrapped by
# a gradient preconditioner that hooks into the model.
OptimizerFactory = Callable[[nn.Module], Any]


@dataclass(frozen=True)
class Dataset:
    """A classification dataset split in two, as float32 inputs and int64 labels."""

    x_train: Tensor
    y_train: Tensor
    x_val: Tensor
    y_val: Tensor
    n_classes: int

    @property
    def input_shape(self) -> list[int]:
        return list(self.x_train.shape[1:])


def load_digits(*, image: bool = False, val_fraction: float = 0.25, seed: int = 0) -> Dataset:
    """scikit-learn's digits, standardized with the training split's mean and std.

    ``image=False`` gives vectors ``[64]``, ``image=True`` images ``[1, 8, 8]``. The split
    is stratified and fixed by ``seed``.
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), but got {val_fraction=}.")
    try:
        from sklearn.datasets import load_digits as sklearn_digits
        from sklearn.model_selection import train_test_split
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ModuleNotFoundError(  # a ModuleNotFoundError naming it: the CLI says which extra installs it
            'the digits dataset needs scikit-learn: pip install ".[demo]" in the clone', name="sklearn"
        ) from exc
    x, y = sklearn_digits(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(x, y, test_size=val_fraction, random_state=seed, stratify=y)
    mean = x_train.mean(axis=0)
    std = x_train.std(axis=0) + 1.0  # +1: constant border pixels (std 0) stay 0, not inf
    shape = (-1, 1, 8, 8) if image else (-1, 64)

    def tensor(a: object) -> Tensor:
        return torch.as_tensor(a, dtype=torch.float32).reshape(shape)

    return Dataset(
        x_train=tensor((x_train - mean) / std),
        y_train=torch.as_tensor(y_train, dtype=torch.int64),
        x_val=tensor((x_val - mean) / std),
        y_val=torch.as_tensor(y_val, dtype=torch.int64),
        n_classes=10,
    )


@torch.no_grad()
def accuracy(model: nn.Module, x: Tensor, y: Tensor, batch_size: int = 1024) -> float:
    """Fraction of ``x`` classified as ``y``, in evaluation mode; 0 for non-finite logits. Each
    batch goes to the model's device (a model on a GPU is scored on data kept on the CPU)."""
    device = _device_of(model)
    was_training = model.training
    model.eval()
    try:
        correct = 0
        for start in range(0, len(x), batch_size):
            logits = model(x[start : start + batch_size].to(device))
            finite = torch.isfinite(logits).all(dim=1)
            labels = y[start : start + batch_size].to(device)
            correct += int(((logits.argmax(dim=1) == labels) & finite).sum())
        return correct / max(1, len(x))
    finally:
        model.train(was_training)


def _device_of(model: nn.Module) -> torch.device:
    """Where the model's parameters (or, for a parameterless one, its buffers) live; the CPU if none."""
    first = next(itertools.chain(model.parameters(), model.buffers()), None)
    return first.device if first is not None else torch.device("cpu")


class Trainer:
    """Train a classifier one epoch at a time with cross-entropy.

    Args:
        model: the network (e.g. ``nas.build_model(spec, scales=report.scales)``).
        data: the dataset.
        lr: learning rate.
        batch_size: minibatch size.
        momentum: of SGD (the default optimizer).
        optimizer: a factory ``model -> optimizer`` to use instead of SGD, e.g.
            ``lambda m: worker.engine.bnp.BNP(torch.optim.SGD(m.parameters(), lr=0.05), m)`` for
            the BNP preconditioner.
        macs_per_sample: forward multiply-accumulates of one sample; default from the
            model's spec (``nas.summarize``) when it has one.
        generator: randomness of the minibatch order (seed it; a CPU generator). The order is
            drawn on the CPU whatever the device, so a seed gives the same minibatches on a GPU.
        device: where to train (``"cuda"``, ``"cuda:1"``, ``"cpu"``): the model moves there and the
            training and validation sets are copied there once. Default: where the model already is.

    ``seconds``, ``steps`` and ``macs`` (forward + backward, counted as 3x forward) say
    what the training cost so far; ``diverged`` turns true at the first non-finite loss,
    after which :meth:`epoch` stops training and returns 0 accuracy.
    """

    def __init__(
        self,
        model: nn.Module,
        data: Dataset,
        *,
        lr: float = 0.05,
        batch_size: int = 64,
        momentum: float = 0.9,
        optimizer: OptimizerFactory | None = None,
        macs_per_sample: int | None = None,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        if not (math.isfinite(lr) and lr > 0):
            raise ValueError(f"lr must be a positive number, but got {lr=}.")
        if batch_size < 2:  # a batch of one is skipped (BatchNorm needs two samples): nothing would train
            raise ValueError(f"batch_size must be at least 2, but got {batch_size=}.")
        if not all(hasattr(data, name) for name in ("x_train", "y_train", "x_val", "y_val")):
            raise TypeError(f"data must be a nas.training.Dataset (x_train, y_train, x_val, y_val), got {type(data)}.")
        for split in ("train", "val"):
            x, y = getattr(data, f"x_{split}"), getattr(data, f"y_{split}")
            if len(x) != len(y):
                raise ValueError(f"data.x_{split} has {len(x)} samples but data.y_{split} has {len(y)} labels.")
        self.device = torch.device(device) if device is not None else _device_of(model)
        if self.device.type == "cuda" and not torch.cuda.is_available():  # torch: "not compiled with CUDA"
            raise ValueError(f"device {str(self.device)!r} was asked for but CUDA is not available; use 'cpu'.")
        self.model = model.to(self.device)
        self.data = data
        # the sets on the device once (no copy where they already are), not a copy per minibatch
        self._train = (data.x_train.to(self.device), data.y_train.to(self.device))
        self._val = (data.x_val.to(self.device), data.y_val.to(self.device))
        self.batch_size = batch_size
        self.optimizer = (
            optimizer(model) if optimizer is not None else torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
        )
        if macs_per_sample is None:
            spec = getattr(model, "spec", None)
            if spec is not None:
                from nas.summary import summarize

                macs_per_sample = summarize(spec).macs
        self.macs_per_sample = macs_per_sample or 0
        self.generator = generator
        self.seconds = 0.0
        self.steps = 0
        self.macs = 0
        self.epochs = 0
        self.diverged = False
        self.history: list[float] = []

    def epoch(self) -> float:
        """One pass over the training set; returns the validation accuracy."""
        start = time.perf_counter()
        if not self.diverged:
            self._train_one_epoch()
        accuracy_now = 0.0 if self.diverged else accuracy(self.model, *self._val)
        self.seconds += time.perf_counter() - start
        self.epochs += 1
        self.history.append(accuracy_now)
        return accuracy_now

    def _train_one_epoch(self) -> None:
        x, y = self._train
        order = torch.randperm(len(x), generator=self.generator).to(self.device)
        loss_fn = nn.CrossEntropyLoss()
        self.model.train()
        for start in range(0, len(x), self.batch_size):
            index = order[start : start + self.batch_size]
            if len(index) < 2:
                continue  # BatchNorm needs two samples
            loss = loss_fn(self.model(x[index]), y[index])
            if not torch.isfinite(loss):
                self.diverged = True
                return
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            self.steps += 1
            self.macs += 3 * self.macs_per_sample * len(index)

"""Real datasets that ship inside scikit-learn and load offline.

Every dataset here is a real measurement set bundled in the scikit-learn wheel
(``sklearn/datasets/data``), so the benchmark needs no network and no synthetic ground
truth. Features are standardized with the training split's mean and standard deviation
(digits' pixels, which share one scale, with one global mean and deviation so the 8x8 image
keeps its spatial structure).

| name | samples | features | classes | source |
|---|---|---|---|---|
| digits | 1797 | 64 (or 1x8x8) | 10 | UCI optical handwritten digits |
| breast_cancer | 569 | 30 | 2 | UCI Wisconsin diagnostic breast cancer |
| wine | 178 | 13 | 3 | UCI wine recognition |
| iris | 150 | 4 | 3 | Fisher's iris |
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
import torch
from torch import Tensor

__all__ = ["DATASETS", "Dataset", "load", "load_key"]

DATASETS = ("digits", "breast_cancer", "wine", "iris")
TEST_FRACTION = 0.3
SPLIT_SEED = 0


@dataclass(frozen=True)
class Dataset:
    """A train/test split as float32 tensors; ``input_shape`` is per sample."""

    name: str
    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    classes: int

    @property
    def input_shape(self) -> list[int]:
        return list(self.x_train.shape[1:])

    @property
    def chance_loss(self) -> float:
        """Cross-entropy of the uniform prediction, ``ln C``: the scale losses are read on."""
        return math.log(self.classes)

    def batch(self, size: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """A random training batch of ``size`` samples (the first ``size`` if no generator)."""
        if generator is None:
            index = torch.arange(min(size, len(self.x_train)))
        else:
            index = torch.randperm(len(self.x_train), generator=generator)[:size]
        return self.x_train[index], self.y_train[index]


def _raw(name: str) -> tuple[np.ndarray, np.ndarray]:
    from sklearn import datasets as skd

    loaders = {
        "digits": skd.load_digits,
        "breast_cancer": skd.load_breast_cancer,
        "wine": skd.load_wine,
        "iris": skd.load_iris,
    }
    if name not in loaders:
        raise ValueError(f"unknown dataset {name!r}; choose one of {sorted(loaders)}")
    bunch = loaders[name]()
    return np.asarray(bunch.data, dtype=np.float64), np.asarray(bunch.target, dtype=np.int64)


@cache
def load(name: str, image: bool = False) -> Dataset:
    """Load ``name`` with a fixed stratified split (30 % test, seed 0).

    ``image=True`` (digits only) returns samples shaped ``[1, 8, 8]`` for CNNs.

    >>> load("iris").input_shape
    [4]
    """
    from sklearn.model_selection import train_test_split

    if image and name != "digits":
        raise ValueError(f"image=True needs the digits dataset, got {name!r}")
    x, y = _raw(name)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=y)
    if name == "digits":  # one global scale keeps the image's structure
        mean, std = x_tr.mean(), x_tr.std()
    else:
        mean, std = x_tr.mean(axis=0), x_tr.std(axis=0)
        std = np.where(std > 0, std, 1.0)
    x_tr, x_te = (x_tr - mean) / std, (x_te - mean) / std
    shape = (1, 8, 8) if image else (x.shape[1],)
    return Dataset(
        name=name + ("_image" if image else ""),
        x_train=torch.tensor(x_tr, dtype=torch.float32).reshape(-1, *shape),
        y_train=torch.tensor(y_tr),
        x_test=torch.tensor(x_te, dtype=torch.float32).reshape(-1, *shape),
        y_test=torch.tensor(y_te),
        classes=int(y.max()) + 1,
    )


def load_key(key: str) -> Dataset:
    """Load by the key candidates use: a dataset name, or ``"digits_image"``."""
    return load("digits", image=True) if key == "digits_image" else load(key)

"""Fashion-MNIST (Xiao et al. 2017), read from its original IDX files with numpy.

The files are found and read by ``nas.fashion_mnist`` (Debian's ``dataset-fashion-mnist``
package, or the folder in ``PREFLIGHT_FASHION_MNIST_DIR`` or ``python -m bench.v2
--fashion-mnist-dir``); this module takes the benchmark's subsets of them.

The benchmark trains on a stratified subset of the 60,000 training images (``TRAIN_PER_CLASS``
per class, chosen with seed 0), evaluates on a stratified subset of the 10,000 test images, and
averages each image's 2x2 pixel blocks (28x28 -> 14x14, ``RESOLUTION``): at full size and on the
full sets, the three seeds of every (candidate, initialization, rate) would take days of a 2-core
CPU, not the 8 hours ``make bench`` is sized for (docs/benchmarks.md states the sizes). Pixels are
scaled to [0, 1], then standardized with the training subset's one global mean and deviation, so
the image keeps its structure.
"""

from __future__ import annotations

from functools import cache

import torch

from bench.pipeline.datasets import Dataset
from nas.fashion_mnist import DEFAULT_DIR, ENV, FashionMNISTMissing, find_dir, read_idx, standardized_subsets

__all__ = ["DEFAULT_DIR", "ENV", "FashionMNISTMissing", "find_dir", "load_fashion_mnist", "read_idx"]

TRAIN_PER_CLASS = 400  # 4,000 training images
TEST_PER_CLASS = 200  # 2,000 test images
RESOLUTION = 14  # 2x2 block means of the 28x28 images
SUBSET_SEED = 0


@cache
def load_fashion_mnist(
    folder: str | None = None,
    train_per_class: int = TRAIN_PER_CLASS,
    test_per_class: int = TEST_PER_CLASS,
    image: bool = True,
    resolution: int = RESOLUTION,
) -> Dataset:
    """The benchmark's Fashion-MNIST split: stratified subsets, standardized, 1 x resolution x
    resolution images (``image=False``: flat vectors for MLPs); ``resolution`` divides 28."""
    x_tr, y_tr, x_te, y_te = standardized_subsets(folder, train_per_class, test_per_class, resolution, SUBSET_SEED)
    shape = (1, resolution, resolution) if image else (resolution * resolution,)
    return Dataset(
        name="fashion_mnist" + ("_image" if image else ""),
        x_train=torch.tensor(x_tr, dtype=torch.float32).reshape(-1, *shape),
        y_train=torch.tensor(y_tr),
        x_test=torch.tensor(x_te, dtype=torch.float32).reshape(-1, *shape),
        y_test=torch.tensor(y_te),
        classes=10,
    )

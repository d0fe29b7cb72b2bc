"""Fashion-MNIST (Xiao et al. 2017), read from its original IDX files with numpy.

No download at run time: the files come from Debian's ``dataset-fashion-mnist`` package
(``apt-get install dataset-fashion-mnist`` puts them in ``/usr/share/datasets/fashion-mnist``)
or from the dataset's own repository. ``PREFLIGHT_FASHION_MNIST_DIR`` (or ``python -m bench.v2
--fashion-mnist-dir``) points at another folder. Both the gzipped (``*.gz``) and the plain files
are read.

The benchmark trains on a stratified subset of the 60,000 training images (``TRAIN_PER_CLASS``
per class, chosen with seed 0), evaluates on a stratified subset of the 10,000 test images, and
averages each image's 2x2 pixel blocks (28x28 -> 14x14, ``RESOLUTION``): at full size and on the
full sets, the three seeds of every (candidate, initialization, rate) would take days of a 2-core
CPU, not the 8 hours ``make bench`` is sized for (docs/benchmarks.md states the sizes). Pixels are
scaled to [0, 1], then standardized with the training subset's one global mean and deviation, so
the image keeps its structure.
"""

from __future__ import annotations

import gzip
import os
from functools import cache
from pathlib import Path

import numpy as np
import torch

from bench.pipeline.datasets import Dataset

__all__ = ["DEFAULT_DIR", "ENV", "FashionMNISTMissing", "find_dir", "load_fashion_mnist", "read_idx"]

ENV = "PREFLIGHT_FASHION_MNIST_DIR"
DEFAULT_DIR = Path("/usr/share/datasets/fashion-mnist")
FILES = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte",
    "test_y": "t10k-labels-idx1-ubyte",
}
TRAIN_PER_CLASS = 400  # 4,000 training images
TEST_PER_CLASS = 200  # 2,000 test images
RESOLUTION = 14  # 2x2 block means of the 28x28 images
SUBSET_SEED = 0
_IDX_TYPES = {0x08: np.uint8}


class FashionMNISTMissing(FileNotFoundError):
    """The IDX files are not where the benchmark looks; the message says how to get them."""


def _how_to_get(folder: Path) -> str:
    return (
        f"Fashion-MNIST not found in {folder} (looked for {', '.join(FILES.values())}, each plain or .gz). "
        "Install it with `apt-get install dataset-fashion-mnist` (Debian/Ubuntu: the files land in "
        f"{DEFAULT_DIR}), or download the four IDX files from "
        "https://github.com/zalandoresearch/fashion-mnist (data/fashion) into a folder and set "
        f"{ENV} to that folder."
    )


def _file(folder: Path, stem: str) -> Path | None:
    for name in (stem + ".gz", stem):
        if (folder / name).is_file():
            return folder / name
    return None


def find_dir(folder: str | Path | None = None) -> Path:
    """The folder holding the four IDX files: ``folder``, else ``$PREFLIGHT_FASHION_MNIST_DIR``,
    else Debian's; raises ``FashionMNISTMissing`` (with how to get the data) when one is absent."""
    path = Path(folder or os.environ.get(ENV) or DEFAULT_DIR)
    if any(_file(path, stem) is None for stem in FILES.values()):
        raise FashionMNISTMissing(_how_to_get(path))
    return path


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (LeCun's format: two zero bytes, the type code, the rank, big-endian int32
    dimensions, then the data) as a numpy array."""
    with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as handle:
        raw = handle.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise ValueError(f"{path} is not an unsigned-byte IDX file (header {raw[:4]!r})")
    rank = raw[3]
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">i4", count=rank, offset=4))
    data = np.frombuffer(raw, dtype=_IDX_TYPES[raw[2]], offset=4 + 4 * rank)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: header says {dims} ({int(np.prod(dims))} values), file holds {data.size}")
    return data.reshape(dims)


def _stratified(labels: np.ndarray, per_class: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    picks = [rng.permutation(np.flatnonzero(labels == c))[:per_class] for c in np.unique(labels)]
    return np.sort(np.concatenate(picks))


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
    if resolution < 1 or 28 % resolution:
        raise ValueError(f"resolution must divide 28, but got {resolution=}")
    path = find_dir(folder)
    arrays = {key: read_idx(_file(path, stem)) for key, stem in FILES.items()}  # type: ignore[arg-type]
    train = _stratified(arrays["train_y"], train_per_class, SUBSET_SEED)
    test = _stratified(arrays["test_y"], test_per_class, SUBSET_SEED)
    block = 28 // resolution
    x_tr, x_te = (
        (arrays[k][index].astype(np.float64) / 255.0)
        .reshape(-1, resolution, block, resolution, block)
        .mean(axis=(2, 4))
        for k, index in (("train_x", train), ("test_x", test))
    )
    mean, std = x_tr.mean(), x_tr.std()
    shape = (1, resolution, resolution) if image else (resolution * resolution,)
    return Dataset(
        name="fashion_mnist" + ("_image" if image else ""),
        x_train=torch.tensor((x_tr - mean) / std, dtype=torch.float32).reshape(-1, *shape),
        y_train=torch.tensor(arrays["train_y"][train].astype(np.int64)),
        x_test=torch.tensor((x_te - mean) / std, dtype=torch.float32).reshape(-1, *shape),
        y_test=torch.tensor(arrays["test_y"][test].astype(np.int64)),
        classes=10,
    )

"""Fashion-MNIST (Xiao et al. 2017), read from its original IDX files with numpy.

No download at run time: the files come from Debian's ``dataset-fashion-mnist`` package
(``apt-get install dataset-fashion-mnist`` puts them in ``/usr/share/datasets/fashion-mnist``)
or from the dataset's own repository; ``PREFLIGHT_FASHION_MNIST_DIR`` points at another folder.
Both the gzipped (``*.gz``) and the plain files are read. :func:`load_fashion_mnist` gives the
stratified, downsampled split ``preflight demo --dataset fashion-mnist`` searches on; the
benchmark (``bench/pipeline/fashion_mnist.py``) reads the same files through :func:`read_arrays`.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import numpy as np
import torch

from nas.training import Dataset

__all__ = [
    "DEFAULT_DIR",
    "ENV",
    "FashionMNISTMissing",
    "FashionMNISTUnreadable",
    "available",
    "find_dir",
    "load_fashion_mnist",
    "read_arrays",
    "read_idx",
    "standardized_subsets",
]

ENV = "PREFLIGHT_FASHION_MNIST_DIR"
DEFAULT_DIR = Path("/usr/share/datasets/fashion-mnist")
FILES = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte",
    "test_y": "t10k-labels-idx1-ubyte",
}
_IDX_TYPES = {0x08: np.uint8}


class FashionMNISTMissing(FileNotFoundError):
    """The IDX files are not where Preflight looks; the message says how to get them."""


class FashionMNISTUnreadable(FashionMNISTMissing, ValueError):
    """An IDX file is there but damaged (cut short, not gzip, another format): no usable copy."""


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


def available(folder: str | Path | None = None) -> bool:
    """Whether :func:`find_dir` finds the files."""
    try:
        find_dir(folder)
    except FashionMNISTMissing:
        return False
    return True


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (LeCun's format: two zero bytes, the type code, the rank, big-endian int32
    dimensions, then the data) as a numpy array."""
    try:
        with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as handle:
            raw = handle.read()
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:  # damaged, cut short, or not gzip at all
        raise FashionMNISTUnreadable(_damaged(path, f"not a whole gzip file: {exc}")) from None
    if len(raw) < 4 + 4 * (raw[3] if len(raw) > 3 else 0) or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise FashionMNISTUnreadable(_damaged(path, f"not an unsigned-byte IDX file (header {raw[:4]!r})"))
    rank = raw[3]
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">i4", count=rank, offset=4))
    data = np.frombuffer(raw, dtype=_IDX_TYPES[raw[2]], offset=4 + 4 * rank)
    if data.size != int(np.prod(dims)):
        raise FashionMNISTUnreadable(
            _damaged(path, f"its header says {dims} ({int(np.prod(dims))} values), the file holds {data.size}")
        )
    return data.reshape(dims)


def _damaged(path: Path, why: str) -> str:
    return (
        f"{path} is {why}; reinstall it (`apt-get install --reinstall dataset-fashion-mnist`) or set {ENV} "
        "to a folder with whole copies"
    )


def read_arrays(folder: str | Path | None = None) -> dict[str, np.ndarray]:
    """The four arrays (``train_x``, ``train_y``, ``test_x``, ``test_y``), as stored (uint8)."""
    path = find_dir(folder)
    return {key: read_idx(_file(path, stem)) for key, stem in FILES.items()}  # type: ignore[arg-type]


def stratified(labels: np.ndarray, per_class: int, seed: int) -> np.ndarray:
    """Sorted indices of ``per_class`` samples of each class, drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    picks = [rng.permutation(np.flatnonzero(labels == c))[:per_class] for c in np.unique(labels)]
    return np.sort(np.concatenate(picks))


def standardized_subsets(
    folder: str | Path | None, train_per_class: int, test_per_class: int, resolution: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``x_train, y_train, x_test, y_test``: stratified subsets of the training and the test
    images, each image's pixel blocks averaged to ``resolution`` x ``resolution`` (it divides 28),
    scaled to [0, 1] and standardized with the training subset's one mean and deviation (float64
    images, int64 labels). The demo's split and the benchmark's are both cut from here."""
    if resolution < 1 or 28 % resolution:
        raise ValueError(f"resolution must divide 28, but got {resolution=}")
    for name, count in (("train_per_class", train_per_class), ("test_per_class", test_per_class)):
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:  # -1 sliced to 59,990 images
            raise ValueError(f"{name} must be an integer of at least 1, but got {name}={count!r}")
    arrays = read_arrays(folder)
    train = stratified(arrays["train_y"], train_per_class, seed)
    test = stratified(arrays["test_y"], test_per_class, seed)
    block = 28 // resolution
    x_tr, x_te = (
        (arrays[k][index].astype(np.float64) / 255.0)
        .reshape(-1, resolution, block, resolution, block)
        .mean(axis=(2, 4))
        for k, index in (("train_x", train), ("test_x", test))
    )
    mean, std = x_tr.mean(), x_tr.std()
    labels = (arrays["train_y"][train].astype(np.int64), arrays["test_y"][test].astype(np.int64))
    return (x_tr - mean) / std, labels[0], (x_te - mean) / std, labels[1]


def load_fashion_mnist(
    folder: str | Path | None = None,
    *,
    train_per_class: int = 300,
    val_per_class: int = 100,
    resolution: int = 14,
    seed: int = 0,
) -> Dataset:
    """A stratified subset of the training images and one of the test images (the validation
    split), as ``[1, resolution, resolution]`` images (:func:`standardized_subsets`). The defaults
    (3,000 + 1,000 images at 14 x 14) keep a CNN's epoch to seconds on a CPU."""
    x_tr, y_tr, x_val, y_val = standardized_subsets(folder, train_per_class, val_per_class, resolution, seed)
    shape = (-1, 1, resolution, resolution)
    return Dataset(
        x_train=torch.tensor(x_tr, dtype=torch.float32).reshape(shape),
        y_train=torch.tensor(y_tr),
        x_val=torch.tensor(x_val, dtype=torch.float32).reshape(shape),
        y_val=torch.tensor(y_val),
        n_classes=10,
    )

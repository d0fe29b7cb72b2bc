"""``nas.fashion_mnist.load_fashion_mnist``: the split the demo searches on, from the real files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nas.fashion_mnist import load_fashion_mnist


def test_the_demo_split_is_stratified_downsampled_and_standardized(fashion_mnist_dir: Path) -> None:
    data = load_fashion_mnist(fashion_mnist_dir, train_per_class=30, val_per_class=10, resolution=14)
    assert data.x_train.shape == (300, 1, 14, 14) and data.x_val.shape == (100, 1, 14, 14)
    assert data.input_shape == [1, 14, 14] and data.n_classes == 10
    assert torch.bincount(data.y_train).tolist() == [30] * 10 and torch.bincount(data.y_val).tolist() == [10] * 10
    assert abs(float(data.x_train.mean())) < 1e-4 and abs(float(data.x_train.std()) - 1.0) < 1e-2
    again = load_fashion_mnist(fashion_mnist_dir, train_per_class=30, val_per_class=10, resolution=14)
    assert torch.equal(again.x_train, data.x_train)  # the same images for the same seed
    other = load_fashion_mnist(fashion_mnist_dir, train_per_class=30, val_per_class=10, resolution=14, seed=1)
    assert not torch.equal(other.x_train, data.x_train)


@pytest.mark.parametrize("count", [-1, 0])
def test_a_subset_of_no_images_per_class_is_refused(fashion_mnist_dir: Path, count: int) -> None:
    """-1 sliced the stratified order to 59,990 images; 0 gave an empty set with a NaN deviation."""
    with pytest.raises(ValueError, match="train_per_class must be an integer of at least 1"):
        load_fashion_mnist(fashion_mnist_dir, train_per_class=count)

"""Fashion-MNIST read from its IDX files: the format, the missing-data message, the subsets."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest

from bench.pipeline.fashion_mnist import ENV, FashionMNISTMissing, find_dir, load_fashion_mnist, read_idx


def _write_idx(path, array: np.ndarray, compress: bool) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}i", *array.shape)
    blob = header + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(blob) if compress else blob)


def _fake_dataset(folder, per_class_train: int = 3, per_class_test: int = 2, compress: bool = True) -> None:
    rng = np.random.default_rng(0)
    for prefix, per_class in (("train", per_class_train), ("t10k", per_class_test)):
        labels = np.repeat(np.arange(10), per_class)
        images = rng.integers(0, 256, size=(len(labels), 28, 28))
        suffix = ".gz" if compress else ""
        _write_idx(folder / f"{prefix}-images-idx3-ubyte{suffix}", images, compress)
        _write_idx(folder / f"{prefix}-labels-idx1-ubyte{suffix}", labels, compress)


@pytest.mark.parametrize("compress", [False, True])
def test_an_idx_file_reads_back_as_the_array_written(tmp_path, compress):
    array = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    path = tmp_path / ("x.gz" if compress else "x")
    _write_idx(path, array, compress)
    np.testing.assert_array_equal(read_idx(path), array)


def test_a_file_that_is_not_unsigned_byte_idx_is_refused_with_its_header(tmp_path):
    path = tmp_path / "bad"
    path.write_bytes(bytes([0, 0, 0x0D, 1]) + struct.pack(">i", 1) + b"\0\0\0\0")
    with pytest.raises(ValueError, match="not an unsigned-byte IDX file"):
        read_idx(path)
    truncated = tmp_path / "short"
    truncated.write_bytes(bytes([0, 0, 0x08, 1]) + struct.pack(">i", 5) + b"\1\2")
    with pytest.raises(ValueError, match="header says"):
        read_idx(truncated)


def test_missing_data_raises_a_message_saying_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(FashionMNISTMissing) as error:
        find_dir(tmp_path)
    message = str(error.value)
    assert "apt-get install dataset-fashion-mnist" in message and ENV in message and str(tmp_path) in message


def test_the_environment_variable_points_at_another_folder(tmp_path, monkeypatch):
    _fake_dataset(tmp_path, compress=False)
    monkeypatch.setenv(ENV, str(tmp_path))
    assert find_dir() == tmp_path


def test_the_subsets_are_stratified_standardized_and_block_averaged(tmp_path):
    _fake_dataset(tmp_path, per_class_train=3, per_class_test=2)
    data = load_fashion_mnist(str(tmp_path), train_per_class=2, test_per_class=1)
    assert list(data.x_train.shape) == [20, 1, 14, 14] and list(data.x_test.shape) == [10, 1, 14, 14]
    assert np.bincount(data.y_train.numpy()).tolist() == [2] * 10
    assert np.bincount(data.y_test.numpy()).tolist() == [1] * 10
    assert abs(float(data.x_train.mean())) < 1e-5 and abs(float(data.x_train.std(unbiased=False)) - 1) < 1e-4
    flat = load_fashion_mnist(str(tmp_path), train_per_class=2, test_per_class=1, image=False, resolution=28)
    assert list(flat.x_train.shape) == [20, 784]
    # a 14x14 pixel is the mean of its 2x2 block: compare with the full-resolution values
    full = load_fashion_mnist(str(tmp_path), train_per_class=2, test_per_class=1, resolution=28)
    raw = full.x_train.double() * full.x_train.double().std(unbiased=False)  # undo the scale (mean ~ 0 shift)
    pooled = raw.reshape(20, 1, 14, 2, 14, 2).mean(dim=(3, 5))
    rescaled = (pooled - pooled.mean()) / pooled.std(unbiased=False)
    assert np.allclose(rescaled.numpy(), data.x_train.double().numpy(), atol=1e-4)
    with pytest.raises(ValueError, match="resolution must divide 28"):
        load_fashion_mnist(str(tmp_path), resolution=10)


def test_the_real_files_hold_sixty_and_ten_thousand_labelled_images(fashion_mnist_dir):
    images = read_idx(next(fashion_mnist_dir.glob("train-images-idx3-ubyte*")))
    labels = read_idx(next(fashion_mnist_dir.glob("t10k-labels-idx1-ubyte*")))
    assert images.shape == (60000, 28, 28) and labels.shape == (10000,)
    assert sorted(np.unique(labels).tolist()) == list(range(10))


def test_the_benchmark_split_has_four_hundred_training_images_per_class(fashion_mnist_dir):
    data = load_fashion_mnist()
    assert np.bincount(data.y_train.numpy()).tolist() == [400] * 10
    assert np.bincount(data.y_test.numpy()).tolist() == [200] * 10
    assert list(data.input_shape) == [1, 14, 14] and data.classes == 10

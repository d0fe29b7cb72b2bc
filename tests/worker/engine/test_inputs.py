"""worker.engine.inputs: the caller's data coerced to a batch, and targets checked against the
network's output (through ``condition``, where the errors surface)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from nas import parse_spec
from nas.examples import EXAMPLE_MLP
from nas.options import ConditionOptions
from worker.engine import condition
from worker.engine.inputs import batch, check_targets, label_note, pink_noise

LEAN = {"hessian_iterations": 3, "batch_size": 32, "diagnostics": False}
X8 = np.random.default_rng(2).standard_normal((8, 64)).astype(np.float32)  # usable inputs, for the targets' errors


@pytest.mark.parametrize("form", ["tensor", "array", "mapping"])
def test_a_real_batch_is_accepted(form: str) -> None:
    x = np.random.default_rng(0).standard_normal((40, 64)).astype(np.float32)
    y = np.random.default_rng(1).integers(0, 10, 40)
    data: Any = {"tensor": torch.from_numpy(x), "array": x, "mapping": {"x": x, "y": y}}[form]
    report = condition(EXAMPLE_MLP, data=data, options=LEAN)
    assert report.environment.data == "given" and report.environment.batch_size == 32


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (np.zeros((8, 63), np.float32), "input_shape"),
        ({"y": np.zeros(3)}, "'x' entry"),
        (np.zeros((1, 64), np.float32), "N >= 2"),
        (
            {"x": X8, "y": np.arange(8) + 5},
            r"in \[0, 9\] for 10 logits, but range over \[5, 12\]",
        ),
        (
            {"x": X8, "y": np.zeros((8, 2), np.int64)},
            "one integer per sample",
        ),
        ({"x": X8, "y": np.zeros(8, bool)}, "dtype torch.bool"),
        (
            {"x": X8, "y": np.zeros((8, 3), np.float32)},
            r"3 float target\(s\) per sample, but the network outputs \[10\]",
        ),
        ({"x": np.full((8, 64), np.nan, np.float32)}, "'x' holds NaN or infinite values"),
        ({"x": np.full((8, 64), np.inf, np.float32)}, "'x' holds NaN or infinite values"),
        (
            {"x": X8, "y": np.full((8, 10), np.nan, np.float32)},
            "'y' holds NaN or infinite values",
        ),
        (
            {"x": X8, "y": np.zeros(9, np.int64)},
            r"one row per sample of 'x' \(8\), but has 9",
        ),
        (
            {"x": X8, "y": np.zeros(7, np.int64)},
            r"one row per sample of 'x' \(8\), but has 7",
        ),
        ({"x": X8, "y": 3}, "but has a scalar"),
        ((X8, np.zeros(8, np.int64)), r"pass \{'x': x, 'y': y\}, not a pair"),
        ({"x": np.full((8, 64), 1e39)}, r"'x' holds NaN or infinite values .*read as float32, where \|v\| > 3.4e\+38"),
        ({"x": [["a"] * 64] * 8}, "'x' must be a tensor or an array of numbers"),
        ({"x": np.zeros((8, 64), np.float32)}, "the 8 samples conditioned on are all the same"),
        (np.full((8, 64), 3.0, np.float32), "the 8 samples conditioned on are all the same"),
        ([torch.zeros(64), torch.zeros(63)], "'x' must be a tensor or an array of numbers .*equal size"),
        ((torch.ones(8, 64), torch.zeros(8, 64)), r"pass \{'x': x, 'y': y\}, not a pair"),  # targets like inputs
    ],
    ids=[
        "input-shape",
        "no-x",
        "one-sample",
        "label-range",
        "label-shape",
        "boolean-labels",
        "float-width",
        "nan-inputs",
        "infinite-inputs",
        "nan-targets",
        "more-labels-than-inputs",
        "fewer-labels-than-inputs",
        "scalar-labels",
        "a-pair-not-a-mapping",
        "beyond-float32",
        "strings",
        "all-zero-inputs",
        "one-sample-repeated",
        "ragged-per-sample-tensors",
        "a-pair-of-equal-shapes",
    ],
)
def test_unusable_data_is_a_clear_error(data: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        condition(EXAMPLE_MLP, data=data, options=LEAN)


def test_an_all_zero_batch_is_refused_not_pruned_as_non_finite() -> None:
    """It was pruned at score -100 with "non-finite values in the forward pass": the forward pass
    was finite, the NaN a 0 / 0 in the tuning's loss. Every candidate of a search would have been
    pruned for a fault of the data."""
    with pytest.raises(ValueError, match="all the same"):
        condition(EXAMPLE_MLP, data={"x": np.zeros((16, 64), np.float32), "y": np.arange(16) % 10}, options=LEAN)


def test_samples_that_differ_only_past_the_batch_are_refused_as_the_same() -> None:
    x = np.zeros((40, 64), np.float32)
    x[35:] = 1.0  # beyond batch_size 32: never conditioned on
    with pytest.raises(ValueError, match="the 32 samples conditioned on are all the same"):
        condition(EXAMPLE_MLP, data=x, options=LEAN)


def test_a_list_of_per_sample_tensors_is_the_stacked_batch() -> None:
    """What indexing a dataset gives; torch.as_tensor refuses it ("only one element tensors")."""
    x = torch.from_numpy(np.random.default_rng(3).standard_normal((16, 64)).astype(np.float32))
    y = torch.arange(16) % 10
    opts = ConditionOptions.model_validate(LEAN)
    cpu = torch.device("cpu")
    listed = batch(parse_spec(EXAMPLE_MLP), {"x": list(x.double()), "y": list(y)}, opts, cpu)
    stacked = batch(parse_spec(EXAMPLE_MLP), {"x": x, "y": y}, opts, cpu)
    assert listed[0].dtype == torch.float32 and torch.equal(listed[0], stacked[0])
    assert listed[1] is not None and stacked[1] is not None
    assert torch.equal(listed[1], stacked[1])


def test_two_samples_of_the_wrong_width_are_not_taken_for_a_pair() -> None:
    with pytest.raises(ValueError, match=r"got \[2, 63\]$"):
        condition(EXAMPLE_MLP, data=[[0.0] * 63, [0.0] * 63], options=LEAN)


def test_values_past_the_samples_conditioned_on_are_not_read() -> None:
    """Only the first ``batch_size`` samples are conditioned on, so only they must be finite."""
    x = np.random.default_rng(0).standard_normal((40, 64)).astype(np.float32)
    x[35:] = np.nan
    report = condition(EXAMPLE_MLP, data={"x": x, "y": np.arange(40) % 10}, options=LEAN)  # batch_size 32
    assert report.environment.batch_size == 32


def test_more_samples_than_the_batch_keep_their_labels_in_step() -> None:
    """``x`` and ``y`` of equal length above ``batch_size`` are cut together to the batch."""
    x = torch.arange(100 * 64, dtype=torch.float32).reshape(100, 64)
    y = torch.arange(100) % 10
    opts = ConditionOptions.model_validate(LEAN)
    bx, by, source = batch(parse_spec(EXAMPLE_MLP), {"x": x, "y": y}, opts, torch.device("cpu"))
    assert by is not None
    assert source == "given" and bx.shape[0] == by.shape[0] == 32
    assert torch.equal(by, y[:32]) and torch.equal(bx, x[:32])


def test_no_data_is_a_seeded_gaussian_batch_of_the_input_shape() -> None:
    spec = {"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": 2}]}]}
    opts = ConditionOptions.model_validate({"batch_size": 8, "seed": 3})
    x, y, source = batch(parse_spec(spec), None, opts, torch.device("cpu"))
    again, _, _ = batch(parse_spec(spec), None, opts, torch.device("cpu"))
    assert x.shape == (8, 4) and y is None and source == "gaussian"
    assert torch.equal(x, again)


def test_the_pink_batch_is_the_default_white_draw_filtered() -> None:
    spec = parse_spec({"input_shape": [1, 16, 16], "blocks": [{"layers": [{"type": "flatten"}]}]})
    cpu = torch.device("cpu")
    pink, _, _ = batch(spec, None, ConditionOptions(batch_size=256, synthetic_inputs="pink"), cpu)
    white, _, source = batch(spec, None, ConditionOptions(batch_size=256), cpu)
    assert source == "gaussian" and torch.equal(pink, pink_noise(white))  # the same draw, filtered
    assert abs(float(pink.mean())) < 1e-5 and abs(float(pink.std()) - 1) < 1e-5
    neighbours = torch.corrcoef(torch.stack([pink[..., :-1].flatten(), pink[..., 1:].flatten()]))[0, 1]
    assert float(neighbours) > 0.4  # smooth: neighbouring pixels move together
    assert abs(float(torch.corrcoef(torch.stack([white[..., :-1].flatten(), white[..., 1:].flatten()]))[0, 1])) < 0.05


def test_pink_noise_power_falls_as_one_over_f_squared_over_the_last_two_dimensions() -> None:
    white = torch.randn((512, 2, 16, 16), generator=torch.Generator().manual_seed(0))
    power = torch.fft.fft2(pink_noise(white)).abs().pow(2).mean(dim=(0, 1))
    # radii 1/16 and 1/2 (8 x higher): amplitude 1/f gives 64 x less power, within sampling noise
    assert 40 < float(power[1, 0]) / float(power[8, 0]) < 100
    assert 40 < float(power[0, 1]) / float(power[0, 8]) < 100
    assert 0.8 < float(power[1, 0]) / float(power[0, 1]) < 1.25  # isotropic
    vector = pink_noise(torch.randn((512, 64), generator=torch.Generator().manual_seed(0)))
    spectrum = torch.fft.fft(vector).abs().pow(2).mean(dim=0)
    assert 10 < float(spectrum[2]) / float(spectrum[16]) < 100  # a vector: along its one dimension, 64 x


def test_check_targets_accepts_fitting_labels() -> None:
    check_targets(None, [10])
    check_targets(torch.tensor([0, 9, 3]), [10])
    check_targets(torch.zeros(3), [1])
    check_targets(torch.zeros(3, 2, 2), [4])


def test_label_note_reads_the_balance_over_the_networks_classes_not_the_labels_present() -> None:
    assert label_note(torch.tensor([0, 1] * 32), [2]) is None  # balanced over 2 outputs
    note = label_note(torch.tensor([0, 1] * 32), [10])  # 2 of 10 classes: a prior at 0.30 of ln 10
    assert note is not None and note.startswith("data 'y': the class labels are imbalanced (their entropy is 0.30")
    assert label_note(torch.tensor([0] * 58 + [1] * 6), [2]) is not None  # 90/10: 0.47 of ln 2
    assert label_note(torch.arange(64) % 10, [10]) is None
    assert label_note(torch.zeros(64), [1]) is None  # float targets
    assert label_note(None, [10]) is None


def test_the_report_notes_imbalanced_labels_and_not_balanced_ones() -> None:
    x = torch.randn(64, 64)
    skewed = condition(EXAMPLE_MLP, data={"x": x, "y": torch.tensor([0] * 58 + [1] * 6)}, options={"steps": 1})
    assert any(n.startswith("data 'y': the class labels are imbalanced") for n in skewed.notes)
    balanced = condition(EXAMPLE_MLP, data={"x": x, "y": torch.arange(64) % 10}, options={"steps": 1})
    assert not any("imbalanced" in n for n in balanced.notes)


@pytest.mark.parametrize("dtype", [np.int32, np.int16, np.uint8, np.uint16, np.uint32, np.uint64])
def test_class_labels_of_any_integer_type_condition_as_int64_labels_do(dtype: type) -> None:
    """int32 labels (numpy's default integer on Windows) made the probe fail inside cross-entropy,
    and the verdict was given without it; uint16 to uint64 could not be range-checked at all."""
    x = np.random.default_rng(4).standard_normal((32, 64)).astype(np.float32)
    labels = np.arange(32) % 10
    as_int64 = condition(EXAMPLE_MLP, data={"x": x, "y": labels.astype(np.int64)}, options=LEAN)
    other = condition(EXAMPLE_MLP, data={"x": x, "y": labels.astype(dtype)}, options=LEAN)
    assert other.score_fit == "with_probe" and other.tuning.probe is not None
    assert other.tuning.probe == as_int64.tuning.probe and other.score == as_int64.score


def test_a_uint64_label_past_int64_is_a_clear_error() -> None:
    y = np.arange(8, dtype=np.uint64)
    y[3] = 2**63 + 1
    with pytest.raises(ValueError, match="data 'y' holds a class label above 9223372036854775807"):
        condition(EXAMPLE_MLP, data={"x": X8, "y": y}, options=LEAN)


def test_float_targets_are_read_in_the_inputs_type() -> None:
    """float64 targets ran the probe's loss in float64; they are now the float32 the output is."""
    opts = ConditionOptions.model_validate(LEAN)
    targets = np.random.default_rng(5).standard_normal((8, 10))
    _, y, _ = batch(parse_spec(EXAMPLE_MLP), {"x": X8, "y": targets}, opts, torch.device("cpu"))
    assert y is not None and y.dtype == torch.float32
    assert torch.equal(y, torch.from_numpy(targets).float())

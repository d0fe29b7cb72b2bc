"""The candidate sampler and the bundled datasets."""

from __future__ import annotations

import pytest

import nas
from bench.pipeline.candidates import FAMILIES, sample_candidates
from bench.pipeline.datasets import DATASETS, load, load_key


def test_the_full_sample_has_160_valid_candidates_from_every_family():
    candidates = sample_candidates(160)
    assert len(candidates) == 160
    assert len({c.id for c in candidates}) == 160
    assert {c.family for c in candidates} == set(FAMILIES)
    for c in candidates:
        nas.parse_spec(c.spec)  # raises on an invalid spec


def test_the_sample_holds_the_designs_the_issue_asks_for():
    text = " ".join(str(c.spec) for c in sample_candidates(160))
    for needle in (
        "'sigmoid'",
        "'tanh'",
        "'batchnorm'",
        "'residual'",
        "'maxpool'",
        "'avgpool'",
        "'stride': 2",
        "'kernel': 5",
        "'kernel': 1",
        "bottleneck",
        "d=30",
    ):
        assert needle in text, needle


def test_sampling_is_deterministic_in_the_seed():
    assert sample_candidates(20, seed=3) == sample_candidates(20, seed=3)
    assert sample_candidates(20, seed=3) != sample_candidates(20, seed=4)


@pytest.mark.parametrize("name", DATASETS)
def test_every_dataset_loads_offline_with_a_standardized_train_split(name):
    data = load(name)
    assert len(data.x_train) > len(data.x_test) > 0
    assert data.x_train.mean().abs() < 0.05
    assert set(data.y_train.unique().tolist()) == set(range(data.classes))


def test_digits_as_images_keeps_the_samples():
    flat, image = load("digits"), load_key("digits_image")
    assert image.input_shape == [1, 8, 8]
    assert (image.x_train.flatten(1) == flat.x_train).all()

"""The tuning-variants ablation's cache: a run of another engine is kept when this engine tunes
the same init, and retrained when the init moved."""

from __future__ import annotations

import copy

import pytest

from bench.ablations import tuning_variants
from bench.pipeline.run import engine_version, read_json, write_json
from bench.v2.candidates import dev_set


@pytest.fixture(scope="module")
def candidate():
    return next(c for c in dev_set() if c.dataset == "digits" and c.family == "plain_mlp")


@pytest.fixture(scope="module")
def conditioned(candidate):
    return tuning_variants._conditioned("default", candidate)


def _older_run(conditioned):
    """A cached run as an earlier engine left it: the same init, a stale score, its training."""
    run = copy.deepcopy(conditioned) | {"engine": "0123456789abcdef", "score": -9.0, "seconds": 1.0}
    return run | {"sgd": {"final_loss": [0.5], "best": 0, "diverged": [False], "test_accuracy": [0.9]}}


def test_a_run_of_another_engine_is_kept_with_this_engines_figures_when_the_init_is_the_same(candidate, conditioned):
    kept = tuning_variants._revalidated("default", candidate, _older_run(conditioned))
    assert kept is not None
    assert kept["engine"] == engine_version()
    assert kept["score"] == conditioned["score"]  # this engine's figure, not the stale one
    assert kept["sgd"]["final_loss"] == [0.5]  # the training is what was cached


def test_a_run_whose_init_moved_beyond_the_tolerance_is_stale(candidate, conditioned):
    moved = _older_run(conditioned)
    first = sorted(moved["scales"])[0]
    moved["scales"][first] *= 1 + 1e-4
    assert tuning_variants._revalidated("default", candidate, moved) is None
    wiggled = _older_run(conditioned)
    wiggled["scales"][first] *= 1 + 1e-9  # the last digits a rerun moves on another machine
    assert tuning_variants._revalidated("default", candidate, wiggled) is not None
    shifted = _older_run(conditioned)
    shifted["bias_shifts"] = None  # a run from before the centering
    assert tuning_variants._revalidated("default", candidate, shifted) is None


def test_run_one_keeps_a_revalidated_run_without_training(tmp_path, monkeypatch, candidate, conditioned):
    monkeypatch.setattr(tuning_variants, "OUT", tmp_path)
    path = tmp_path / "default" / f"{candidate.id}.json"
    write_json(path, _older_run(conditioned))
    message = tuning_variants.run_one(("default", candidate.to_json()))
    assert "kept" in message
    stored = read_json(path)
    assert stored["engine"] == engine_version() and stored["seconds"] == 1.0  # not retrained
    assert tuning_variants.run_one(("default", candidate.to_json())).endswith("cached")

"""The tuning-variants ablation's cache: a run of another engine is kept when this engine tunes
the same init, and retrained when the init moved."""

from __future__ import annotations

import copy

import pytest
import torch

from bench.ablations import tuning_variants
from bench.pipeline.run import engine_version, read_json, write_json
from bench.v2.candidates import dev_set
from nas.testing import mlp


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


def test_a_run_is_stale_when_the_init_of_any_of_its_training_seeds_moved(candidate, conditioned):
    seed_1 = tuning_variants._conditioned("default", candidate, 1)
    older = _older_run(conditioned) | {"seeds": {"1": copy.deepcopy(seed_1) | {"engine": "0123456789abcdef"}}}
    kept = tuning_variants._revalidated("default", candidate, older)
    assert kept is not None and kept["seeds"]["1"]["engine"] == engine_version()
    first = sorted(seed_1["scales"])[0]
    older["seeds"]["1"]["scales"][first] *= 1 + 1e-4  # seed 0's init is the same; seed 1's moved
    assert tuning_variants._revalidated("default", candidate, older) is None


def test_run_one_keeps_a_revalidated_run_without_training(tmp_path, monkeypatch, candidate, conditioned):
    monkeypatch.setattr(tuning_variants, "OUT", tmp_path)
    path = tmp_path / "default" / f"{candidate.id}.json"
    write_json(path, _older_run(conditioned))
    message = tuning_variants.run_one(("default", candidate.to_json(), 1))
    assert "kept" in message
    stored = read_json(path)
    assert stored["engine"] == engine_version() and stored["seconds"] == 1.0  # not retrained
    assert tuning_variants.run_one(("default", candidate.to_json(), 1)).endswith("cached")


def _run(loss: float, accuracy: float = 0.9) -> dict:
    return {"final_loss": [loss], "best": 0, "diverged": [False], "test_accuracy": [accuracy]}


def test_run_one_trains_only_the_seeds_a_cached_run_lacks_each_from_its_own_draw(
    tmp_path, monkeypatch, candidate, conditioned
):
    monkeypatch.setattr(tuning_variants, "OUT", tmp_path)
    path = tmp_path / "default" / f"{candidate.id}.json"
    seed_0 = copy.deepcopy(conditioned) | {"seconds": 1.0, "sgd": _run(0.123), "adamw": _run(0.456)}
    write_json(path, seed_0)
    message = tuning_variants.run_one(("default", candidate.to_json(), 2))
    assert message.endswith(" s") and "2 seeds" in message
    stored = read_json(path)
    assert stored["sgd"] == seed_0["sgd"] and stored["scales"] == seed_0["scales"]  # seed 0 kept as it was
    seed_1 = stored["seeds"]["1"]
    assert seed_1["seed"] == 1 and seed_1["scales"] != seed_0["scales"]  # conditioned on seed 1's draw
    assert len(seed_1["sgd"]["final_loss"]) == 3 and len(seed_1["adamw"]["final_loss"]) == 3  # trained
    assert tuning_variants._seed_count(stored) == 2
    assert tuning_variants.run_one(("default", candidate.to_json(), 2)).endswith("cached")


def test_a_paired_share_reads_both_runs_at_the_training_seeds_both_have(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning_variants, "OUT", tmp_path)
    first = dev_set()[:2]
    three = {"sgd": _run(1.0), "seeds": {"1": {"sgd": _run(0.1)}, "2": {"sgd": _run(0.1)}}}  # median 0.1
    for c in first:
        write_json(tmp_path / "a" / f"{c.id}.json", three)
        write_json(tmp_path / "b" / f"{c.id}.json", {"sgd": _run(0.5)})
    one = tuning_variants.paired_shares("a", "b", first)["sgd"]
    assert one["share"] == 0.0 and one["seeds"] == 1  # seed 0 alone: 1.0 against 0.5
    for c in first:
        write_json(tmp_path / "b" / f"{c.id}.json", {"sgd": _run(0.5), "seeds": {"1": {"sgd": _run(0.7)}}})
    two = tuning_variants.paired_shares("a", "b", first)["sgd"]
    assert two["share"] == 1.0 and two["seeds"] == 2  # medians of two seeds each: 0.55 against 0.6
    assert tuning_variants._best_loss(three, "sgd") == pytest.approx(0.1)


SMALL_MLP = mlp(2, "relu")  # two hidden layers of 32 units and a head, on digits' 64 inputs


def _channel_moments(model, x):
    """Per linear layer: its output channels' stds and means on ``x``."""
    seen = {}

    def record(name):
        def hook(_module, _args, out):
            seen[name] = (out.detach().double().std(0, unbiased=False), out.detach().double().mean(0))

        return hook

    handles = [m.register_forward_hook(record(n)) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        model(x)
    for handle in handles:
        handle.remove()
    return seen


def test_equalizing_gives_every_layer_s_channels_one_std_at_the_layer_s_rms_and_zero_mean():
    import nas
    from bench.v2.stages import BATCH, dataset

    x, _ = dataset("digits").batch(BATCH)
    model = nas.build_model(SMALL_MLP, seed=0)
    before = _channel_moments(model, x)
    after = _channel_moments(tuning_variants._equalized_(model, x), x)
    first = sorted(before)[0]  # its input is the batch itself, so its RMS is the start's
    rms = before[first][0].pow(2).mean().sqrt()
    assert after[first][0].pow(2).mean().sqrt().item() == pytest.approx(rms.item(), rel=1e-5)
    for name, (std, mean) in after.items():
        assert float(before[name][0].std() / before[name][0].mean()) > 0.05, name  # there was a spread
        assert before[name][1].abs().max() > 0.05 * before[name][0].max(), name  # and an offset
        assert torch.allclose(std, std.max().expand_as(std), rtol=1e-4), name  # one std for every channel
        assert mean.abs().max() < 1e-4 * float(std.max()), name


def test_equalizing_to_a_given_std_puts_every_channel_there():
    import nas
    from bench.v2.stages import BATCH, dataset

    x, _ = dataset("digits").batch(BATCH)
    model = tuning_variants._equalized_(nas.build_model(SMALL_MLP, seed=0), x, std_target=1.0)
    for name, (std, mean) in _channel_moments(model, x).items():
        assert torch.allclose(std, torch.ones_like(std), rtol=1e-4), name
        assert mean.abs().max() < 1e-4, name


def _rounded(shares: dict, protocol: str) -> tuple[float, float, float]:
    r = shares[protocol]
    return round(r["share"], 2), round(r["low"], 2), round(r["high"], 2)


def _both(shares: dict) -> tuple[tuple[float, float, float], ...]:
    """The share and its interval, rounded as docs quote them, under S then W."""
    return _rounded(shares, "sgd"), _rounded(shares, "adamw")


def test_a_rule_picks_its_variant_by_whether_the_network_has_a_convolution():
    assert tuning_variants._has_conv({"blocks": [{"layers": [{"type": "conv2d", "out": 8}]}]})
    assert tuning_variants._has_conv({"blocks": [{"residual": {"layers": [{"type": "conv2d"}]}}]})
    assert not tuning_variants._has_conv(SMALL_MLP)


# every share docs/conditioning.md quotes from the committed caches: (sample, A, B, on test accuracy,
# (S, W)), each the share of candidates where A does better than B and its interval, rounded as quoted
QUOTED_SHARES = [
    ("fresh", "default_equalized", "default", False, ((0.66, 0.56, 0.75), (0.67, 0.57, 0.76))),
    ("fresh", "conv_ddi", "default", False, ((0.53, 0.47, 0.60), (0.55, 0.49, 0.62))),
    ("fresh", "default_equalized", "default", True, ((0.47, 0.37, 0.57), (0.59, 0.50, 0.68))),
    ("dev", "default_equalized", "default", False, ((0.60, 0.54, 0.66), (0.59, 0.53, 0.65))),
    ("dev", "ddi", "default", False, ((0.49, 0.43, 0.56), (0.49, 0.43, 0.55))),
    ("fresh2", "default_equalized", "default", False, ((0.58, 0.49, 0.68), (0.67, 0.58, 0.75))),
    ("fresh2", "default_equalized", "default", True, ((0.50, 0.40, 0.59), (0.58, 0.49, 0.67))),
    ("fresh2", "default_equalized", "lsuv_equalized", False, ((0.53, 0.44, 0.63), (0.46, 0.36, 0.56))),
    ("fresh2", "default", "lsuv", False, ((0.59, 0.49, 0.69), (0.73, 0.64, 0.80))),
    ("fresh2", "default", "lsuv", True, ((0.61, 0.51, 0.70), (0.69, 0.60, 0.77))),
    ("fresh2", "lsuv_equalized", "lsuv", True, ((0.61, 0.51, 0.70), (0.73, 0.64, 0.80))),
    # the third sample ran only its networks with a convolution, read through the rule it tested
    ("fresh3", "conv_equalized", "default", False, ((0.70, 0.57, 0.83), (0.72, 0.60, 0.85))),
    ("fresh3", "conv_equalized", "default", True, ((0.62, 0.49, 0.76), (0.62, 0.47, 0.74))),
    ("fresh3", "conv_equalized", "lsuv_equalized", False, ((0.57, 0.43, 0.72), (0.47, 0.32, 0.62))),
    ("fresh3", "conv_equalized", "lsuv", False, ((0.77, 0.64, 0.87), (0.85, 0.74, 0.94))),
    ("fresh3", "lsuv_equalized", "lsuv", True, ((0.72, 0.60, 0.84), (0.82, 0.72, 0.91))),
]


def _sample(name: str) -> list:
    from bench.v2.candidates import fresh_set

    return dev_set() if name == "dev" else fresh_set(sample=name)


@pytest.mark.parametrize(
    ("sample", "first", "second", "accuracy", "quoted"),
    QUOTED_SHARES,
    ids=[f"{s}-{a}-vs-{b}-{'accuracy' if acc else 'loss'}" for s, a, b, acc, _ in QUOTED_SHARES],
)
def test_the_shares_docs_quote_are_what_the_committed_caches_give(sample, first, second, accuracy, quoted):
    assert _both(tuning_variants.paired_shares(first, second, _sample(sample), accuracy=accuracy)) == quoted


def test_each_sample_is_read_at_the_candidates_and_seeds_docs_state():
    fresh = tuning_variants.paired_shares("default_equalized", "default", _sample("fresh"))
    assert fresh["sgd"]["n"] == 102 and fresh["sgd"]["family"]["bn_mlp"] == pytest.approx(4 / 9)
    fresh2 = tuning_variants.paired_shares("default_equalized", "default", _sample("fresh2"))
    assert fresh2["sgd"]["n"] == 102 and fresh2["sgd"]["seeds"] == 3 and fresh2["adamw"]["seeds"] == 3
    fresh3 = tuning_variants.paired_shares("conv_equalized", "default", _sample("fresh3"))
    assert fresh3["sgd"]["n"] == 47 and fresh3["sgd"]["seeds"] == 3
    assert set(fresh3["sgd"]["family"]) == {"cnn", "fm_cnn", "fm_rescnn"}

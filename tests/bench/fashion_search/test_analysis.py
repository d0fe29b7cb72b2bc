"""The search's figures: the incumbent is chosen by validation, compute counts conditioning, the
perfect gate skips exactly the trials that did not train."""

from __future__ import annotations

import math

import pytest

from bench.fashion_search.analysis import (
    NEVER,
    best_at,
    compute_to_reach,
    figures,
    in_macs,
    incumbent_path,
    perfect_gate,
    seed_figures,
)


def _trial(val: float | None, test: float | None, train: float, condition: float = 0.0, state: str = "complete"):
    return {
        "name": "net",
        "state": state,
        "final_val": val if state == "complete" else None,
        "test": test,
        "train_seconds": train,
        "condition_seconds": condition,
        "params": {},
        "lr": 0.01,
    }


def _forward_gmacs(params: dict) -> float:
    import optuna

    from bench.fashion_search.space import search_space
    from nas.summary import summarize

    return summarize(search_space(optuna.trial.FixedTrial(params))[0]).macs / 1e9


def test_the_incumbent_is_the_best_validation_accuracy_not_the_best_test_accuracy():
    trials = [_trial(0.8, 0.70, 1.0), _trial(0.7, 0.95, 1.0), _trial(0.9, 0.85, 1.0)]
    assert incumbent_path(trials) == [(1.0, 0.70), (2.0, 0.70), (3.0, 0.85)]


def test_compute_to_reach_charges_conditioning_and_pruned_trials_until_the_incumbent_reaches_the_target():
    trials = [
        _trial(None, None, 0.0, condition=2.0, state="pruned-before"),
        _trial(0.6, 0.5, 3.0, condition=1.0),
        _trial(None, 0.4, 1.5, state="pruned-during"),
        _trial(0.9, 0.88, 4.0, condition=1.0),
    ]
    assert compute_to_reach(trials, 0.88) == pytest.approx(2.0 + 4.0 + 1.5 + 5.0)
    assert compute_to_reach(trials, 0.89) == math.inf
    assert best_at(trials, 7.9) == 0.5  # the third trial ends at 7.5, the last at 12.5
    assert math.isnan(best_at(trials, 1.0))


def test_the_perfect_gate_skips_for_free_exactly_the_trials_that_did_not_train():
    trials = [_trial(0.1, 0.1, 10.0), _trial(0.49, 0.5, 5.0), _trial(0.8, 0.8, 2.0), _trial(0.9, 0.9, 3.0)]
    skipped = perfect_gate(trials)
    assert [t["state"] for t in skipped] == ["pruned-before", "pruned-before", "complete", "complete"]
    assert compute_to_reach(skipped, 0.9) == 5.0
    assert compute_to_reach(trials, 0.9) == 20.0


def test_seed_figures_compare_each_search_with_the_ungated_one_and_the_perfect_gate():
    ungated = [_trial(0.1, 0.1, 4.0), _trial(0.8, 0.8, 2.0), _trial(0.9, 0.9, 3.0)]
    # the gate skipped the failing network (1 s of conditioning each) and trained the others as ungated did
    gated = [
        _trial(None, None, 0.0, condition=1.0, state="pruned-before"),
        _trial(0.8, 0.8, 2.0, condition=1.0),
        _trial(0.9, 0.9, 3.0, condition=1.0),
    ]
    got = seed_figures({"no gate": ungated, "preflight gate": gated})
    assert got["target"] == 0.9
    assert got["perfect_ratio"] == pytest.approx(5.0 / 9.0)
    gate = got["searches"]["preflight gate"]
    assert gate["ratio"] == pytest.approx(8.0 / 9.0)
    assert gate["realised"] == pytest.approx((1 - 8.0 / 9.0) / (1 - 5.0 / 9.0))
    # at the gate's whole compute (8 s) the ungated search's incumbent was its 0.8 network
    assert gate["equal_compute_difference"] == pytest.approx(0.9 - 0.8)
    assert got["searches"]["no gate"]["ratio"] == 1.0


def test_figures_over_seeds_give_the_median_ratio_with_an_interval():
    per_seed = {}
    for seed, cost in enumerate((1.0, 2.0, 4.0, 8.0, 16.0)):
        ungated = [_trial(0.1, 0.1, cost), _trial(0.9, 0.9, 1.0)]
        gated = [_trial(None, None, 0.0, condition=0.5, state="pruned-before"), _trial(0.9, 0.9, 1.0)]
        per_seed[seed] = seed_figures({"no gate": ungated, "preflight gate": gated})
    gate = figures(per_seed)["searches"]["preflight gate"]
    assert gate["ratio"].point == pytest.approx(1.5 / 5.0)
    assert gate["ratio"].low <= gate["ratio"].point <= gate["ratio"].high
    # at 1.5 s the ungated search had finished its failing trial (1 s) once, nothing on the other seeds
    assert gate["equal_compute_difference"].point == pytest.approx(0.8)


def test_a_seed_whose_gated_search_never_reached_the_target_realised_none_of_the_saving_not_nothing_known():
    """Such seeds were left out of the realised share's median (nan), which then stood on the seeds
    where the gate did reach the target: three never-reaching seeds of ten lifted it from 0.65 to 1.74."""
    per_seed = {}
    for seed in range(5):
        ungated = [_trial(0.1, 0.1, 4.0), _trial(0.9, 0.9, 1.0)]  # a perfect gate's ratio: 1 / 5
        if seed < 2:  # skipped the failing network, reached the best: realised (1 - 2/5) / (4/5) = 0.75
            gated = [_trial(None, None, 0.0, condition=1.0, state="pruned-before"), _trial(0.9, 0.9, 1.0)]
        else:  # skipped the best network too: never reached it
            gated = [_trial(0.1, 0.1, 4.0), _trial(None, None, 0.0, condition=1.0, state="pruned-before")]
        per_seed[seed] = seed_figures({"no gate": ungated, "preflight gate": gated})
    assert per_seed[0]["searches"]["preflight gate"]["realised"] == pytest.approx(0.75)
    assert per_seed[4]["searches"]["preflight gate"]["realised"] == -math.inf
    realised = figures(per_seed)["searches"]["preflight gate"]["realised"]
    assert realised.point == -NEVER and realised.low == -NEVER
    assert realised.high in (pytest.approx(0.75), -NEVER)  # each end a resample's median, none interpolated with -NEVER
    # an even count: the middle pair of 0.75 and "none" is "none", not their average (-499,999,999.6)
    del per_seed[4]  # two reached, two never
    even = figures(per_seed)["searches"]["preflight gate"]["realised"]
    assert even.point == -NEVER and even.high in (pytest.approx(0.75), -NEVER)


def test_an_interval_end_of_a_median_over_seeds_is_never_interpolated_with_the_never_stand_in():
    """A linear percentile between a resample's median ratio and ``NEVER`` gave ends like 975,000,000."""
    per_seed = {}
    for seed in range(8):
        ungated = [_trial(0.1, 0.1, 4.0), _trial(0.9, 0.9, 1.0)]
        reached = [_trial(None, None, 0.0, condition=1.0, state="pruned-before"), _trial(0.9, 0.9, 1.0)]
        never = [_trial(0.1, 0.1, 4.0), _trial(0.8, 0.8, 1.0)]
        per_seed[seed] = seed_figures({"no gate": ungated, "preflight gate": never if seed < 6 else reached})
    ratio = figures(per_seed)["searches"]["preflight gate"]["ratio"]
    assert ratio.point == NEVER
    assert ratio.low in (pytest.approx(2.0 / 5.0), NEVER)


def test_a_search_that_has_finished_nothing_yet_counts_as_chance_at_equal_compute():
    ungated = [_trial(0.9, 0.9, 10.0)]
    gated = [_trial(0.7, 0.7, 2.0, condition=1.0)]
    assert seed_figures({"no gate": ungated, "g": gated})["searches"]["g"]["equal_compute_difference"] == (
        pytest.approx(0.7 - 0.1)
    )


def test_in_macs_charges_three_forward_passes_per_training_step_and_counted_conditioning_steps(residual_params):
    params = residual_params | {"lr": 0.01}
    forward = _forward_gmacs(params)
    trial = _trial(0.8, 0.8, 99.0, condition=99.0) | {"params": params, "train_steps": 94, "epochs": 1}
    trial["condition_steps"] = 15.0
    got = in_macs({"s": [trial]})["s"][0]
    assert got["train_seconds"] == pytest.approx((3 * 64 * 94 + 1000) * forward)
    assert got["condition_seconds"] == pytest.approx(3 * 64 * 15 * forward)


def test_the_skipping_alone_is_the_gate_against_the_search_trained_the_same_way_without_skipping():
    per_seed = {}
    for seed in range(3):
        ungated = [_trial(0.1, 0.1, 8.0), _trial(0.9, 0.9, 2.0)]  # reaches the best at 10 s
        tuned = [_trial(0.8, 0.8, 3.0, condition=1.0), _trial(0.9, 0.9, 2.0, condition=1.0)]  # at 7 s
        gated = [_trial(None, None, 0.0, condition=1.0, state="pruned-before"), _trial(0.9, 0.9, 2.0, condition=1.0)]
        per_seed[seed] = seed_figures({"no gate": ungated, "tuned, no gate": tuned, "preflight gate": gated})
    got = figures(per_seed)["searches"]
    assert got["preflight gate"]["ratio"].point == pytest.approx(0.4)
    assert got["preflight gate"]["skipping_ratio"].point == pytest.approx(4.0 / 7.0)
    assert got["tuned, no gate"]["skipping_ratio"].point == pytest.approx(1.0)


def test_peer_comparisons_count_ties_as_half_and_hold_the_pairs_together():
    from bench.fashion_search.peers import compare

    rows = [
        {"tuned": 0.8, "lsuv": 0.7, "lsuv_fixed": 0.8, "spec_fixed": 0.1},
        {"tuned": 0.6, "lsuv": 0.7, "lsuv_fixed": 0.5, "spec_fixed": 0.5},
        {"tuned": 0.9, "lsuv": 0.9, "lsuv_fixed": 0.9, "spec_fixed": 0.9},
    ]
    got = compare(rows)
    assert got["tuned>lsuv"]["share"].point == pytest.approx(1.5 / 3)
    assert got["tuned>lsuv"]["difference"].point == pytest.approx(0.0)
    assert got["lsuv>spec_fixed"]["share"].point == pytest.approx(2.5 / 3)
    assert got["tuned>spec_fixed"]["difference"].point == pytest.approx((0.7 + 0.1 + 0.0) / 3)


def test_a_seed_that_never_reaches_the_target_widens_the_interval_to_never():
    from bench.fashion_search.analysis import NEVER

    per_seed = {}
    for seed, reaches in enumerate((True, True, True, False, True)):
        ungated = [_trial(0.1, 0.1, 4.0), _trial(0.9, 0.9, 1.0)]
        gated = [_trial(0.9 if reaches else 0.5, 0.9 if reaches else 0.5, 2.0, condition=0.5)]
        per_seed[seed] = seed_figures({"no gate": ungated, "preflight gate": gated})
    ratio = figures(per_seed)["searches"]["preflight gate"]["ratio"]
    assert ratio.point == pytest.approx(2.5 / 5.0)
    assert ratio.high == NEVER  # resamples with three or more "never" seeds have a "never" median


def test_the_median_of_an_even_count_whose_upper_middle_never_reached_the_target_is_never():
    from bench.fashion_search.analysis import NEVER

    per_seed = {}
    for seed, reaches in enumerate((True, True, False, False)):
        ungated = [_trial(0.1, 0.1, 4.0), _trial(0.9, 0.9, 1.0)]
        gated = [_trial(0.9 if reaches else 0.5, 0.9 if reaches else 0.5, 2.0, condition=0.5)]
        per_seed[seed] = seed_figures({"no gate": ungated, "preflight gate": gated})
    ratio = figures(per_seed)["searches"]["preflight gate"]["ratio"]
    assert ratio.point == NEVER  # (0.5 + never) / 2, not a finite average with the stand-in
    assert ratio.high == NEVER and ratio.low == pytest.approx(2.5 / 5.0)


def test_in_macs_charges_no_validation_after_a_training_diverged(residual_params):
    params = residual_params | {"lr": 0.3}
    forward = _forward_gmacs(params)
    # 4 epochs reported, diverged 10 steps into the second: one validated epoch (94 steps each)
    trial = _trial(0.1, 0.0, 1.0) | {"params": params, "train_steps": 94 + 10, "epochs": 4}
    got = in_macs({"s": [trial]})["s"][0]
    assert got["train_seconds"] == pytest.approx((3 * 64 * 104 + 1000 * 1) * forward)

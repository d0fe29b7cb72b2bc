"""The NAS-Bench-201 and ViT search spaces: the benchmark's ops and edge order, every cell a valid
spec, and both usable in an Optuna objective exactly as the chain spaces are."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import optuna
import pytest

import nas.space
from nas.canonical import spec_hash
from nas.space import (
    NB201_EDGES,
    NB201_OPS,
    NASBench201Space,
    SearchSpace,
    ViTSpace,
    nasbench201_arch_string,
    nasbench201_cells,
    nasbench201_spec,
    parse_nasbench201_arch,
    vit_spec,
)
from nas.validate import parse_spec

optuna.logging.set_verbosity(optuna.logging.WARNING)

# NAS-Bench-201's best CIFAR-10 cell, as the benchmark writes it
BEST = "|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|skip_connect~0|nor_conv_3x3~1|nor_conv_3x3~2|"


def test_the_space_has_the_benchmarks_ops_edges_and_15625_cells() -> None:
    assert NB201_OPS == ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
    assert NB201_EDGES == ((0, 1), (0, 2), (1, 2), (0, 3), (1, 3), (2, 3))
    cells = list(nasbench201_cells())
    assert len(cells) == len(set(cells)) == 15_625


def test_arch_strings_round_trip_through_op_indices() -> None:
    names = parse_nasbench201_arch(BEST)
    assert names == ("nor_conv_3x3", "nor_conv_3x3", "nor_conv_3x3", "skip_connect", "nor_conv_3x3", "nor_conv_3x3")
    indices = [NB201_OPS.index(n) for n in names]
    assert nasbench201_arch_string(indices) == BEST
    assert spec_hash(parse_spec(nasbench201_spec(BEST))) == spec_hash(parse_spec(nasbench201_spec(indices)))


def test_an_arch_string_puts_each_op_on_the_edge_it_names_in_any_order() -> None:
    """Ops were placed by their position in the string: the two entries of node 2 written in the
    other order swapped the ops of edges 0->2 and 1->2, with no error."""
    reordered = "|nor_conv_3x3~0|+|skip_connect~1|none~0|+|avg_pool_3x3~0|nor_conv_1x1~1|none~2|"
    canonical = "|nor_conv_3x3~0|+|none~0|skip_connect~1|+|avg_pool_3x3~0|nor_conv_1x1~1|none~2|"
    assert parse_nasbench201_arch(reordered) == parse_nasbench201_arch(canonical)
    assert nasbench201_arch_string(parse_nasbench201_arch(reordered)) == canonical


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ("|nor_conv_3x3~0|+|none~0|skip_connect~0|+|avg_pool_3x3~0|nor_conv_1x1~1|none~2|", "edge 0->2 twice"),
        ("|nor_conv_3x3~0|+|none~0|skip_connect~1|none~0|+|avg_pool_3x3~0|nor_conv_1x1~1|", "edge 0->2 twice"),
        ("|nor_conv_3x3~0|+|none~0|+|avg_pool_3x3~0|nor_conv_1x1~1|none~2|", "no op on edge 1->2"),
        ("|nor_conv_3x3~0|+|none~0|none~\u00b2|+|none~0|none~1|none~2|", "at 'none~\u00b2'"),  # int() refused it
    ],
)
def test_an_arch_string_with_an_edge_repeated_missing_or_unreadable_is_refused_naming_it(bad: str, words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        parse_nasbench201_arch(bad)


@pytest.mark.parametrize(
    "bad", ["|conv~0|+|none~0|none~1|+|none~0|none~1|none~2|", "|none~1|", [0, 1, 2], [0] * 5 + [7]]
)
def test_malformed_cells_are_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        nasbench201_spec(bad)  # type: ignore[arg-type]


def test_a_sample_of_cells_all_build_into_distinct_valid_specs() -> None:
    cells = list(nasbench201_cells())[::97]
    hashes = {spec_hash(parse_spec(nasbench201_spec(c, channels=4, cells_per_stage=1))) for c in cells}
    assert len(hashes) == len(cells)


def _objective(space: SearchSpace) -> Callable[[optuna.Trial], float]:
    def objective(trial: optuna.Trial) -> float:
        spec = parse_spec(space(trial))
        return float(len(spec.blocks))

    return objective


def test_nasbench201_space_runs_in_an_optuna_study() -> None:
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
    study.optimize(_objective(NASBench201Space(channels=4, cells_per_stage=1)), n_trials=12)
    assert set(study.best_params) == {f"edge_{s}_{t}" for s, t in NB201_EDGES}
    fixed = optuna.trial.FixedTrial({f"edge_{s}_{t}": "nor_conv_3x3" for s, t in NB201_EDGES})
    assert NASBench201Space()(fixed)["name"] == nasbench201_arch_string([3] * 6)


def test_vit_space_runs_in_an_optuna_study_and_refuses_impossible_ranges() -> None:
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
    study.optimize(_objective(ViTSpace(depth=(1, 3))), n_trials=12)
    assert set(study.best_params) == {"depth", "width", "head_dim", "mlp_ratio", "patch"}
    spec = ViTSpace()(optuna.trial.FixedTrial({"depth": 2, "width": 64, "head_dim": 16, "mlp_ratio": 2.0, "patch": 7}))
    attention = spec["blocks"][1]["layers"][0]["body"][1]
    assert attention == {"type": "attention", "heads": 4}
    assert spec["blocks"][0]["layers"][0] == {"type": "patch_embed", "patch": 7, "out": 64}
    with pytest.raises(ValueError, match="patch 5 must divide"):
        ViTSpace(patches=(5,))
    with pytest.raises(ValueError, match="every head_dim must divide every width"):
        ViTSpace(widths=(48,), head_dims=(32,))


@pytest.mark.parametrize("field", ["widths", "head_dims", "patches"])
def test_an_empty_choice_of_the_vit_space_is_refused_when_the_space_is_made(field: str) -> None:
    """Optuna refused it only at the first trial, in its own words."""
    overrides: dict[str, Any] = {field: ()}
    with pytest.raises(ValueError, match=f"{field} must be a non-empty list"):
        ViTSpace(**overrides)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: ViTSpace(mlp_ratios=(float("inf"),)), "mlp_ratios must be positive finite"),
        (lambda: vit_spec(depth=-1, width=32, heads=4), "depth must be an integer of at least 0"),
        (lambda: ViTSpace(mlp_ratios=(2.0, float("nan"))), "mlp_ratios must be positive finite"),
        (lambda: NASBench201Space(input_shape=(3, 2, 2)), "the skeleton cannot take input_shape=[3, 2, 2]"),
        (lambda: NASBench201Space(channels=16.5), "channels must be an integer"),  # type: ignore[arg-type]
        (lambda: NASBench201Space(channels="16"), "channels must be an integer"),  # type: ignore[arg-type]
        (lambda: ViTSpace(widths=(2**30,), head_dims=(2**30,), mlp_ratios=(4.0,)), "reach 4294967296 units"),
    ],
    ids=[
        "vit-inf-ratio",
        "vit-negative-depth",
        "vit-nan-ratio",
        "nb201-tiny-image",
        "nb201-fractional-channels",
        "nb201-text-channels",
        "vit-mlp-beyond-the-spec-limit",
    ],
)
def test_a_space_that_no_trial_could_build_is_refused_when_it_is_made(make: object, words: str) -> None:
    """Each was accepted, and then every trial failed (OverflowError, a SpecError, a TypeError)."""
    with pytest.raises(ValueError) as caught:
        make()  # type: ignore[operator]
    assert words in str(caught.value)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: nas.space.MLPSpace((16,), 10, depth=(1, 512)), "MLPSpace's deepest network has 513 blocks"),
        (lambda: nas.space.MLPSpace((16,), 10, depth=(1, 10**9)), "depth must be at most 512"),  # not built first
        (lambda: nas.space.ResidualSpace((16,), 10, depth=(511, 511)), "more than the spec format's 512"),
        (lambda: nas.space.CNNSpace((1, 28, 28), 10, convs_per_stage=(600, 600)), "convs_per_stage must be at most"),
        (
            lambda: nas.space.CNNSpace(
                (3, 32, 32),
                10,
                stages=(5, 5),
                convs_per_stage=(102, 102),
                channels=(8, 8),
                pooling=("stride", "maxpool"),
            ),
            "515 blocks",  # with the last pooling choice: the first alone undercounted
        ),
        (lambda: ViTSpace(depth=(511, 511)), "ViTSpace's deepest network has 513 blocks"),
        (lambda: NASBench201Space(cells_per_stage=200), "604 blocks"),
        (lambda: NASBench201Space(channels=2**30), "(conv2d).out: Input should be less than or equal to"),
        (lambda: ViTSpace(input_shape=(0, 28, 28)), "input_shape must be [C, H, W]"),
        (lambda: ViTSpace(input_shape=(1, 28.0, 28.0)), "input_shape must be [C, H, W]"),  # type: ignore[arg-type]
        (lambda: vit_spec(depth=1, width=8, heads=2, mlp_ratio=math.nan), "mlp_ratio must be a positive finite"),
        (lambda: vit_spec(depth=1, width=8, heads=2, mlp_ratio=-1), "mlp_ratio must be a positive finite"),
    ],
)
def test_a_space_whose_trials_the_format_would_refuse_is_refused_when_made(make: Callable[[], Any], words: str) -> None:
    """Each was accepted, and then every (or every deepest) trial's spec failed validation; the
    NAS-Bench-201 space's own checks raised pydantic's raw ValidationError, and vit_spec made an MLP
    of one unit from a negative ratio."""
    with pytest.raises(ValueError, match=re.escape(words)) as refused:
        make()
    assert "errors.pydantic.dev" not in str(refused.value)


def test_a_numpy_index_names_a_nasbench201_op_as_an_int_does() -> None:
    import numpy as np

    assert nasbench201_spec([np.int64(1)] * 6) == nasbench201_spec([1] * 6)  # type: ignore[list-item]

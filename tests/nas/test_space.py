from __future__ import annotations

from typing import Any

import optuna
import pytest

import nas
from nas.space import (
    NORMS,
    CNNSpace,
    MLPSpace,
    ResidualSpace,
    head_block,
    suggest_activation,
    suggest_init,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACES = [
    MLPSpace([64], 10),
    MLPSpace([64], 10, per_layer_width=True, depth=(3, 3)),
    CNNSpace([1, 8, 8], 10),
    CNNSpace([3, 32, 32], 100, stages=(2, 4)),
    ResidualSpace([64], 10),
    ResidualSpace([1, 8, 8], 10, norms=NORMS),
]


@pytest.mark.parametrize("space", SPACES, ids=lambda s: type(s).__name__)
def test_every_sampled_spec_is_valid_and_builds(space: Any) -> None:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(25):
        trial = study.ask()
        spec = space(trial)
        parsed = nas.parse_spec(spec)
        assert nas.summarize(parsed).output_shape == [space.n_classes]
        study.tell(trial, 0.0)


@pytest.mark.parametrize("space", SPACES, ids=lambda s: type(s).__name__)
def test_the_same_parameters_give_the_same_spec(space: Any) -> None:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    trial = study.ask()
    spec = space(trial)
    assert space(optuna.trial.FixedTrial(trial.params)) == spec


def test_mlp_space_searches_depth_width_activation_norm_and_init() -> None:
    params = {
        "depth": 3,
        "width": 32,
        "activation": "tanh",
        "norm": "layernorm",
        "init_scheme": "geometric",
        "init_gain": 1.5,
    }
    spec = MLPSpace([64], 10)(optuna.trial.FixedTrial(params))
    assert spec["init"] == {"scheme": "geometric", "gain": 1.5}
    assert len(spec["blocks"]) == 4
    assert spec["blocks"][0]["layers"] == [{"type": "linear", "out": 32}, {"type": "layernorm"}, {"type": "tanh"}]


def test_cnn_space_downsamples_by_stride_or_pooling_between_stages() -> None:
    base = {
        "stages": 2,
        "convs_per_stage": 1,
        "channels": 8,
        "kernel": 3,
        "head": "global_avgpool",
        "activation": "relu",
        "norm": "none",
        "init_scheme": "fan_in",
        "init_gain": 1.0,
    }
    strided = CNNSpace([1, 8, 8], 10)(optuna.trial.FixedTrial(base | {"pooling": "stride"}))
    pooled = CNNSpace([1, 8, 8], 10)(optuna.trial.FixedTrial(base | {"pooling": "maxpool"}))
    assert strided["blocks"][1]["layers"][0] == {"type": "conv2d", "out": 16, "kernel": 3, "stride": 2, "padding": 1}
    assert pooled["blocks"][1] == {"name": "pool", "layers": [{"type": "maxpool", "kernel": 2}]}
    assert nas.summarize(strided).boundary_shapes[2] == [16, 4, 4]


def test_residual_space_searches_the_residual_scaling() -> None:
    params = {
        "depth": 2,
        "width": 16,
        "body_layers": 1,
        "beta": 0.25,
        "activation": "relu",
        "norm": "none",
        "init_scheme": "fan_in",
        "init_gain": 1.0,
    }
    spec = ResidualSpace([64], 10)(optuna.trial.FixedTrial(params))
    residual = spec["blocks"][1]["layers"][0]
    assert residual["type"] == "residual" and residual["beta"] == 0.25 and residual["alpha"] == 1.0
    assert spec["blocks"][1] is not spec["blocks"][2]


def test_a_custom_space_composes_the_helpers() -> None:
    def my_space(trial: Any) -> dict[str, Any]:
        act = suggest_activation(trial, ("relu", "tanh"))
        width = trial.suggest_int("width", 32, 128, log=True)
        hidden = [{"layers": [{"type": "linear", "out": width}, act]} for _ in range(trial.suggest_int("depth", 1, 4))]
        return {"input_shape": [64], "init": suggest_init(trial), "blocks": [*hidden, head_block(10)]}

    trial = optuna.trial.FixedTrial(
        {"activation": "relu", "width": 40, "depth": 2, "init_scheme": "fan_in", "init_gain": 1.0}
    )
    assert nas.summarize(my_space(trial)).output_shape == [10]


def test_prefix_keeps_two_parts_of_one_space_apart() -> None:
    study = optuna.create_study()
    trial = study.ask()
    MLPSpace([64], 10, prefix="a_")(trial)
    MLPSpace([64], 10, prefix="b_")(trial)
    assert {"a_depth", "b_depth", "a_activation", "b_activation"} <= set(trial.params)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: MLPSpace([1, 8, 8], 10), "vector input"),
        (lambda: MLPSpace([64], 0), "n_classes"),
        (lambda: MLPSpace([64], 10, depth=(3, 1)), "depth"),
        (lambda: MLPSpace([64], 10, activations=("relu", "swish")), "activations"),
        (lambda: MLPSpace([64], 10, activations="relu"), "activations"),
        (lambda: MLPSpace([64], 10, norms=("rmsnorm",)), "norms"),
        (lambda: MLPSpace([64], 10, gain=(0.0, 1.0)), "gain"),
        (lambda: CNNSpace([64], 10), "image input"),
        (lambda: CNNSpace([1, 8, 8], 10, kernels=(2,)), "kernels"),
        (lambda: CNNSpace([1, 8, 8], 10, pooling=("lppool",)), "pooling"),
        (lambda: ResidualSpace([1, 8], 10), "input_shape"),
        (lambda: ResidualSpace([64], 10, beta=(0.0, 1.0)), "beta"),
        # each was accepted and then searched something else, or failed later with another library's words
        (lambda: MLPSpace([64], 10, norms=("none", "groupnorm")), "groupnorm needs image inputs"),  # dropped
        (lambda: ResidualSpace([64], 10, norms=("groupnorm",)), "groupnorm needs image inputs"),
        (lambda: MLPSpace([64], 10, depth=(1.5, 3.5)), "pair of integers"),  # type: ignore[arg-type]
        (lambda: MLPSpace([64], 10, depth=("1", "3")), "pair of integers"),  # type: ignore[arg-type]  # '<' not supported
        (lambda: MLPSpace([64], None), "n_classes"),  # type: ignore[arg-type]
        (lambda: CNNSpace([1, 2, 2], 10, stages=(3, 3)), "room for at most 2 stages"),  # Optuna's low <= high
        (lambda: CNNSpace([1, 0, 0], 10), "input_shape"),  # math domain error
        (lambda: ResidualSpace([1, 8, 8], 10, kernel=4), "kernel"),  # CNNSpace refused even kernels already
        (lambda: ResidualSpace([1, 8, 8], 10, kernel=0), "kernel"),
        # beyond the spec format's bounds: every trial's spec was refused at trial time
        (lambda: ResidualSpace([64], 10, alpha=1e9), r"alpha must be a finite number within \+-1e\+06"),
        (lambda: ResidualSpace([64], 10, alpha="1"), "alpha must be a finite number"),  # type: ignore[arg-type]
        (lambda: ResidualSpace([64], 10, beta=(0.1, 2e6)), "beta must be at most 1e\\+06"),
        (lambda: MLPSpace([64], 10, gain=(1.0, 1e7)), "gain must be at most 1e\\+06"),
        (lambda: CNNSpace([1, 8, 8], 10, channels=(4, 2**40)), "channels must be at most 2147483647"),
        (lambda: MLPSpace([64], 10, width=(4, 2**31)), "width must be at most 2147483647"),
        (lambda: CNNSpace([1, 8, 8], 10, channels=(2**30, 2**30), stages=(2, 2)), "reach 2147483648"),
    ],
)
def test_bad_space_arguments_are_refused_and_quoted(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_the_spec_formats_bounds_are_reachable_by_a_space() -> None:
    """The bounds refuse only what the spec refuses: a space at the limits proposes valid specs."""
    space = ResidualSpace([64], 10, alpha=-1e6, beta=(1e6, 1e6), gain=(1e6, 1e6))
    params = {"depth": 1, "width": 16, "body_layers": 1, "activation": "relu", "norm": "none", "init_scheme": "fan_in"}
    spec = nas.parse_spec(space(optuna.trial.FixedTrial(params)))
    assert spec.init.gain == 1e6


def test_numpy_integers_are_integers_to_a_space() -> None:
    import numpy as np

    labels = np.array([0, 3, 9])
    space = MLPSpace([np.int64(64)], labels.max() + 1, depth=(np.int64(1), np.int64(3)))  # type: ignore[list-item, arg-type]  # n_classes: a numpy int
    assert space(
        optuna.trial.FixedTrial(
            {"depth": 2, "width": 32, "activation": "relu", "norm": "none", "init_scheme": "fan_in", "init_gain": 1.0}
        )
    )["blocks"][-1]


@pytest.mark.parametrize(
    "space",
    [
        CNNSpace(input_shape=[1, 4, 4], n_classes=2, channels=(1, 2), norms=("groupnorm",)),
        CNNSpace(input_shape=[3, 5, 7], n_classes=2, channels=(1, 4), norms=("groupnorm",)),
        CNNSpace(input_shape=[3, 3, 3], n_classes=2, channels=(8, 8), norms=("groupnorm",), pooling=("stride",)),
    ],
    ids=["4x4", "5x7", "3x3-stride"],
)
def test_every_groupnorm_a_cnn_space_proposes_has_two_values_a_group(space: CNNSpace) -> None:
    """A group of one channel at 1 x 1 normalizes a single value, a spec the service refuses: about
    1 in 15 of these spaces' proposals stopped study.optimize with SpecRejectedError."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(200):
        trial = study.ask()
        nas.parse_spec(space(trial))
        study.tell(trial, 0.0)


def test_a_vector_space_with_layernorm_must_search_widths_of_two_or_more() -> None:
    for make in (MLPSpace, ResidualSpace):
        with pytest.raises(ValueError, match=r"layernorm normalizes over a layer's width.*width=\(1, 3\)"):
            make(input_shape=[8], n_classes=2, width=(1, 3))
        make(input_shape=[8], n_classes=2, width=(2, 3))
        make(input_shape=[8], n_classes=2, width=(1, 3), norms=("none", "batchnorm"))

"""The search space: CNNs and residual CNNs on 14 x 14 Fashion-MNIST, up to 30 convolutions deep.

Wide on purpose, as a practitioner's first space is: plain stacks with and without batch norm,
residual stacks with scaled and unscaled branches, saturating activations, init gains a factor of
four off, learning rates over two decades. Some of its networks cannot train; the gate is for them.
"""

from __future__ import annotations

from typing import Any

from nas.space import CNNSpace, ResidualSpace

__all__ = ["INPUT_SHAPE", "LEARNING_RATES", "search_space"]

INPUT_SHAPE = [1, 14, 14]
LEARNING_RATES = (0.003, 0.3)  # SGD with momentum 0.9, log-uniform

_COMMON: dict[str, Any] = {
    "n_classes": 10,
    "input_shape": INPUT_SHAPE,
    "gain": (0.25, 4.0),
    "activations": ("relu", "gelu", "tanh", "sigmoid"),
    "init_schemes": ("fan_in", "geometric", "torch_default"),
    "norms": ("none", "batchnorm"),
}
_PLAIN = CNNSpace(stages=(1, 3), convs_per_stage=(1, 10), channels=(8, 32), kernels=(3,), prefix="cnn_", **_COMMON)
_RESIDUAL = ResidualSpace(depth=(2, 15), width=(8, 24), body_layers=(1, 2), beta=(0.1, 1.0), prefix="res_", **_COMMON)


def search_space(trial: Any) -> tuple[dict[str, Any], float]:
    """The trial's spec and its sampled learning rate."""
    family = trial.suggest_categorical("family", ["cnn", "residual"])
    spec = _PLAIN(trial) if family == "cnn" else _RESIDUAL(trial)
    return spec, trial.suggest_float("lr", *LEARNING_RATES, log=True)

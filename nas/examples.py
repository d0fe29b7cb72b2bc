"""Example specs, used by the docs, the CLI and tests."""

from __future__ import annotations

from typing import Any

__all__ = ["EXAMPLE_MLP", "EXAMPLE_CNN"]

# The example of shared/spec-format.md.
EXAMPLE_MLP: dict[str, Any] = {
    "name": "mlp-3x256",
    "input_shape": [64],
    "init": {"scheme": "geometric"},
    "blocks": [
        {"layers": [{"type": "linear", "out": 256}, {"type": "relu"}]},
        {"layers": [{"type": "residual", "beta": 0.5, "body": [{"type": "linear", "out": 256}, {"type": "relu"}]}]},
        {"layers": [{"type": "linear", "out": 10}]},
    ],
}

EXAMPLE_CNN: dict[str, Any] = {
    "name": "cnn-small",
    "input_shape": [1, 8, 8],
    "blocks": [
        {"layers": [{"type": "conv2d", "out": 16, "kernel": 3}, {"type": "batchnorm"}, {"type": "relu"}]},
        {"layers": [{"type": "conv2d", "out": 32, "kernel": 3, "stride": 2}, {"type": "relu"}]},
        {"layers": [{"type": "global_avgpool"}, {"type": "linear", "out": 10}]},
    ],
}

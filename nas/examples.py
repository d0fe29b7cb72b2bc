"""Example specs, used by the docs, the CLI (``preflight example NAME``) and tests."""

from __future__ import annotations

from typing import Any

from nas.space.nasbench201 import nasbench201_spec
from nas.space.vit import vit_spec

__all__ = ["EXAMPLES", "EXAMPLE_CNN", "EXAMPLE_MLP", "EXAMPLE_NASBENCH201", "EXAMPLE_RESNET", "EXAMPLE_VIT"]

# The format's own example: an MLP with one residual block.
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

# A small residual CNN: a strided stem, two residual blocks with BatchNorm (branch scaled by 1/sqrt(2)),
# then global average pooling and the head; 1x28x28 inputs (Fashion-MNIST's size).
EXAMPLE_RESNET: dict[str, Any] = {
    "name": "resnet-tiny",
    "input_shape": [1, 28, 28],
    "init": {"scheme": "fan_in"},
    "blocks": [
        {
            "name": "stem",
            "layers": [
                {"type": "conv2d", "out": 16, "kernel": 3, "stride": 2, "padding": 1},
                {"type": "batchnorm"},
                {"type": "relu"},
            ],
        },
        *(
            {
                "name": f"res{i}",
                "layers": [
                    {
                        "type": "residual",
                        "beta": 0.707,
                        "body": [
                            {"type": "conv2d", "out": 16, "kernel": 3},
                            {"type": "batchnorm"},
                            {"type": "relu"},
                            {"type": "conv2d", "out": 16, "kernel": 3},
                            {"type": "batchnorm"},
                        ],
                    },
                    {"type": "relu"},
                ],
            }
            for i in range(2)
        ),
        {"layers": [{"type": "global_avgpool"}, {"type": "linear", "out": 10}]},
    ],
}

# Format 1.1: a small pre-LN vision transformer on 1x28x28 images (patches of 7: 16 tokens), and a
# NAS-Bench-201 network (the benchmark's best CIFAR-10 cell, in its skeleton at 8 channels, 2 cells per stage).
EXAMPLE_VIT: dict[str, Any] = {"name": "vit-tiny-28", **vit_spec(depth=4, width=64, heads=4, mlp_ratio=2.0, patch=7)}
EXAMPLE_NASBENCH201: dict[str, Any] = nasbench201_spec(
    "|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|skip_connect~0|nor_conv_3x3~1|nor_conv_3x3~2|",
    channels=8,
    cells_per_stage=2,
)

EXAMPLES: dict[str, dict[str, Any]] = {
    "mlp": EXAMPLE_MLP,
    "cnn": EXAMPLE_CNN,
    "resnet": EXAMPLE_RESNET,
    "vit": EXAMPLE_VIT,
    "nasbench201": EXAMPLE_NASBENCH201,
}

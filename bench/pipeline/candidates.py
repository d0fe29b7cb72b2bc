"""Benchmark candidates: v1 specs sampled from search spaces with good and bad designs.

Five families, each a small search space that mixes well-conditioned choices with the
classic failure modes a NAS search produces:

- ``plain_mlp`` (digits): plain MLPs of depth 2..30, optional narrow bottleneck,
  saturating and non-saturating activations, every init scheme and gains 0.3..3.
- ``bn_mlp`` (digits): linear + BatchNorm + activation, with and without residual
  connections (pre-BN MLPs without residuals are chaotic, AutoInit section 4.2).
- ``res_mlp`` (digits): residual MLPs without normalization, branches unscaled
  (beta = 1) or scaled by 1/sqrt(depth).
- ``cnn`` (digits as 1x8x8 images): mixed kernel sizes 1/3/5, max pooling, average
  pooling, strided convolutions, optional BatchNorm, global-average-pool or flatten head.
- ``mlp_bc`` (breast cancer): plain and residual MLPs on the second dataset.

Sampling is deterministic in the seed; candidate ids are stable strings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Candidate", "FAMILIES", "sample_candidates"]

ACTIVATIONS = ("relu", "relu", "tanh", "sigmoid", "gelu", "silu", "leaky_relu")
SCHEMES = ("fan_in", "fan_out", "arithmetic", "geometric", "torch_default", "normal")
# Share of each family in a sample of n candidates.
FAMILIES = {"plain_mlp": 0.25, "bn_mlp": 0.15, "res_mlp": 0.15, "cnn": 0.32, "mlp_bc": 0.13}
DATASET_OF = {
    "plain_mlp": "digits",
    "bn_mlp": "digits",
    "res_mlp": "digits",
    "cnn": "digits_image",
    "mlp_bc": "breast_cancer",
}
CLASSES = {"digits": 10, "digits_image": 10, "breast_cancer": 2}
INPUT = {"digits": [64], "digits_image": [1, 8, 8], "breast_cancer": [30]}


@dataclass(frozen=True)
class Candidate:
    id: str
    family: str
    dataset: str  # a key of bench.pipeline.datasets: "digits", "digits_image" or "breast_cancer"
    spec: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "family": self.family, "dataset": self.dataset, "spec": self.spec}


def _init(rng: np.random.Generator) -> dict[str, Any]:
    scheme = str(rng.choice(SCHEMES))
    if scheme == "normal":
        return {
            "scheme": "normal",
            "std": float(np.exp(rng.uniform(math.log(0.01), math.log(1.0)))),
        }
    gain = float(np.exp(rng.uniform(math.log(0.3), math.log(3.0))))
    return {"scheme": scheme, "gain": round(gain, 3)}


def _act(name: str) -> dict[str, Any]:
    return {"type": name}


def _plain_mlp(rng: np.random.Generator, classes: int, input_shape: list[int]) -> dict[str, Any]:
    depth = int(rng.integers(2, 31))
    width = int(rng.choice([32, 64, 128]))
    act = str(rng.choice(ACTIVATIONS))
    bottleneck = int(rng.integers(0, depth)) if rng.random() < 0.3 else -1
    narrow = int(rng.choice([2, 4, 8]))
    blocks = [
        {"layers": [{"type": "linear", "out": narrow if i == bottleneck else width}, _act(act)]} for i in range(depth)
    ]
    blocks.append({"layers": [{"type": "linear", "out": classes}]})
    name = f"mlp d={depth} w={width} {act}" + (f" bottleneck={narrow}" if bottleneck >= 0 else "")
    return {"name": name, "input_shape": input_shape, "init": _init(rng), "blocks": blocks}


def _bn_mlp(rng: np.random.Generator, classes: int, input_shape: list[int]) -> dict[str, Any]:
    depth = int(rng.integers(3, 31))
    width = int(rng.choice([32, 64, 128]))
    act = str(rng.choice(("relu", "relu", "tanh", "gelu")))
    residual = bool(rng.random() < 0.5)
    body = [{"type": "linear", "out": width}, {"type": "batchnorm"}, _act(act)]
    blocks: list[dict[str, Any]] = [{"layers": body}]
    for _ in range(depth - 1):
        layers = [{"type": "residual", "body": body}] if residual else body
        blocks.append({"layers": layers})
    blocks.append({"layers": [{"type": "linear", "out": classes}]})
    name = f"bn-mlp d={depth} w={width} {act} residual={residual}"
    return {"name": name, "input_shape": input_shape, "init": _init(rng), "blocks": blocks}


def _res_mlp(rng: np.random.Generator, classes: int, input_shape: list[int]) -> dict[str, Any]:
    depth = int(rng.integers(2, 31))
    width = int(rng.choice([32, 64, 128]))
    act = str(rng.choice(("relu", "relu", "tanh", "gelu", "silu")))
    beta = 1.0 if rng.random() < 0.6 else round(1.0 / math.sqrt(depth), 3)
    two = bool(rng.random() < 0.5)  # one or two linear layers per branch
    body = [{"type": "linear", "out": width}, _act(act)] * (2 if two else 1)
    blocks = [{"layers": [{"type": "linear", "out": width}, _act(act)]}]
    blocks += [{"layers": [{"type": "residual", "beta": beta, "body": body}]} for _ in range(depth)]
    blocks.append({"layers": [{"type": "linear", "out": classes}]})
    name = f"res-mlp d={depth} w={width} {act} beta={beta}"
    return {"name": name, "input_shape": input_shape, "init": _init(rng), "blocks": blocks}


def _cnn(rng: np.random.Generator, classes: int, input_shape: list[int]) -> dict[str, Any]:
    n_conv = int(rng.integers(2, 9))
    channels = int(rng.choice([8, 16, 32]))
    act = str(rng.choice(("relu", "relu", "tanh", "gelu", "sigmoid")))
    bn = bool(rng.random() < 0.4)
    size, blocks, downs = 8, [], 0
    for i in range(n_conv):
        kernel = int(rng.choice([1, 3, 3, 5]))
        down = str(rng.choice(["none", "none", "maxpool", "avgpool", "stride"])) if size > 2 else "none"
        conv: dict[str, Any] = {
            "type": "conv2d",
            "out": channels * (2 if downs else 1),
            "kernel": kernel,
        }
        if down == "stride":
            conv |= {"stride": 2, "padding": kernel // 2}
        layers = [conv] + ([{"type": "batchnorm"}] if bn else []) + [_act(act)]
        if down in ("maxpool", "avgpool"):
            layers.append({"type": down, "kernel": 2})
        if down != "none":
            size, downs = size // 2, downs + 1
        blocks.append({"name": f"conv{i}", "layers": layers})
    head = str(rng.choice(["global_avgpool", "flatten"]))
    blocks.append({"layers": [{"type": head}, {"type": "linear", "out": classes}]})
    name = f"cnn convs={n_conv} c={channels} {act} bn={bn} head={head}"
    return {"name": name, "input_shape": input_shape, "init": _init(rng), "blocks": blocks}


_SAMPLERS = {
    "plain_mlp": _plain_mlp,
    "bn_mlp": _bn_mlp,
    "res_mlp": _res_mlp,
    "cnn": _cnn,
    "mlp_bc": lambda rng, c, s: (_plain_mlp if rng.random() < 0.6 else _res_mlp)(rng, c, s),
}


def sample_candidates(n: int, seed: int = 0) -> list[Candidate]:
    """``n`` candidates spread over the families in ``FAMILIES`` proportions.

    >>> len(sample_candidates(10))
    10
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, but got {n=}.")
    counts = {f: int(round(share * n)) for f, share in FAMILIES.items()}
    counts["cnn"] += n - sum(counts.values())  # rounding remainder
    out: list[Candidate] = []
    for f_index, (family, count) in enumerate(counts.items()):
        rng = np.random.default_rng([seed, f_index])
        dataset = DATASET_OF[family]
        for i in range(count):
            spec = _SAMPLERS[family](rng, CLASSES[dataset], INPUT[dataset])
            out.append(Candidate(f"{family}-{i:03d}", family, dataset, spec))
    return out

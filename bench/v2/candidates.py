"""The two candidate sets of benchmark v2: a development set and a frozen test set.

- **Development set**: v1's 160 candidates (``bench.pipeline.candidates``, seed 0: digits and
  breast cancer) plus ``DEV_FASHION`` Fashion-MNIST candidates (seed 100) from three families:
  ``fm_cnn`` (CNNs with and without BatchNorm, saturating activations, bad gains), ``fm_rescnn``
  (residual CNNs, branches unscaled or scaled by 1/sqrt(depth), with and without BatchNorm) and
  ``fm_mlp`` (plain MLPs on the flat image, up to 20 layers deep, bottlenecks, bad gains).
- **Frozen test set**: ``TEST_DIGITS`` candidates from v1's families at another seed (1) and
  ``TEST_FASHION`` Fashion-MNIST candidates (seed 200) from the three families above *and two the
  development set does not have*: ``fm_vgg`` (VGG-style stages of conv pairs, channels doubling
  at each max pool) and ``fm_bottleneck`` (residual 1x1-3x3-1x1 bottleneck blocks).

Nothing is chosen, fitted or tuned on the test set: it is scored once per report. Fashion-MNIST
candidates are small on purpose (14x14 images, 8 to 32 channels, a downsampling stem): the whole
benchmark has to fit about 8 hours of a 2-core CPU. Ids are stable strings; a test id starts with ``test-``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bench.pipeline.candidates import Candidate, sample_candidates

__all__ = ["DEV_FASHION", "TEST_DIGITS", "TEST_FASHION", "TEST_ONLY_FAMILIES", "dev_set", "test_set"]

DEV_V1 = 160
DEV_FASHION = 84
TEST_DIGITS = 40
TEST_FASHION = 64
TEST_ONLY_FAMILIES = ("fm_vgg", "fm_bottleneck")
DEV_FAMILIES = ("fm_cnn", "fm_rescnn", "fm_mlp")
IMAGE = [1, 14, 14]  # bench.pipeline.fashion_mnist.RESOLUTION
FLAT = [196]
CLASSES = 10


def _init(rng: np.random.Generator, bad: float = 0.3) -> dict[str, Any]:
    """The spec's init: a sound scheme most of the time, a bad gain (0.2-0.5 or 2-5) or a fixed
    normal std with probability ``bad``."""
    scheme = str(rng.choice(("fan_in", "fan_out", "arithmetic", "geometric", "torch_default")))
    if rng.random() < bad:
        if rng.random() < 0.3:
            return {"scheme": "normal", "std": round(float(np.exp(rng.uniform(math.log(0.005), math.log(0.5)))), 4)}
        gain = rng.uniform(0.2, 0.5) if rng.random() < 0.5 else rng.uniform(2.0, 5.0)
        return {"scheme": scheme, "gain": round(float(gain), 3)}
    return {"scheme": scheme, "gain": round(float(np.exp(rng.uniform(math.log(0.7), math.log(1.5)))), 3)}


def _act(rng: np.random.Generator, saturating: float = 0.25) -> str:
    if rng.random() < saturating:
        return str(rng.choice(("tanh", "sigmoid")))
    return str(rng.choice(("relu", "relu", "gelu", "silu", "leaky_relu")))


def _conv(out: int, kernel: int = 3, stride: int = 1) -> dict[str, Any]:
    return {"type": "conv2d", "out": out, "kernel": kernel, "stride": stride, "padding": kernel // 2}


def _norm_act(bn: bool, act: str) -> list[dict[str, Any]]:
    return ([{"type": "batchnorm"}] if bn else []) + [{"type": act}]


def _stem(rng: np.random.Generator, channels: int, bn: bool, act: str) -> dict[str, Any]:
    """14x14 -> 7x7: a strided conv or a conv and a pool."""
    if rng.random() < 0.5:
        return {"name": "stem", "layers": [_conv(channels, 3, 2), *_norm_act(bn, act)]}
    pool = str(rng.choice(("maxpool", "avgpool")))
    return {"name": "stem", "layers": [_conv(channels, 3), *_norm_act(bn, act), {"type": pool, "kernel": 2}]}


def _head(rng: np.random.Generator) -> dict[str, Any]:
    head = str(rng.choice(("global_avgpool", "flatten")))
    return {"layers": [{"type": head}, {"type": "linear", "out": CLASSES}]}


def _fm_cnn(rng: np.random.Generator) -> dict[str, Any]:
    channels = int(rng.choice([8, 16]))
    act, bn = _act(rng), bool(rng.random() < 0.4)
    n_conv = int(rng.integers(1, 9))
    blocks, size = [_stem(rng, channels, bn, act)], 7
    for i in range(n_conv):
        layers = [_conv(channels * (2 if size < 7 else 1), int(rng.choice([1, 3, 3, 5]))), *_norm_act(bn, act)]
        if size == 7 and rng.random() < 0.3:
            layers.append({"type": str(rng.choice(("maxpool", "avgpool"))), "kernel": 2})
            size = 3
        blocks.append({"name": f"conv{i}", "layers": layers})
    blocks.append(_head(rng))
    name = f"fm-cnn convs={n_conv + 1} c={channels} {act} bn={bn}"
    return {"name": name, "input_shape": IMAGE, "init": _init(rng), "blocks": blocks}


def _fm_rescnn(rng: np.random.Generator) -> dict[str, Any]:
    channels = int(rng.choice([8, 16]))
    act, bn = _act(rng, 0.15), bool(rng.random() < 0.4)
    depth = int(rng.integers(2, 11))
    beta = 1.0 if rng.random() < 0.6 else round(1.0 / math.sqrt(depth), 3)
    body = [_conv(channels), *_norm_act(bn, act), _conv(channels)] + ([{"type": "batchnorm"}] if bn else [])
    blocks = [_stem(rng, channels, bn, act)]
    for i in range(depth):
        layers: list[dict[str, Any]] = [{"type": "residual", "beta": beta, "body": body}, {"type": act}]
        if i == depth // 3:
            layers.append({"type": "maxpool", "kernel": 2})
        blocks.append({"name": f"res{i}", "layers": layers})
    blocks.append({"layers": [{"type": "global_avgpool"}, {"type": "linear", "out": CLASSES}]})
    name = f"fm-rescnn d={depth} c={channels} {act} bn={bn} beta={beta}"
    return {"name": name, "input_shape": IMAGE, "init": _init(rng), "blocks": blocks}


def _fm_mlp(rng: np.random.Generator) -> dict[str, Any]:
    depth = int(rng.integers(1, 21))
    width = int(rng.choice([64, 128, 256]))
    act = _act(rng, 0.35)
    bottleneck = int(rng.integers(0, depth)) if rng.random() < 0.25 else -1
    narrow = int(rng.choice([2, 4, 8]))
    blocks = [
        {"layers": [{"type": "linear", "out": narrow if i == bottleneck else width}, {"type": act}]}
        for i in range(depth)
    ]
    blocks.append({"layers": [{"type": "linear", "out": CLASSES}]})
    name = f"fm-mlp d={depth} w={width} {act}" + (f" bottleneck={narrow}" if bottleneck >= 0 else "")
    return {"name": name, "input_shape": FLAT, "init": _init(rng), "blocks": blocks}


def _fm_vgg(rng: np.random.Generator) -> dict[str, Any]:
    """Test only: stages of two (or three) 3x3 convs, a max pool, channels doubling."""
    channels = int(rng.choice([8, 16]))
    act, bn = _act(rng, 0.2), bool(rng.random() < 0.5)
    per_stage = int(rng.choice([2, 2, 3]))
    stages = int(rng.integers(2, 4))
    blocks = []
    for s in range(stages):
        c = channels * 2**s
        layers = [layer for _ in range(per_stage) for layer in (_conv(c), *_norm_act(bn, act))]
        blocks.append({"name": f"stage{s}", "layers": [*layers, {"type": "maxpool", "kernel": 2}]})
    blocks.append(_head(rng))
    name = f"fm-vgg stages={stages}x{per_stage} c={channels} {act} bn={bn}"
    return {"name": name, "input_shape": IMAGE, "init": _init(rng), "blocks": blocks}


def _fm_bottleneck(rng: np.random.Generator) -> dict[str, Any]:
    """Test only: residual bottleneck blocks (1x1 down, 3x3, 1x1 up) on a strided stem."""
    channels = int(rng.choice([16, 24]))
    act, bn = _act(rng, 0.15), bool(rng.random() < 0.6)
    depth = int(rng.integers(2, 7))
    beta = 1.0 if rng.random() < 0.6 else round(1.0 / math.sqrt(depth), 3)
    inner = channels // 4
    body = [
        _conv(inner, 1),
        *_norm_act(bn, act),
        _conv(inner, 3),
        *_norm_act(bn, act),
        _conv(channels, 1),
    ] + ([{"type": "batchnorm"}] if bn else [])
    blocks = [{"name": "stem", "layers": [_conv(channels, 3, 2), *_norm_act(bn, act)]}]
    for i in range(depth):
        layers: list[dict[str, Any]] = [{"type": "residual", "beta": beta, "body": body}, {"type": act}]
        if i == depth // 3:
            layers.append({"type": "avgpool", "kernel": 2})
        blocks.append({"name": f"bottleneck{i}", "layers": layers})
    blocks.append({"layers": [{"type": "global_avgpool"}, {"type": "linear", "out": CLASSES}]})
    name = f"fm-bottleneck d={depth} c={channels} {act} bn={bn} beta={beta}"
    return {"name": name, "input_shape": IMAGE, "init": _init(rng), "blocks": blocks}


_SAMPLERS = {
    "fm_cnn": _fm_cnn,
    "fm_rescnn": _fm_rescnn,
    "fm_mlp": _fm_mlp,
    "fm_vgg": _fm_vgg,
    "fm_bottleneck": _fm_bottleneck,
}


def _dataset(family: str) -> str:
    return "fashion_mnist" if family == "fm_mlp" else "fashion_mnist_image"


def _fashion(n: int, families: tuple[str, ...], seed: int, prefix: str) -> list[Candidate]:
    """``n`` candidates spread evenly over ``families`` (the remainder to the first ones)."""
    out = []
    for f_index, family in enumerate(families):
        rng = np.random.default_rng([seed, f_index])
        count = n // len(families) + (1 if f_index < n % len(families) else 0)
        for i in range(count):
            out.append(Candidate(f"{prefix}{family}-{i:03d}", family, _dataset(family), _SAMPLERS[family](rng)))
    return out


def dev_set(n_v1: int = DEV_V1, n_fashion: int = DEV_FASHION) -> list[Candidate]:
    """v1's candidates (seed 0) and the development Fashion-MNIST candidates (seed 100)."""
    return sample_candidates(n_v1, seed=0) + _fashion(n_fashion, DEV_FAMILIES, seed=100, prefix="")


# the validation samples' seeds (v1's families, Fashion-MNIST's) and id prefixes: each drawn once, for a
# question stated before it ran (docs/conditioning.md, section 8)
FRESH_SAMPLES = {"fresh": (2, 300, "fresh-"), "fresh2": (3, 301, "fresh2-"), "fresh3": (4, 302, "fresh3-")}


def fresh_set(n_v1: int = 60, n_fashion: int = 42, sample: str = "fresh") -> list[Candidate]:
    """A validation sample for the ablations, never part of benchmark v2's tables: the development
    set's families drawn at seeds of their own (``FRESH_SAMPLES``: 2 for v1's, 300 for Fashion-MNIST's;
    a second sample at 3 and 301, a third at 4 and 302), so a rule found by looking at the development
    set can be tested on candidates it has not seen without reading the frozen test set. Every id
    starts with the sample's prefix (``fresh-``, ``fresh2-``, ``fresh3-``)."""
    v1_seed, fashion_seed, prefix = FRESH_SAMPLES[sample]
    v1 = [Candidate(f"{prefix}{c.id}", c.family, c.dataset, c.spec) for c in sample_candidates(n_v1, seed=v1_seed)]
    return v1 + _fashion(n_fashion, DEV_FAMILIES, seed=fashion_seed, prefix=prefix)


def test_set(n_digits: int = TEST_DIGITS, n_fashion: int = TEST_FASHION) -> list[Candidate]:
    """The frozen test set: v1's families at seed 1, Fashion-MNIST at seed 200 with two families
    of its own. Every id starts with ``test-``."""
    digits = [
        Candidate(f"test-{c.id}", c.family, c.dataset, c.spec)
        for c in (sample_candidates(n_digits, seed=1) if n_digits else [])
    ]
    return digits + _fashion(n_fashion, (*DEV_FAMILIES, *TEST_ONLY_FAMILIES), seed=200, prefix="test-")

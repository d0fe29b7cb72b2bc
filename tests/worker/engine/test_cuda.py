"""The engine on a GPU. Skipped where no CUDA device is visible (CI has none); run on a lent GPU by
``python -m bench.perf.gpu_path``'s device script (docs/gpu.md).

The engine's random streams live on the device (``worker.engine.seeds``), so a GPU report is not
bit-equal to the CPU's: the tests compare what a user reads off it (verdict, scales, score)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from worker.engine import condition

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a CUDA device (none visible); python -m bench.perf.gpu_path runs these on a lent GPU",
)


def _cnn() -> dict[str, Any]:
    """No normalization, so AutoInit tunes every convolution's scale (with BatchNorm most stay 1)."""
    conv = [{"type": "conv2d", "out": 16, "kernel": 3}, {"type": "tanh"}]
    head = [{"type": "global_avgpool"}, {"type": "flatten"}, {"type": "linear", "out": 10}]
    return {"input_shape": [1, 14, 14], "blocks": [{"layers": conv} for _ in range(4)] + [{"layers": head}]}


def _batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"x": torch.randn(64, 1, 14, 14, generator=g), "y": torch.randint(0, 10, (64,), generator=g)}


def test_a_gpu_conditioning_agrees_with_the_cpu_one() -> None:
    cpu = condition(_cnn(), data=_batch(), options={"seed": 0, "device": "cpu"})
    gpu = condition(_cnn(), data=_batch(), options={"seed": 0, "device": "cuda"})
    assert gpu.environment.device.startswith("cuda")
    assert gpu.verdict == cpu.verdict
    assert set(gpu.scales) == set(cpu.scales)
    for block, scale in cpu.scales.items():
        assert gpu.scales[block] == pytest.approx(scale, rel=0.05), block
    assert gpu.score == pytest.approx(cpu.score, abs=0.02)


def test_a_gpu_conditioning_is_reproducible_on_the_gpu() -> None:
    first = condition(_cnn(), data=_batch(), options={"seed": 0, "device": "cuda"})
    again = condition(_cnn(), data=_batch(), options={"seed": 0, "device": "cuda"})
    assert again.verdict == first.verdict
    for block, scale in first.scales.items():
        assert again.scales[block] == pytest.approx(scale, rel=1e-4), block
    assert again.score == pytest.approx(first.score, abs=1e-4)


def test_the_engine_child_takes_the_gpu_and_names_it() -> None:
    from worker.jobs.engine_process import EngineProcess
    from worker.jobs.outcome import Outcome

    engine = EngineProcess("auto", start_timeout=300)
    try:
        assert engine.start() == "cuda:0"
        engine.submit(_cnn(), {"seed": 0})
        result = None
        while result is None:
            result = engine.result(timeout=600)
        outcome, report = result
        assert outcome is Outcome.DONE
        assert report.environment.device == "cuda:0"  # type: ignore[union-attr]
    finally:
        engine.kill()


def _bn_cnn() -> dict[str, Any]:
    conv = [{"type": "conv2d", "out": 16, "kernel": 3}, {"type": "batchnorm"}, {"type": "relu"}]
    head = [{"type": "global_avgpool"}, {"type": "flatten"}, {"type": "linear", "out": 10}]
    return {"input_shape": [1, 14, 14], "blocks": [{"layers": conv} for _ in range(3)] + [{"layers": head}]}


def _vit() -> dict[str, Any]:
    from nas.space.vit import vit_spec

    return vit_spec(input_shape=[1, 14, 14], patch=7, width=32, depth=2, heads=2, n_classes=10)


def _cell() -> dict[str, Any]:
    from nas.space.nasbench201 import nasbench201_spec

    ops = "|nor_conv_3x3~0|+|skip_connect~0|avg_pool_3x3~1|+|nor_conv_1x1~0|none~1|nor_conv_3x3~2|"
    return dict(nasbench201_spec(ops, channels=8, cells_per_stage=1, input_shape=(1, 16, 16)))


# the engine's paths off its default (the first GPU run conditioned with the defaults only), each on
# a network that exercises it; ``None`` data: the service's default path (a synthetic batch)
OPTION_PATHS: dict[str, tuple[Callable[[], dict[str, Any]], dict[str, Any]]] = {
    "diagnostics (Hessian, scaling, kappa(D))": (_cnn, {"diagnostics": True}),
    "expressivity": (_cnn, {"expressivity": True}),
    "forward variance, final": (_cnn, {"forward_variance": "final"}),
    "forward variance, base": (_cnn, {"forward_variance": "base"}),
    "norm inputs at unit variance": (_bn_cnn, {"norm_inputs": "unit_variance"}),
    "Gaussian draw, no balancing": (_cnn, {"draw": "gaussian", "balance": False}),
    "log loss": (_cnn, {"loss": "log"}),
    "square loss": (_cnn, {"loss": "square"}),
    "no data": (_cnn, {"data": None}),
    "no data, pink noise": (_cnn, {"data": None, "synthetic_inputs": "pink"}),
    "a vision transformer": (_vit, {}),
    "a NAS-Bench-201 cell": (_cell, {"data": None}),  # 16x16: its reductions halve twice
}


@pytest.mark.parametrize("path", list(OPTION_PATHS))
def test_every_option_path_conditions_on_the_gpu(path: str) -> None:
    make, options = OPTION_PATHS[path]
    options = dict(options)
    data = options.pop("data") if "data" in options else _batch()
    report = condition(make(), data=data, options={"seed": 0, "device": "cuda", **options})
    assert report.environment.device.startswith("cuda")
    assert report.verdict in ("keep", "prune") and report.score is not None
    if options.get("expressivity"):
        assert report.expressivity is not None and report.expressivity.meco is not None

"""The engine on a GPU. Skipped where no CUDA device is visible (CI has none); run on a lent GPU by
``python -m bench.perf.gpu_path``'s device script (docs/gpu.md).

The engine's random streams live on the device (``worker.engine.seeds``), so a GPU report is not
bit-equal to the CPU's: the tests compare what a user reads off it (verdict, scales, score)."""

from __future__ import annotations

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

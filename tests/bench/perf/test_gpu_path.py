"""bench.perf.gpu_path: the page the lent GPU's runs wrote, and how it reads them."""

from __future__ import annotations

import math
from pathlib import Path

from bench.perf.gpu_path import _agreement_section, _scale_ratios, report

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "bench" / "results" / "gpu_path"


def test_the_gpu_page_is_what_the_committed_runs_say(tmp_path: Path) -> None:
    """docs/gpu.md is regenerated from the committed runs (it reads the CPU's stored NAS-Bench-201
    parts and the shipped calibration too, so a change to either must regenerate the page)."""
    written = tmp_path / "gpu.md"
    runs = ["run1.json", "run2.json", "run3-stages.json", "run3-nasbench201.json"]
    report(
        [RESULTS / run for run in runs],
        written,
        (RESULTS / "note.md").read_text().strip(),
        RESULTS / "run2-tuning_cost.txt",
        RESULTS / "run3-demo-results.json",
    )
    assert written.read_text() == (ROOT / "docs" / "gpu.md").read_text()


def test_the_speed_ratio_on_one_machine_counts_only_the_networks_conditioned_on_both() -> None:
    def row(name: str, gpu: float, there: float | None, here: float) -> dict:
        return {
            "name": name,
            "verdict": ["keep", "keep"],
            "score": [0.0, 0.0],
            "scale_ratio": {"largest": 1.0},
            "counted_steps": [15.3, 15.3],
            "gpu_seconds": gpu,
            "cpu_seconds_there": there,
            "cpu_seconds_here": here,
        }

    rows = [row("a", 1.0, 3.0, 10.0), row("b", 1.0, None, 30.0)]
    summary = _agreement_section(rows, {"cpus": 2, "load_average": 2.5})[-2]
    assert "the 1 networks conditioned on both took 3.0x" in summary  # b has no run on the GPU machine's CPU
    assert "(2 cores, load average 2.5 when they were made) took 20.0x" in summary
    assert "load average" not in _agreement_section(rows, {"cpus": 2})[-2]  # a run before the load was recorded


def test_a_scale_below_the_cpus_counts_as_much_as_one_above() -> None:
    ratios = _scale_ratios({"a": 1.0, "b": 2.0}, {"a": 1.1, "b": 1.8})
    assert ratios["largest"] == math.exp(abs(math.log(0.9)))  # 0.9 is further from 1 than 1.1 is
    assert math.isclose(ratios["median"], 1.0)


def _tiny_specs() -> dict[str, dict]:
    conv = [{"type": "conv2d", "out": 4, "kernel": 3}, {"type": "relu"}]
    head = [{"type": "global_avgpool"}, {"type": "flatten"}, {"type": "linear", "out": 10}]
    return {
        "cnn": {"input_shape": [1, 14, 14], "blocks": [{"layers": conv}, {"layers": head}]},
        "mlp": {
            "input_shape": [1, 14, 14],
            "blocks": [{"layers": [{"type": "flatten"}, {"type": "linear", "out": 10}]}],
        },
    }


def test_the_training_stage_trains_each_network_an_epoch_and_reports_it(tmp_path: Path) -> None:
    import torch

    from bench.perf.gpu_path import ON_BOTH_CPUS, _training, _training_section

    g = torch.Generator().manual_seed(0)
    sets = {"x_train": torch.randn(256, 1, 14, 14, generator=g), "y_train": torch.randint(0, 10, (256,), generator=g)}
    sets |= {"x_val": torch.randn(64, 1, 14, 14, generator=g), "y_val": torch.randint(0, 10, (64,), generator=g)}
    torch.save(sets, tmp_path / "search_data.pt")
    part = _training(tmp_path, _tiny_specs(), "cpu")  # the dry run a machine without a GPU can do
    assert [r["name"] for r in part["rows"]] == ["cnn", "mlp"]
    for row in part["rows"]:
        assert row["device"]["steps"] == 4 and row["device"]["seconds"] > 0 and not row["device"]["diverged"]
        assert (row["cpu_there"] is not None) == (part["rows"].index(row) < ON_BOTH_CPUS)
    text = "\n".join(_training_section(part))
    assert "| cnn |" in text and "network-epochs per minute on the GPU; on the 2 networks trained on both" in text
    alone = part | {"rows": [row | {"cpu_there": None} for row in part["rows"]]}
    assert "trained on both" not in "\n".join(_training_section(alone))


def test_the_draw_stage_draws_alike_on_one_device_and_reports_the_difference() -> None:
    from bench.perf.gpu_path import _draw, _draw_section

    part = _draw(_tiny_specs(), "cpu")
    for row in part["rows"]:  # the same weights, the same solver: the same draw, bit for bit
        assert row["largest_difference"] == 0.0 and row["equal_share"] == 1.0
    row = part["rows"][0] | {"largest_difference": 3e-8, "equal_share": 0.5}
    text = "\n".join(_draw_section({"rows": [row], "threads": 1}))
    assert "| cnn |" in text and "3.0e-08 | 50.0% |" in text

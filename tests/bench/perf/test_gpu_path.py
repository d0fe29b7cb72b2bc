"""bench.perf.gpu_path: the page the lent GPU's runs wrote, and how it reads them."""

from __future__ import annotations

import math
from pathlib import Path

from bench.perf.gpu_path import _scale_ratios, report

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "bench" / "results" / "gpu_path"


def test_the_gpu_page_is_what_the_committed_runs_say(tmp_path: Path) -> None:
    """docs/gpu.md is regenerated from the committed runs (it reads the CPU's stored NAS-Bench-201
    parts and the shipped calibration too, so a change to either must regenerate the page)."""
    written = tmp_path / "gpu.md"
    report(
        [RESULTS / "run1.json", RESULTS / "run2.json"],
        written,
        (RESULTS / "note.md").read_text().strip(),
        RESULTS / "run2-tuning_cost.txt",
    )
    assert written.read_text() == (ROOT / "docs" / "gpu.md").read_text()


def test_a_scale_below_the_cpus_counts_as_much_as_one_above() -> None:
    ratios = _scale_ratios({"a": 1.0, "b": 2.0}, {"a": 1.1, "b": 1.8})
    assert ratios["largest"] == math.exp(abs(math.log(0.9)))  # 0.9 is further from 1 than 1.1 is
    assert math.isclose(ratios["median"], 1.0)

"""The smoke benchmark: a handful of candidates, one epoch, every stage, a full report."""

from __future__ import annotations

import math
import time

import pytest

from bench.__main__ import main
from bench.pipeline.proxies import PROXIES
from bench.pipeline.run import read_json

# CPU seconds of this process: the budget, independent of other load on a shared machine.
SMOKE_CPU_SECONDS = 60


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_smoke_benchmark_writes_a_well_formed_report(tmp_path):
    start = time.process_time()
    assert main(["--smoke", "--out", str(tmp_path), "--jobs", "1", "--quiet"]) == 0
    cpu = time.process_time() - start

    figures = read_json(tmp_path / "figures.json")
    assert figures["n"] == 5
    assert set(figures["ranking_all"]) == {*PROXIES, "preflight", "preflight_no_probe", "preflight_handset"}
    for method, row in figures["ranking_all"].items():
        rho = row["spearman_loss"]
        assert math.isnan(rho) or -1.0 <= rho <= 1.0, (method, rho)
        assert row["seconds"] >= 0, method
    assert not figures["preflight_errors"], figures["preflight_errors"]
    assert set(figures["tuning"]["all"]) == {
        "spec",
        "torch_default",
        "kaiming",
        "xavier",
        "lsuv",
        "gradinit",
    }
    assert figures["tuning"]["all"]["spec"]["n"] == 5

    page = (tmp_path / "docs" / "benchmarks-v1.md").read_text()
    for heading in ("## Protocol", "## Ranking trainability", "## Tuning", "## Targets", "LIBSVM"):
        assert heading in page
    for png in ("score_vs_loss.png", "pruning_pr.png", "tuned_vs_default.png"):
        assert (tmp_path / "docs" / "benchmarks" / png).read_bytes()[:4] == b"\x89PNG"
    assert cpu < SMOKE_CPU_SECONDS, f"smoke benchmark took {cpu:.0f} CPU seconds"


@pytest.mark.slow
def test_report_only_reuses_the_cache_without_training(tmp_path):
    assert (
        main(
            [
                "--smoke",
                "--out",
                str(tmp_path),
                "--jobs",
                "1",
                "--quiet",
                "--candidates",
                "2",
                "--no-scaling",
            ]
        )
        == 0
    )
    cached = sorted((tmp_path / "spec").glob("*.json"))
    assert len(cached) == 2
    stamps = [p.stat().st_mtime_ns for p in cached]
    assert main(["--smoke", "--out", str(tmp_path), "--quiet", "--candidates", "2", "--report-only"]) == 0
    assert [p.stat().st_mtime_ns for p in cached] == stamps
    assert read_json(tmp_path / "figures.json")["n"] == 2

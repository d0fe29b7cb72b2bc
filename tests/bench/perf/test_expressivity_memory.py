"""The memory benchmark of NASWOT's kernel compares two ways of computing one figure."""

from __future__ import annotations

from bench.perf.expressivity_memory import main, measure


def test_summing_the_kernel_layer_by_layer_gives_the_kept_codes_figure_to_the_bit() -> None:
    kept = measure(("kept codes", 3, 4, 6, 8))
    summed = measure(("summed", 3, 4, 6, 8))
    assert kept["naswot"] == summed["naswot"]
    assert kept["added_mb"] >= 0 and summed["added_mb"] >= 0


def test_the_benchmark_exits_zero_when_both_ways_agree() -> None:
    assert main(["--layers", "2", "--channels", "4", "--size", "6", "--batch", "8"]) == 0

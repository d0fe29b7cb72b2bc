"""The memory benchmark of NASWOT's kernel compares two ways of computing one figure."""

from __future__ import annotations

import pytest

from bench.perf.expressivity_memory import main


@pytest.mark.slow  # two fresh torch processes: several seconds
def test_summing_the_kernel_layer_by_layer_gives_the_kept_codes_figure_to_the_bit() -> None:
    """``main`` exits 1 when the two ways' ``log |K_H|`` differ (each way in its own process)."""
    assert main(["--layers", "3", "--channels", "4", "--size", "6", "--batch", "8"]) == 0

"""Ablations of the engine's choices. Three read benchmark v1's cache and write a section of
``docs/benchmarks-v1.md`` (``python -m bench --extra NAME``, or ``python -m bench.ablations.NAME``):
the trainability probe's length and rates (``probe_length``), the head's output std target
(``output_std``) and the service's default path without data, a Gaussian batch and random
labels (``gaussian_path``). The others read benchmark v2's cache (``bench/results/v2``, committed).
"""

from __future__ import annotations

import argparse
from pathlib import Path

V1_CACHE = Path(__file__).resolve().parents[2] / "bench" / "out" / "full"


def v1_cache(argv: list[str] | None, prog: str, description: str) -> Path:
    """The folder of benchmark v1's cached stages an ablation reads (its one optional argument):
    git-ignored, so a fresh clone has none until ``make bench-v1`` computes it; a clear error then,
    not a failure deep in the analysis."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument(
        "out", nargs="?", type=Path, default=V1_CACHE, help=f"benchmark v1's cache (default: {V1_CACHE})"
    )
    out: Path = parser.parse_args(argv).out
    if not any((out / "preflight").glob("*.json")):
        parser.error(
            f"no cached stages of benchmark v1 in {out}: run `make bench-v1` first "
            "(it computes them; they are not committed)"
        )
    return out

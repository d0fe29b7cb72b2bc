"""``python -m bench.v2`` (= ``make bench``): benchmark v2, end to end.

Stages are cached under ``bench/results/v2/`` (``--out``; committed, so the figures can be checked
and a later run resumes), so a rerun computes only what is missing
and ``--report-only`` rewrites ``docs/benchmarks.md`` from the cache. ``--smoke`` is the tiny
version the test suite runs (a few candidates, two seeds, half the epochs, a small Fashion-MNIST
subset) and writes its report under its output folder instead of ``docs/``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from bench.v2.candidates import dev_set, test_set
from bench.v2.stages import SMOKE_SCALE

ROOT = Path(__file__).resolve().parents[2]
SEEDS = 3
SMOKE_IDS = ("test-fm_vgg-000", "test-fm_mlp-000", "test-fm_bottleneck-000", "test-cnn-000")


def _sets(smoke: bool, only: list[str]) -> list[tuple[str, list]]:
    if smoke:
        picked = [c for c in test_set() if c.id in SMOKE_IDS]
        return [("test", picked), ("dev", [c for c in dev_set() if c.id == "fm_mlp-000"])]
    sets = [("test", test_set()), ("dev", dev_set())]
    return [s for s in sets if not only or s[0] in only]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.v2", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny version for the test suite")
    parser.add_argument("--out", type=Path, default=None, help="cache folder")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (one thread each)")
    parser.add_argument(
        "--seeds", type=int, default=None, help=f"training seeds to compute and report (default {SEEDS}; smoke 2)"
    )
    parser.add_argument("--only", action="append", default=[], choices=("test", "dev"), help="compute one set")
    parser.add_argument("--report-only", action="store_true", help="no computation, rewrite the report")
    parser.add_argument("--fashion-mnist-dir", default=None, help="folder of the Fashion-MNIST IDX files")
    parser.add_argument(
        "--note", default=None, help="a paragraph for the top of the report (kept beside the cache for later runs)"
    )
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.fashion_mnist_dir:
        os.environ["PREFLIGHT_FASHION_MNIST_DIR"] = args.fashion_mnist_dir

    def log(message: str) -> None:
        if not args.quiet:
            print(message, flush=True)

    from bench.pipeline.fashion_mnist import find_dir

    find_dir()  # a clear message now, not a traceback in a worker, when the data is absent
    default = ROOT / "bench" / "out" / "v2-smoke" if args.smoke else ROOT / "bench" / "results" / "v2"
    out = args.out or default
    seeds = args.seeds or (2 if args.smoke else SEEDS)
    scale = SMOKE_SCALE if args.smoke else 1.0
    sets = _sets(args.smoke, args.only)
    walls: dict[str, float] = {}
    if not args.report_only:
        from bench.v2.schedule import run

        walls = run(sets, out, seeds=seeds, scale=scale, jobs=args.jobs, log=log)
    from bench.pipeline.run import kept_note
    from bench.v2 import report

    start = time.perf_counter()
    docs = out / "docs" if args.smoke else ROOT / "docs"
    planned = seeds if args.smoke else SEEDS
    sets_all = dict(_sets(args.smoke, []))
    note = kept_note(out / "note.md", args.note)
    path = report.write(sets_all, out, docs, seeds=seeds, scale=scale, walls=walls, planned_seeds=planned, note=note)
    log(f"wrote {path} in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

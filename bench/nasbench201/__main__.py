"""``python -m bench.nasbench201``: score a stratified sample of NAS-Bench-201 cells with Preflight
and every zero-cost proxy, and write ``docs/nasbench201.md`` (``bench/nasbench201/score.py``).

The full sample (1,000 cells, 16 channels, 5 cells per stage) is about 20 CPU-hours here (about a
minute of conditioning per network on this CPU); on a GPU node use ``--jobs``. ``--channels`` and
``--cells-per-stage`` shrink the networks for a quick look, which the report then states.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.nasbench201", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=1000, help="cells in the reported sample")
    parser.add_argument(
        "--dev",
        type=int,
        default=0,
        help="cells in a development sample disjoint from it (scored first; the fitted combination is fitted on it)",
    )
    parser.add_argument("--data", choices=("fashion", "gaussian"), default="fashion")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--channels", type=int, default=16)
    parser.add_argument("--cells-per-stage", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "nasbench201")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs" / "nasbench201.md")
    parser.add_argument(
        "--note", default=None, help="a paragraph for the top of the report (kept beside the cache for later runs)"
    )
    parser.add_argument("--report-only", action="store_true", help="report the sample's cells already scored")
    parser.add_argument(
        "--keep-older-engines",
        action="store_true",
        help="keep Preflight's parts scored by an older engine; compute only the missing parts",
    )
    args = parser.parse_args(argv)

    from bench.nasbench201.score import plot, report, run, sample_cells, scored
    from bench.nasbench201.table import load_table
    from bench.pipeline.run import kept_note

    table = load_table()
    cells = sample_cells(table, args.cells, seed=0)
    dev = None
    if args.dev:
        dev_cells = sample_cells(table, args.dev, seed=1, exclude=cells)
        dev_out, settings = args.out / "dev", (args.channels, args.cells_per_stage)
        if args.report_only:
            dev = scored(dev_cells, table, args.data, dev_out, *settings, any_engine=True)
        else:
            dev = run(dev_cells, table, args.data, dev_out, args.jobs, *settings, args.keep_older_engines)
    if args.report_only:
        # a report of cached cells reads Preflight's parts whatever engine scored them, and says which
        results = scored(cells, table, args.data, args.out, args.channels, args.cells_per_stage, any_engine=True)
    else:
        results = run(
            cells, table, args.data, args.out, args.jobs, args.channels, args.cells_per_stage, args.keep_older_engines
        )
    if not results:
        print("no cell of the sample is scored yet: run without --report-only")
        return 1
    engines = _engines(results) + (f" Development sample: {_engines(dev).lower()}" if dev else "")
    args.note = kept_note(args.out / f"{args.data}-note.md", args.note)
    if len(results) < len(cells):
        engines += f" Only {len(results)} of the {len(cells)} sampled cells are scored so far."
    skeleton = f"{engines} Networks: {args.channels} channels, {args.cells_per_stage} cells per stage."
    args.docs.parent.mkdir(parents=True, exist_ok=True)
    figure = Path(args.docs.stem) / f"score_vs_accuracy_{args.data}.png"  # beside the report
    plot(results, args.docs.parent / figure)
    note = "\n\n".join(p for p in (args.note, skeleton) if p)  # the kept note's paragraphs, then the provenance
    args.docs.write_text(report(results, args.data, note=note, figure=figure.as_posix(), dev=dev) + "\n")
    print(f"wrote {args.docs}")
    return 0


def _engines(results: list[dict[str, Any]]) -> str:
    """Which engines (``bench.pipeline.run.engine_version``, a hash of its source) scored the cells."""
    from collections import Counter

    from bench.pipeline.run import engine_version, engines_named

    counts = Counter(r.get("engine") or "unrecorded" for r in results)
    named, stale = engines_named({engine: str(n) for engine, n in counts.items()})
    which = "every cell" if engine_version() not in counts else "some"
    hint = (
        f" (an engine other than this checkout's scored {which}: a run without --report-only rescores those cells"
        " unless told --keep-older-engines, as `make bench` is)"
        if stale
        else ""
    )
    return f"Cells scored per engine: {named}{hint}."


if __name__ == "__main__":
    sys.exit(main())

"""``python -m bench`` (= ``make bench-v1``): benchmark v1, the trainability benchmark on 8x8 digits
and breast cancer, end to end; its report is ``docs/benchmarks-v1.md``. ``make bench`` runs
benchmark v2 (``bench.v2``), which supersedes it.

Stages are cached under ``bench/out/<mode>/`` (git-ignored), so a rerun only computes what
changed, and ``--report-only`` rewrites the report from the cache. ``--smoke`` is the tiny
version the test suite runs (a handful of candidates, one epoch, one learning rate) and
writes its report under its output folder instead of ``docs/``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

from bench.machine import cpu_model
from bench.papers import scaling_table
from bench.pipeline import analysis, e2e, report
from bench.pipeline.candidates import sample_candidates
from bench.pipeline.protocol import FULL, SMOKE, Protocol
from bench.pipeline.rows import collect
from bench.pipeline.run import STAGES, cached_extra, read_json, run_stage, write_json
from bench.pipeline.targets import target_lines

ROOT = Path(__file__).resolve().parent.parent
# Optional benchmarks. The report's extras read the cache and feed sections of the report
# (`make bench` runs them, each only when the engine or the score weights changed); the others
# measure something else and print their own tables.
REPORT_EXTRAS = ("probe_length", "output_std", "gaussian_path")
EXTRAS = ("tuning_cost", "service_load", *REPORT_EXTRAS)
# The module of each extra (``--extra NAME``): an ablation of the report or a performance figure.
EXTRA_MODULES = {
    "probe_length": "bench.ablations.probe_length",
    "output_std": "bench.ablations.output_std",
    "gaussian_path": "bench.ablations.gaussian_path",
    "tuning_cost": "bench.perf.tuning_cost",
    "service_load": "bench.perf.service_load",
}


def _machine() -> str:
    return (
        f"{cpu_model()}, {os.cpu_count()} logical CPUs, no GPU used, torch {torch.__version__}, Python "
        f"{platform.python_version()}"
    )


def _engine_text(out: Path) -> str:
    """Which engine produced the cached Preflight reports (source hashes and the git commit)."""
    versions = sorted({read_json(p).get("engine_version", "?") for p in (out / "preflight").glob("*.json")})
    try:
        commit = subprocess.run(
            ["git", "log", "-1", "--format=%h %cd", "--date=iso", "--", "worker/"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return f"engine source hash {', '.join(versions) or 'n/a'}; last commit touching worker/: {commit}"


def _protocol_text(p: Protocol) -> str:
    lrs = ", ".join(f"{lr:g}" for lr in p.lrs)
    return (
        f"SGD, momentum {p.momentum}, no weight decay, batch {p.batch_size}, {p.epochs} epochs, "
        f"learning rates {{{lrs}}} (best final training loss kept), seed {p.seed}, weights from "
        "`nas.build_model(spec, seed=0)`; each initialization (spec, Preflight tuned, PyTorch "
        "default, Kaiming fan-in, Xavier, LSUV, GradInit) trained the same way."
    )


def _scaling(out: Path, smoke: bool, log) -> dict | None:
    settings = {"smoke": smoke, "seeds": 1 if smoke else scaling_table.SEEDS}
    path = out / "scaling.json"
    if path.exists() and read_json(path).get("settings") == settings:
        return read_json(path)
    log("scaling table ...")
    start = time.perf_counter()
    if smoke:
        table = scaling_table.scaling_table(("iris",), seeds=1, lrs=(0.5,), with_preflight=False)
    else:
        table = scaling_table.scaling_table()
    table |= {"settings": settings, "seconds": time.perf_counter() - start}
    write_json(path, table)
    return table


def _e2e_text(result: dict | None) -> str:
    if not result:
        return (
            "Not measured in this run: no `e2e.json` in the cache (the smoke version and `--no-e2e` "
            f"skip it; the full run does {len(e2e.SEEDS)} seeds of `preflight demo --trials {e2e.TRIALS} "
            f"--epochs {e2e.EPOCHS}`)."
        )
    if not result["seeds"]:
        return "Failed on every seed: " + "; ".join(str(v)[-300:] for v in result.get("failures", {}).values())
    lines = [
        f"`preflight demo --trials {result['trials']} --epochs {result['epochs']}` (TPE, the demo's "
        "MLP / residual space on digits) per seed; compute = training seconds + the worker's "
        "conditioning seconds, in trial order, until a trial first reaches the ungated search's "
        "best validation accuracy (inf: never).",
        "",
        "| seed | search | best accuracy | compute to ungated best (s) | ratio to ungated "
        "| epochs to ungated best (ratio) | total compute (s) | pruned before / during training |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for seed, figures in result["seeds"].items():
        for name, f in figures.items():
            if isinstance(f, dict):
                lines.append(
                    f"| {seed} | {name} | {f['best_accuracy']:.3f} | {f['compute_to_ungated_best']:.1f} "
                    f"| {f['ratio_to_ungated']:.2f} | {f['epochs_to_ungated_best']:.0f} "
                    f"({f['epochs_ratio_to_ungated']:.2f}) "
                    f"| {f['total_compute']:.1f} "
                    f"| {f['pruned_before']} / {f['pruned_during']} |"
                )
    lines += [
        "",
        "Median ratio over seeds: " + ", ".join(f"{k} {v:.2f}" for k, v in result["median_ratio"].items()) + ".",
    ]
    if result.get("median_oracle_gate_ratio") is not None:
        lines += ["", f"{e2e.oracle_sentence(result)}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny version for the test suite")
    parser.add_argument("--candidates", type=int, default=None, help="number of candidates")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (one thread each)")
    parser.add_argument("--out", type=Path, default=None, help="cache folder")
    parser.add_argument("--report-only", action="store_true", help="no computation, rewrite the report")
    parser.add_argument("--refresh", action="append", default=[], choices=sorted(STAGES) + ["scaling"])
    parser.add_argument("--no-scaling", action="store_true", help="skip the LIBSVM-style table")
    parser.add_argument("--no-e2e", action="store_true", help="skip the end-to-end gated search")
    parser.add_argument(
        "--extra",
        action="append",
        default=[],
        choices=EXTRAS,
        help="run an optional extra benchmark",
    )
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--note", default="", help="a paragraph for the report (e.g. how the cache was computed)")
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        if not args.quiet:
            print(message, flush=True)

    protocol = SMOKE if args.smoke else FULL
    n = args.candidates or (5 if args.smoke else 160)
    out = args.out or ROOT / "bench" / "out" / ("smoke" if args.smoke else "full")
    docs = out / "docs" if args.smoke else ROOT / "docs"
    candidates = sample_candidates(n, seed=0)
    for stage in args.refresh:
        shutil.rmtree(out / stage, ignore_errors=True) if stage in STAGES else (out / "scaling.json").unlink(
            missing_ok=True
        )
    start = time.perf_counter()
    walls: dict[str, float] = {}
    if not args.report_only:
        for stage in STAGES:
            walls[stage] = run_stage(stage, candidates, protocol, out, jobs=args.jobs, log=log)
            log(f"stage {stage}: {walls[stage]:.0f} s")
        if not args.no_scaling:
            _scaling(out, args.smoke, log)
        if not (args.no_e2e or args.smoke):
            write_json(out / "e2e.json", e2e.e2e(out, log=log))
        for name in args.extra:  # before the report, which shows what they wrote into the cache
            if name not in REPORT_EXTRAS:
                importlib.import_module(EXTRA_MODULES[name]).main([])
            elif args.smoke:
                log(f"extra {name}: skipped (it needs the full candidate set, not --smoke)")
            elif cached_extra(out, name):
                log(f"extra {name}: cached (same engine and score weights)")
            else:
                log(f"extra {name} ...")
                importlib.import_module(EXTRA_MODULES[name]).main([str(out)])
    rows = collect(candidates, out, protocol)
    figures = analysis.analyze(rows, protocol)
    scaling = read_json(out / "scaling.json") if (out / "scaling.json").exists() else None
    context = {
        "command": "make bench-v1" + (" (python -m bench --smoke)" if args.smoke else ""),
        "machine": _machine(),
        "engine": _engine_text(out),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "wall": ", ".join(f"{k} {v:.0f} s" for k, v in walls.items()) or "report only (cached stages)",
        "protocol_text": _protocol_text(protocol),
        "note": args.note,
        "scaling": scaling,
    }
    e2e_result = read_json(out / "e2e.json") if (out / "e2e.json").exists() and not args.smoke else None
    context["e2e"] = _e2e_text(e2e_result)
    for extra in REPORT_EXTRAS:
        path = out / f"{extra}.json"
        context[extra] = read_json(path)["summary"] if path.exists() else None
    context["targets"] = target_lines(figures, e2e_result)
    write_json(out / "figures.json", figures)
    docs.mkdir(parents=True, exist_ok=True)
    if figures.get("calibration"):
        (docs / report.PLOT_DIR).mkdir(parents=True, exist_ok=True)
        (docs / report.PLOT_DIR / "calibration.json").write_text(json.dumps(figures["calibration"], indent=1))
    heldout = set((figures.get("calibration") or {}).get("heldout_ids", [])) or None
    report.plots(rows, docs / report.PLOT_DIR, heldout)
    report.write_markdown(figures, context, docs / "benchmarks-v1.md")
    log(f"wrote {docs / 'benchmarks-v1.md'} in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m bench.v2.recheck``: how far this checkout's engine, on this machine, reproduces the
Preflight stages benchmark v2 has cached, without touching the cache.

It recomputes a sample of the stored ``preflight/s{k}`` stages (``--sample 0``: all 1,044) and sorts
each into: **bit-equal** (scales, bias shifts, components, probe loss, counted cost, verdict, draw);
**within tolerance** (``stages.same_inputs`` on the scales, the shifts' sketch and the counted cost:
what the stages that read a Preflight report compare, so a rerun of ``make bench`` would retrain
nothing for it); or **beyond it** (those trainings would rerun). Verdicts that flip are listed.

Run it after an engine change meant to leave valid input as it was, before ``make bench``: on the
machine that stored the cache such a change reads all bit-equal; on another machine of the same
kind, float rounding made 311 of 1,044 bit-equal, 1,040 within tolerance and flipped 3 verdicts
near the cut (docs/benchmarks.md, the note), so a rerun there moves figures in their last digits.
The score is left out of the comparison: the stored one was computed with the weights shipped then,
and the reports recompute it from the components.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

import torch

from bench.pipeline.candidates import Candidate
from bench.pipeline.run import _clean, _restore, engine_version, imap_spawned, read_json
from bench.v2.candidates import dev_set, test_set
from bench.v2.stages import Stage, _preflight, _sketch, same_inputs

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "bench" / "results" / "v2"
SEEDS = 3
COMPARED = ("scales", "bias_shifts", "components", "probe_loss", "counted_cost", "verdict", "draw")


def _as_stored(result: dict[str, Any]) -> dict[str, Any]:
    """A fresh result as the cache would read it back (non-finite numbers through their strings)."""
    restored: dict[str, Any] = _restore(json.loads(json.dumps(_clean(result))))
    return restored


def compare(stored: dict[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
    """What differs between a stored Preflight stage and a recomputed one, and whether the stages
    that read it would take the recomputed one as theirs (``within``)."""
    differs = [
        k for k in COMPARED if json.dumps(stored.get(k), sort_keys=True) != json.dumps(fresh.get(k), sort_keys=True)
    ]
    shifts = [_sketch(s) if s else s for s in (stored.get("bias_shifts"), fresh.get("bias_shifts"))]
    within = (
        same_inputs(stored.get("scales"), fresh.get("scales"))
        and same_inputs(stored.get("counted_cost"), fresh.get("counted_cost"))
        and same_inputs(shifts[0], shifts[1])
        and stored.get("error") == fresh.get("error")
    )
    return {"differs": differs, "within": within, "flipped": stored.get("verdict") != fresh.get("verdict")}


def _recheck(args: tuple[dict[str, Any], int, str]) -> dict[str, Any]:
    cand, seed, cache = args
    torch.set_num_threads(1)
    candidate = Candidate(**cand)
    stored = read_json(Path(cache) / f"preflight/s{seed}" / f"{candidate.id}.json")
    fresh = _as_stored(_preflight(candidate, Stage("preflight", seed), Path(cache), 1.0))
    return {"id": candidate.id, "seed": seed, "engine": stored.get("engine_version")} | compare(stored, fresh)


def recheck(
    candidates: list[Candidate], cache: Path, sample: int, seed: int = 0, jobs: int = 2, seeds: int = SEEDS
) -> list[dict[str, Any]]:
    """Each stored (candidate, seed) stage of ``candidates`` under ``cache``, or ``sample`` of them
    drawn at random (``seed``), recomputed and compared."""
    stages = [(c, k) for c in candidates for k in range(seeds) if (cache / f"preflight/s{k}" / f"{c.id}.json").exists()]
    if sample:
        stages = random.Random(seed).sample(stages, min(sample, len(stages)))
    tasks = [(c.to_json(), k, str(cache)) for c, k in stages]
    return sorted(imap_spawned(_recheck, tasks, jobs), key=lambda r: (r["seed"], r["id"]))


def summary(results: list[dict[str, Any]]) -> list[str]:
    """One line per stage that is not bit-equal, then the counts."""
    lines = [
        f"s{r['seed']} {r['id']}: {'within tolerance' if r['within'] else 'BEYOND tolerance'}"
        f"{', verdict flipped' if r['flipped'] else ''}; differs in {', '.join(r['differs'])}"
        for r in results
        if r["differs"]
    ]
    engines = sorted({str(r["engine"]) for r in results})
    bit = sum(not r["differs"] for r in results)
    within = sum(r["within"] for r in results)
    flipped = sum(r["flipped"] for r in results)
    lines.append(
        f"{len(results)} stages (stored by engine {', '.join(engines)}; recomputed by {engine_version()}): "
        f"{bit} bit-equal, {within} within tolerance, {len(results) - within} beyond it, {flipped} verdicts flipped"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.v2.recheck", description=__doc__)
    parser.add_argument("--sample", type=int, default=60, help="stages to recompute (0: every stored one)")
    parser.add_argument("--seed", type=int, default=0, help="the sample's random seed")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=CACHE, help="the cache to compare with")
    args = parser.parse_args(argv)
    if args.sample < 0 or args.jobs < 1:
        parser.error("--sample must be >= 0 and --jobs >= 1")
    results = recheck(test_set() + dev_set(), args.out, args.sample, args.seed, args.jobs)
    for line in summary(results):
        print(line)
    return 0 if all(r["within"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

"""The tuned init against LSUV on the search's own networks, at the same rates.

The searches compare the tuned init at the recommended rate with the spec's init at a sampled or
fixed rate, which mixes the init with the rate. Here the networks of ``tuned, no gate``'s random
start-up trials (the same networks in every search of a seed) are also trained from LSUV (the
20-line pipeline benchmark v2 compares against: ``bench.pipeline.inits.lsuv_``, on the conditioning's
64 images) at the recommended rate and at the fixed 0.03, so that each comparison holds the rate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bench.fashion_search.evaluate import Evaluator
from bench.fashion_search.searches import FIXED_RATE, STARTUP_TRIALS

__all__ = ["compare", "read_peers", "train_peers"]

PEER = "lsuv"


def _seed_rows(task: tuple[Path, int, list[dict[str, Any]], int]) -> list[dict[str, Any]]:
    import optuna
    import torch

    from bench.fashion_search.space import search_space

    out, seed, trials, epochs = task
    torch.set_num_threads(1)
    evaluator = Evaluator(out)
    rows = []
    for trial in trials:
        spec, _ = search_space(optuna.trial.FixedTrial(trial["params"]))
        report, _ = evaluator.condition(spec, seed)
        recommended = float(trial["lr"])
        trained = {
            "tuned": evaluator.epochs(spec, recommended, seed, epochs, report=report),
            "lsuv": evaluator.epochs(spec, recommended, seed, epochs, peer=PEER),
            "lsuv_fixed": evaluator.epochs(spec, FIXED_RATE, seed, epochs, peer=PEER),
            "spec_fixed": evaluator.epochs(spec, FIXED_RATE, seed, epochs),
        }
        rows.append({"seed": seed, "name": spec["name"]} | {k: v[-1].test for k, v in trained.items()})
    return rows


def train_peers(out: Path, done: dict[int, dict[str, Any]], epochs: int, jobs: int = 2) -> list[dict[str, Any]]:
    """Per start-up network of ``tuned, no gate``: its test accuracy from the tuned init at the
    recommended rate, from LSUV at that rate and at 0.03, and from the spec's init at 0.03 (trained
    here when not cached), one process per seed, ``jobs`` at a time."""
    from bench.pipeline.run import imap_spawned

    tasks = [
        (
            out,
            seed,
            [t for t in data["searches"]["tuned, no gate"][:STARTUP_TRIALS] if t["state"] == "complete"],
            epochs,
        )
        for seed, data in sorted(done.items())
    ]
    results = imap_spawned(_seed_rows, tasks, jobs=jobs, nice=5) if jobs > 1 else map(_seed_rows, tasks)
    return sorted((row for rows in results for row in rows), key=lambda r: (r["seed"], r["name"]))


def read_peers(path: Path, key: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The rows stored at ``path`` when they were trained for these seeds and this configuration."""
    from bench.pipeline.run import read_json

    if not path.exists():
        return None
    data = read_json(path)
    return data["rows"] if {k: data.get(k) for k in key} == key else None


def compare(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Share of networks where the first trains to a higher test accuracy than the second (ties
    count half), and the mean difference, with bootstrap intervals over networks."""
    from bench.v2.stats import bootstrap

    out: dict[str, Any] = {"n": len(rows)}
    pairs = (
        ("tuned", "lsuv"),
        ("tuned", "lsuv_fixed"),
        ("lsuv", "lsuv_fixed"),
        ("lsuv", "spec_fixed"),
        ("tuned", "spec_fixed"),
    )
    for first, second in pairs:
        a, b = np.array([r[first] for r in rows]), np.array([r[second] for r in rows])
        wins = (a > b) + 0.5 * (a == b)
        out[f"{first}>{second}"] = {
            "share": bootstrap(lambda i, w=wins: float(w[i].mean()), len(rows)),
            "difference": bootstrap(lambda i, d=a - b: float(d[i].mean()), len(rows)),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.fashion_search.peers``: the comparison of the report's last section with the
    tuned init of this checkout's engine (the start-up networks and their rates stay those the cached
    seeds recorded, so only the init changes); trainings are cached and shared with the search."""
    import argparse

    from bench.fashion_search.run import seed_results
    from bench.pipeline.run import engine_version

    parser = argparse.ArgumentParser(prog="python -m bench.fashion_search.peers", description=main.__doc__)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=2)
    default = Path(__file__).resolve().parents[2] / "bench" / "results" / "fashion_search"
    parser.add_argument("--out", type=Path, default=default)
    args = parser.parse_args(argv)
    done = seed_results(args.out, list(range(args.seeds)), 30, 4, any_engine=True)
    rows = train_peers(args.out, done, 4, args.jobs)
    print(f"engine {engine_version()}: start-up networks of {len(done)} seeds")
    # the spaces name a network's norm (nas.space): "...-batchnorm" or "...-none"
    for group, members in (("all", rows), ("with batchnorm", [r for r in rows if "-batchnorm" in r["name"]])):
        print(f"{group}: {len(members)} networks")
        for pair, figures in compare(members).items():
            if pair != "n":
                share, diff = figures["share"], figures["difference"]
                print(f"  {pair}: first better on {share.text()}, mean difference {diff.text(3)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

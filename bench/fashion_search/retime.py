"""``python -m bench.fashion_search.retime``: are two searches' seconds different because of what
they train, or because of the machine their sessions ran on?

A network trained once is cached with the seconds first measured, so a search added in a later
session (``lsuv, no gate``) is timed on that session's machine, the others on theirs. Here the
start-up networks that two searches trained at the same rate (the same trial of the same seed;
``no gate`` from the spec's init, ``lsuv, no gate`` from LSUV's) are trained again for one epoch
from each init, one after the other in one process at one thread, so both inits meet the same
machine. Two ratios per network (seconds per optimizer step, each epoch's validation pass
included, as the cached trainings count it): LSUV's init over the spec's on this machine, which
says whether the init itself is slower to train; and each search's cached seconds over this
machine's for the same init, which says how fast the machine was that first timed it. Results go
to ``retime.json`` beside the search's cache; the report reads them (``report._timing``).
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.fashion_search.searches import STARTUP_TRIALS
from bench.v2.stats import Interval, bootstrap

__all__ = ["PAIR", "paired_networks", "read_retime", "retime", "summarize"]

ROOT = Path(__file__).resolve().parents[2]
# the searches compared, and the init each trained its networks from
PAIR = {"no gate": "spec", "lsuv, no gate": "lsuv"}


def paired_networks(searches: dict[str, list[dict[str, Any]]], per_seed: int) -> list[int]:
    """Trial numbers (start-up trials) where both searches of ``PAIR`` trained the same network at
    the same rate to the same number of steps (so neither stopped early), at most ``per_seed``;
    none where a search has not run on the seed yet."""
    if any(name not in searches for name in PAIR):
        return []
    first, second = ({t["number"]: t for t in searches[name]} for name in PAIR)
    numbers = []
    for number in range(STARTUP_TRIALS):
        a, b = first.get(number), second.get(number)
        if a is None or b is None or a["state"] != "complete" or b["state"] != "complete":
            continue
        if a["name"] == b["name"] and a["lr"] == b["lr"] and a["train_steps"] == b["train_steps"] > 0:
            numbers.append(number)
    return numbers[:per_seed]


def _seconds_per_step(spec: dict[str, Any], lr: float, seed: int, init: str, data: Any) -> tuple[float, bool]:
    from bench.fashion_search.evaluate import search_trainer

    trainer = search_trainer(spec, data, lr, seed, peer=None if init == "spec" else init)
    trainer.epoch()
    return trainer.seconds / max(trainer.steps, 1), trainer.diverged


def retime(out: Path, seeds: list[int], per_seed: int) -> list[dict[str, Any]]:
    """One row per paired network: its cached and fresh seconds per step under each init
    (resuming from ``retime.json``: a network already retimed is not trained again)."""
    import optuna
    import torch

    from bench.fashion_search.evaluate import load_splits
    from bench.fashion_search.run import seed_path
    from bench.fashion_search.space import search_space
    from bench.pipeline.run import read_json, write_json

    torch.set_num_threads(1)
    path = out / "retime.json"
    stored = {_identity(r): r for r in (read_json(path)["rows"] if path.exists() else [])}
    run = f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime())} {platform.node()}, torch {torch.__version__}"
    rows: list[dict[str, Any]] = []
    data = None
    for seed in seeds:
        if not seed_path(out, seed).exists():
            continue  # a seed not run yet has nothing to retime
        searches = read_json(seed_path(out, seed))["searches"]
        for number in paired_networks(searches, per_seed):
            trials = {name: next(t for t in searches[name] if t["number"] == number) for name in PAIR}
            row: dict[str, Any] = {"seed": seed, "number": number, "name": trials["no gate"]["name"]}
            row["lr"] = trials["no gate"]["lr"]
            row |= {
                init: {"cached": trials[name]["train_seconds"] / trials[name]["train_steps"]}
                for name, init in PAIR.items()
            }
            kept = stored.get(_identity(row))  # retimed before, and the seed's trials are still those
            if kept is None:
                data = data if data is not None else load_splits()[0]
                spec, lr = search_space(optuna.trial.FixedTrial(trials["no gate"]["params"]))
                # the order alternates, so that neither init is always the one trained cold
                order = list(PAIR.values())[:: 1 if len(rows) % 2 == 0 else -1]
                for init in order:
                    fresh, diverged = _seconds_per_step(spec, lr, seed, init, data)
                    row[init] |= {"fresh": fresh, "diverged": diverged}
                kept = row | {"run": run, "first": order[0]}
                print(f"seed {seed} trial {number} {row['name']}: " + _row_text(kept), flush=True)
            rows.append(kept)
            write_json(path, {"rows": rows})
    return rows


def _identity(row: dict[str, Any]) -> tuple[Any, ...]:
    """What a retimed row is of: the trial and the cached seconds it is compared with."""
    cached = tuple(round(row[init]["cached"], 12) for init in PAIR.values())
    return (row["seed"], row["number"], row["name"], row["lr"], cached)


def _row_text(row: dict[str, Any]) -> str:
    return ", ".join(
        f"{init} {row[init]['cached']:.3f} s cached / {row[init]['fresh']:.3f} s now" for init in PAIR.values()
    )


def read_retime(out: Path) -> list[dict[str, Any]]:
    from bench.pipeline.run import read_json

    path = out / "retime.json"
    return read_json(path)["rows"] if path.exists() else []


def _median_ratio(top: np.ndarray, bottom: np.ndarray) -> Interval:
    ratio = top / bottom
    return bootstrap(lambda i: float(np.median(ratio[i])), len(ratio))


def summarize(rows: list[dict[str, Any]]) -> dict[str, Interval]:
    """Medians over networks, with bootstrap intervals: ``lsuv_over_spec`` (one machine, the same
    networks); per init, ``cached_over_fresh`` (the seconds first measured over this machine's);
    and ``machines``, per network the LSUV search's first machine over the ungated search's (its
    cached-over-fresh ratio over the spec's: the machine's speed, with the init's taken out)."""
    rows = [r for r in rows if not any(r[init]["diverged"] for init in PAIR.values())]
    if not rows:
        return {}
    column = {
        (init, kind): np.array([r[init][kind] for r in rows]) for init in PAIR.values() for kind in ("cached", "fresh")
    }
    figures = {"lsuv_over_spec": _median_ratio(column["lsuv", "fresh"], column["spec", "fresh"])}
    for init in PAIR.values():
        figures[f"{init}_cached_over_fresh"] = _median_ratio(column[init, "cached"], column[init, "fresh"])
    figures["machines"] = _median_ratio(
        column["lsuv", "cached"] / column["lsuv", "fresh"], column["spec", "cached"] / column["spec", "fresh"]
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fashion_search.retime", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0 .. N-1 (default 10)")
    parser.add_argument("--per-seed", type=int, default=2, help="networks retimed per seed (default 2)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fashion_search")
    args = parser.parse_args(argv)
    rows = retime(args.out, list(range(args.seeds)), args.per_seed)
    for name, interval in summarize(rows).items():
        print(f"{name}: {interval.text()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

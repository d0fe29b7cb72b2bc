"""The searches of every seed, resumable: a seed's trials go to ``<out>/seeds/seed<N>.json`` when
all its searches are done, with the configuration they ran under (a changed configuration or
engine reruns the seed; the trainings and conditionings it shares stay cached). A search added to
``SEARCHES`` later runs alone on a seed that has the others under this configuration (or, told to
keep older engines, under any engine), and joins it: the searches of a seed share nothing but the
cached trainings, so it runs as it would have among them. The seed then names it under ``added``,
with the engine it ran beside."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench.pipeline.run import engine_version, imap_spawned, read_json, write_json

__all__ = ["config", "run", "seed_path", "seed_results"]


def config(trials: int, epochs: int) -> dict[str, Any]:
    from bench.fashion_search.evaluate import DATA, VERSION

    return {"trials": trials, "epochs": epochs, "engine": engine_version(), "data": DATA, "version": VERSION}


def seed_path(out: Path, seed: int) -> Path:
    return out / "seeds" / f"seed{seed}.json"


def seed_results(
    out: Path, seeds: list[int], trials: int, epochs: int, any_engine: bool = False
) -> dict[int, dict[str, Any]]:
    """The finished seeds run under this configuration, with every search of ``SEARCHES``;
    ``any_engine``: also those an earlier engine ran (a report of cached results says which)."""
    from bench.fashion_search.searches import SEARCHES

    done = {}
    for seed in seeds:
        path = seed_path(out, seed)
        if not path.exists():
            continue
        data = read_json(path)
        if _same_config(data, trials, epochs, any_engine) and set(data["searches"]) == set(SEARCHES):
            done[seed] = data
    return done


def _same_config(data: dict[str, Any], trials: int, epochs: int, any_engine: bool) -> bool:
    """Whether a stored seed ran under this configuration (``any_engine``: whatever its engine)."""
    ran, wanted = data.get("config") or {}, config(trials, epochs)
    if any_engine:
        ran, wanted = ran | {"engine": None}, wanted | {"engine": None}
    return bool(ran == wanted)


def _one_seed(task: tuple[Path, int, int, int, list[str] | None]) -> int:
    import torch

    from bench.fashion_search.evaluate import Evaluator
    from bench.fashion_search.searches import run_seed

    out, seed, trials, epochs, names = task
    torch.set_num_threads(1)  # small networks: one thread per process beats two contending
    started = time.perf_counter()
    searches = run_seed(Evaluator(out), seed, trials, epochs, log=lambda line: print(line, flush=True), names=names)
    wall = time.perf_counter() - started
    if names is None:
        result = {"config": config(trials, epochs), "seed": seed, "wall_seconds": wall, "searches": searches}
    else:  # the missing searches join the seed's others
        result = read_json(seed_path(out, seed))
        result["searches"] |= searches
        result.setdefault("added", {}).update(
            {name: {"engine": engine_version(), "wall_seconds": wall} for name in searches}
        )
    write_json(seed_path(out, seed), result)
    return seed


def _missing(out: Path, seed: int, trials: int, epochs: int, any_engine: bool) -> list[str] | None:
    """The searches a seed run under this configuration (any engine's, with ``any_engine``) lacks;
    None when there is no such seed (all of them run)."""
    from bench.fashion_search.searches import SEARCHES

    path = seed_path(out, seed)
    if not path.exists():
        return None
    data = read_json(path)
    if not _same_config(data, trials, epochs, any_engine) or not set(data["searches"]) <= set(SEARCHES):
        return None
    return [name for name in SEARCHES if name not in data["searches"]]


def run(out: Path, seeds: list[int], trials: int, epochs: int, jobs: int, any_engine: bool = False) -> None:
    """Run the seeds not yet done, ``jobs`` at a time (``any_engine``: keep those an earlier
    engine ran)."""
    from bench.fashion_search.searches import SEARCHES

    todo = [s for s in seeds if s not in seed_results(out, seeds, trials, epochs, any_engine)]
    if not todo:
        return
    print(
        f"fashion search: seeds {todo} ({trials} trials x {len(SEARCHES)} searches, {epochs} epochs), {jobs} at a time",
        flush=True,
    )
    tasks = [(out, seed, trials, epochs, _missing(out, seed, trials, epochs, any_engine)) for seed in todo]
    if jobs <= 1:
        for task in tasks:
            print(f"seed {_one_seed(task)} done", flush=True)
        return
    for seed in imap_spawned(_one_seed, tasks, jobs=jobs, nice=5):
        print(f"seed {seed} done", flush=True)

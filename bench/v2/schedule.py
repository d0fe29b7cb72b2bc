"""Run benchmark v2's stages wave by wave over the candidate sets, in worker processes.

The frozen test set goes first (its tables are the ones that count), then the development
set; within a set, ``bench.v2.stages.plan`` orders the waves (seed 0 of everything first). Each
task is cached as soon as it finishes, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from bench.pipeline.candidates import Candidate
from bench.pipeline.run import imap_spawned
from bench.v2.stages import Stage, cached, plan, run_task

__all__ = ["run"]


def _todo(wave: list[Stage], candidates: list[Candidate], out: Path, scale: float) -> list[tuple]:
    """The wave's tasks not cached yet; read only once the waves before it have run, since a
    dependent stage's fingerprint holds what its Preflight stage returned."""
    return [(s.key, c.to_json(), str(out), scale) for s in wave for c in candidates if not cached(out, s, c, scale)]


def run(
    sets: list[tuple[str, list[Candidate]]],
    out: Path,
    *,
    seeds: int,
    scale: float = 1.0,
    jobs: int = 2,
    log: Callable[[str], None] = print,
) -> dict[str, float]:
    """Compute every missing stage; returns the wall seconds per set."""
    walls: dict[str, float] = {}
    waves = plan(seeds)
    for name, candidates in sets:
        start = time.perf_counter()
        for index, wave in enumerate(waves):
            tasks = _todo(wave, candidates, out, scale)
            if not tasks:
                continue
            log(f"[{name}] wave {index + 1}/{len(waves)}: {len(tasks)} tasks")
            if jobs <= 1:
                for i, task in enumerate(tasks):
                    log(f"[{name}] {i + 1}/{len(tasks)} {run_task(task)}")
            else:
                for i, message in enumerate(imap_spawned(run_task, tasks, jobs, nice=5)):
                    log(f"[{name}] {i + 1}/{len(tasks)} {message}")
        walls[name] = time.perf_counter() - start
    return walls

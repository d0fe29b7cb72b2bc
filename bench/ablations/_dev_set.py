"""The command line the development-set ablations share: compute every candidate (cached, resumable)
in worker processes unless ``--report-only``, then print the report."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from bench.pipeline.candidates import Candidate


def run_on_dev_set(
    prog: str,
    description: str | None,
    run_one: Callable[[dict[str, Any]], str],
    report: Callable[[list[Candidate]], None],
    argv: list[str] | None,
) -> int:
    """``run_one`` on each of benchmark v2's development candidates (never the frozen test set),
    then ``report`` on them."""
    from bench.v2.candidates import dev_set

    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    candidates = dev_set()
    if not args.report_only:
        run_each(run_one, candidates, args.jobs)
    report(candidates)
    return 0


def run_each(run_one: Callable[[dict[str, Any]], str], candidates: list[Candidate], jobs: int, label: str = "") -> None:
    """``run_one`` on each candidate in ``jobs`` spawned processes (niced), printing its progress
    line after ``label``."""
    from bench.pipeline.run import imap_spawned

    tasks = [c.to_json() for c in candidates]
    for i, message in enumerate(imap_spawned(run_one, tasks, jobs, nice=5)):
        print(f"{label}{i + 1}/{len(candidates)} {message}", flush=True)

"""``python -m bench.perf.quota_count``: what the submission quota's count costs a token with a long
history (``service.store.reports.unfinished_count``, asked before every submission of a token that is
not admin).

A fresh SQLite store gets ``--history`` finished submissions of one owner and ``--queued`` queued
jobs, ``--held`` of them that owner's (half by default); the count is timed as the API asks it (up to the default quota,
10,000), against the same count walked from the owner's history instead of from the unfinished jobs
(the first form, which took 125 ms at 200,000 finished submissions). docs/service.md quotes it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from sqlalchemy import Connection, Engine, func, insert, select

from service.store import reports
from service.store.db import make_engine, read_connection
from service.store.models import Candidate, OwnedCandidate, Status

__all__ = ["main"]

_QUOTA = 10_000


def _store(path: Path, history: int, queued: int, held: int) -> Engine:
    subprocess.run(
        [sys.executable, "-m", "service.cli", "db", "upgrade"],
        env={**os.environ, "PREFLIGHT_DATABASE_URL": f"sqlite:///{path}"},
        check=True,
        capture_output=True,
    )
    engine = make_engine(f"sqlite:///{path}")
    when = datetime(2026, 1, 1)
    total = history + queued
    with engine.begin() as connection:
        connection.execute(
            insert(Candidate),
            [
                {
                    "cache_key": f"k{i}",
                    "spec_hash": "0" * 64,
                    "spec": {},
                    "options": {},
                    "device": "any",
                    "priority": 0,
                    "status": (Status.QUEUED if i < queued else Status.DONE).value,
                    "attempts": 0,
                    "max_attempts": 3,
                    "created_at": when,
                }
                for i in range(total)
            ],
        )
        connection.execute(
            insert(OwnedCandidate),
            [
                {
                    "public_id": f"{i:032x}",
                    "candidate_id": i + 1,
                    "owner_id": 2 if held <= i < queued else 1,
                    "priority": 0,
                    "created_at": when,
                }
                for i in range(total)
            ],
        )
    return engine


def _from_history(connection: Connection, owner_id: int, limit: int) -> int:
    """The count walked from the owner's submissions (``ix_owned_candidates_owner``)."""
    owned, job = OwnedCandidate.__table__, Candidate.__table__
    held = (
        select(owned.c.id)
        .select_from(owned.join(job, job.c.id == owned.c.candidate_id))
        .where(
            owned.c.owner_id == owner_id,
            owned.c.cancelled_at.is_(None),
            job.c.status.in_((Status.QUEUED.value, Status.RUNNING.value)),
        )
        .limit(limit)
        .subquery()
    )
    return int(connection.scalar(select(func.count()).select_from(held)) or 0)


def _best_of(repeats: int, count: object, engine: Engine) -> tuple[int, float]:
    best, found = float("inf"), -1
    for _ in range(repeats):
        start = time.perf_counter()
        with read_connection(engine) as connection:
            found = count(connection)  # type: ignore[operator]
        best = min(best, time.perf_counter() - start)
    return found, best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.quota_count", description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", type=int, default=200_000, help="finished submissions of the owner")
    parser.add_argument("--queued", type=int, default=2_000, help="queued jobs, half of them the owner's")
    parser.add_argument("--held", type=int, default=None, help="of the queued jobs, the owner's (default: half)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        held = args.queued // 2 if args.held is None else min(args.held, args.queued)
        engine = _store(Path(folder) / "quota.db", args.history, args.queued, held)
        try:
            shipped = _best_of(args.repeats, lambda c: reports.unfinished_count(c, owner_id=1, limit=_QUOTA), engine)
            walked = _best_of(args.repeats, lambda c: _from_history(c, 1, _QUOTA), engine)
        finally:
            engine.dispose()
    assert shipped[0] == walked[0], (shipped, walked)
    print(
        f"history {args.history}, queued {args.queued}: {shipped[0]} held; from the unfinished jobs "
        f"{1000 * shipped[1]:.1f} ms, from the owner's history {1000 * walked[1]:.1f} ms "
        f"({walked[1] / shipped[1]:.1f}x), best of {args.repeats}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

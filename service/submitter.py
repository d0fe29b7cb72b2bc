"""Group commit of submissions: every submission that arrives while one transaction commits
goes into the next one.

A single-spec POST costs one durable commit, and a commit (a WAL flush on PostgreSQL, the
one write lock on SQLite) costs far more than validating the spec. Requests therefore hand
their validated candidates to their process's one :class:`GroupCommitter`, which writes all
that are waiting in one transaction and answers each request only after that commit. Nothing
waits on a timer: under light load a transaction holds one request; under load it holds every
request that arrived while the previous one was committing. A request is still answered only
once its rows are durable, and it gets the answer it would get alone (a key that an earlier
request of the same transaction created is a cache hit, as it would be in sequence).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio.to_thread
from sqlalchemy import select
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from service import queue
from service.db import session_scope
from service.models import Candidate

__all__ = ["MAX_CANDIDATES_PER_COMMIT", "GroupCommitter", "Submitted"]

log = logging.getLogger(__name__)

# One transaction takes at most this many candidates; the rest wait for the next one.
MAX_CANDIDATES_PER_COMMIT = 1024


@dataclass(frozen=True)
class Submitted:
    """One submitted candidate as committed: its row and whether this submission created it."""

    row: Candidate
    created: bool


@dataclass
class _Waiting:
    candidates: Sequence[queue.NewCandidate]
    future: asyncio.Future[list[Submitted]] = field(repr=False)


class GroupCommitter:
    """Writes the submissions of one API process (one event loop), many requests per
    transaction. Start it with the loop's lifespan; :meth:`aclose` stops it."""

    def __init__(self, sessions: sessionmaker[Session], *, max_attempts: int) -> None:
        self._sessions = sessions
        self._max_attempts = max_attempts
        self._waiting: list[_Waiting] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.commits = 0  # transactions written
        self.requests = 0  # requests answered by them

    async def submit(self, candidates: Sequence[queue.NewCandidate]) -> list[Submitted]:
        """Queue ``candidates`` durably (in order, one Submitted each) once they are committed."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="preflight-group-commit"
            )
        future: asyncio.Future[list[Submitted]] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Waiting(candidates, future))
        self._wake.set()
        # shield: a client that disconnects does not cancel the transaction of the others
        return await asyncio.shield(future)

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._waiting:
                group = self._take()
                try:
                    await self._commit(group)
                except asyncio.CancelledError:
                    _fail(group, None)
                    raise
                except (OperationalError, InterfaceError) as exc:  # the database is down
                    _fail(group, exc)
                except Exception as exc:
                    if len(group) == 1:
                        _fail(group, exc)
                        continue
                    # Not the database's fault: retry each request alone, so that only the
                    # one that caused it fails.
                    log.warning("a group commit of %d requests failed (%s); retrying one by one",
                                len(group), type(exc).__name__)  # fmt: skip
                    for waiting in group:
                        try:
                            await self._commit([waiting])
                        except Exception as single:
                            _fail([waiting], single)

    def _take(self) -> list[_Waiting]:
        group, count = [], 0
        while self._waiting:
            size = len(self._waiting[0].candidates)
            if group and count + size > MAX_CANDIDATES_PER_COMMIT:
                break
            group.append(self._waiting.pop(0))
            count += size
        return group

    async def _commit(self, group: list[_Waiting]) -> None:
        answers = await anyio.to_thread.run_sync(self._write, group)
        for waiting, answer in zip(group, answers, strict=True):
            if not waiting.future.done():
                waiting.future.set_result(answer)

    def _write(self, group: list[_Waiting]) -> list[list[Submitted]]:
        """One transaction for the whole group; the rows come back with it (no second read)."""
        everything = [c for waiting in group for c in waiting.candidates]
        with session_scope(self._sessions, write=True) as session:
            enqueued = queue.submit(session, candidates=everything, max_attempts=self._max_attempts)
            ids = sorted({e.id for e in enqueued})
            rows = {
                row.id: row
                for row in session.scalars(select(Candidate).where(Candidate.id.in_(ids)))
            }
        answers, start = [], 0
        for waiting in group:
            part = enqueued[start : start + len(waiting.candidates)]
            start += len(waiting.candidates)
            answers.append([Submitted(rows[e.id], e.created) for e in part])
        self.commits += 1
        self.requests += len(group)
        return answers


def _fail(group: list[_Waiting], exc: BaseException | None) -> None:
    """Answer every request of ``group`` with ``exc`` (None: cancelled, on shutdown)."""
    for waiting in group:
        if waiting.future.done():
            continue
        if exc is None:
            waiting.future.cancel()
        else:
            waiting.future.set_exception(exc)

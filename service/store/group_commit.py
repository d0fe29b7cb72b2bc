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
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
from sqlalchemy import Row
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from service.store import jobs, reports
from service.store.db import session_scope

__all__ = ["MAX_CANDIDATES_PER_COMMIT", "GroupCommitter", "Submitted"]

log = logging.getLogger(__name__)

# One transaction takes at most this many candidates; the rest wait for the next one.
MAX_CANDIDATES_PER_COMMIT = 1024
# PostgreSQL's deadlock_detected and serialization_failure: run the transaction again.
_RETRYABLE_SQLSTATES = frozenset({"40P01", "40001"})
_DEADLOCK_RETRIES = 3


@dataclass(frozen=True)
class Submitted:
    """One submitted candidate as committed: the candidate as its owner sees it
    (``reports.owned_views``) and whether this submission created the job."""

    row: Row[Any]
    created: bool


@dataclass
class _Waiting:
    candidates: Sequence[jobs.NewCandidate]
    future: asyncio.Future[list[Submitted]] = field(repr=False)


class GroupCommitter:
    """Writes the submissions of one API process (one event loop), many requests per
    transaction. Start it with the loop's lifespan; :meth:`aclose` stops it."""

    def __init__(self, sessions: sessionmaker[Session], *, max_attempts: int) -> None:
        self._sessions = sessions
        self._max_attempts = max_attempts
        self._waiting: deque[_Waiting] = deque()
        self._closing = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.commits = 0  # transactions written
        self.requests = 0  # requests answered by them

    async def submit(self, candidates: Sequence[jobs.NewCandidate]) -> list[Submitted]:
        """Queue ``candidates`` durably (in order, one Submitted each) once they are committed."""
        if self._closing:
            raise RuntimeError("the group commit is closed (the API is shutting down)")
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="preflight-group-commit")
            self._task.add_done_callback(self._ended)
        future: asyncio.Future[list[Submitted]] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Waiting(candidates, future))
        self._wake.set()
        # shield: a client that disconnects does not cancel the transaction of the others
        return await asyncio.shield(future)

    async def aclose(self, timeout: float = 30.0) -> None:
        """Commit what is waiting, then stop. A transaction in flight is never cancelled
        (its thread would commit after the engine is gone, its requests unanswered)."""
        self._closing = True
        task = self._task
        if task is None:
            return
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError:
            log.warning("the group commit did not drain within %.0f s; stopping it", timeout)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """The loop stopped: on close, or because of a bug. Fail what still waits; a later
        submission starts a fresh loop unless the committer is closing."""
        self._task = None
        if not task.cancelled() and task.exception() is not None:
            log.error("the group commit loop failed", exc_info=task.exception())
        _fail(
            list(self._waiting),
            RuntimeError("the group commit stopped before this submission was written"),
        )
        self._waiting.clear()

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
                except Exception as exc:
                    if len(group) == 1:
                        _fail(group, exc)
                        continue
                    # Retry each request alone, so that only one that caused it fails (and
                    # each gets its own error; in an outage each fails at once).
                    log.warning(
                        "a group commit of %d requests failed (%s); retrying one by one", len(group), type(exc).__name__
                    )
                    for index, waiting in enumerate(group):
                        try:
                            await self._commit([waiting])
                        except asyncio.CancelledError:
                            _fail(group[index:], None)
                            raise
                        except Exception as single:
                            _fail([waiting], single)
            if self._closing:
                return

    def _take(self) -> list[_Waiting]:
        group: list[_Waiting] = []
        count = 0
        while self._waiting:
            size = len(self._waiting[0].candidates)
            if group and count + size > MAX_CANDIDATES_PER_COMMIT:
                break
            group.append(self._waiting.popleft())
            count += size
        return group

    async def _commit(self, group: list[_Waiting]) -> None:
        answers = await anyio.to_thread.run_sync(self._write, group)
        for waiting, answer in zip(group, answers, strict=True):
            if not waiting.future.done():
                waiting.future.set_result(answer)

    def _write(self, group: list[_Waiting]) -> list[list[Submitted]]:
        """One transaction for the whole group; the rows come back with it (no second read).

        Two API processes inserting the same new specs in opposite orders can deadlock on
        PostgreSQL, which aborts one of the transactions: that one simply runs again.
        """
        everything = [c for waiting in group for c in waiting.candidates]
        for attempt in range(_DEADLOCK_RETRIES + 1):
            try:
                with session_scope(self._sessions, write=True) as session:
                    enqueued = jobs.submit(session, candidates=everything, max_attempts=self._max_attempts)
                    rows = reports.owned_views(session, owned_ids=[e.owned_id for e in enqueued])
                break
            except DBAPIError as exc:
                if attempt == _DEADLOCK_RETRIES or getattr(exc.orig, "sqlstate", None) not in _RETRYABLE_SQLSTATES:
                    raise
                log.info("group commit: %s; running the transaction again", type(exc.orig).__name__)
        answers, start = [], 0
        for waiting in group:
            part = enqueued[start : start + len(waiting.candidates)]
            start += len(waiting.candidates)
            answers.append([Submitted(rows[e.owned_id], e.created) for e in part])
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

"""How a job's attempt ended (:class:`Outcome`), and whether a failed one is tried again
(:class:`RetryPolicy`).

The runner turns each attempt into exactly one outcome and records it in the store:

============================  ==================================================================
outcome                       what the store is told
============================  ==================================================================
``DONE``                      ``jobs.complete``: the report is stored, the job is done
``RELEASED``                  ``jobs.release``: queued again, the attempt not counted
``LOST``                      nothing: the job is no longer this worker's
``ERROR``, ``TIMEOUT``,       ``jobs.fail(retry=RetryPolicy.retries(...))``: queued again while
``CRASHED``                   attempts remain, else failed
``DETERMINISTIC_ERROR``       ``jobs.fail(retry=False)``: failed at once
============================  ==================================================================

Nothing here touches the database, the engine or the clock: the policy is a pure function
of its inputs, tested by a table (tests/worker/jobs/test_outcome.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["FAILURES", "Outcome", "RetryPolicy"]


class Outcome(StrEnum):
    """How one attempt at a job ended (the values are what the logs and older code called them)."""

    #: The engine finished and returned its report; the job is completed (unless the lease
    #: was lost meanwhile, when the store drops the result).
    DONE = "done"
    #: The engine raised an error that a retry may fix (anything but the deterministic
    #: errors below); the job fails, and is retried.
    ERROR = "error"
    #: The engine raised an error that no retry can fix (``ValueError``, ``TypeError``,
    #: ``KeyError``: a spec or options the engine rejects; running out of memory, CUDA's too,
    #: which comes back the same on the same device), or the data batch the job names
    #: is not in the database; the job fails at once, whatever attempts remain.
    DETERMINISTIC_ERROR = "deterministic_error"
    #: The engine ran past the job timeout (setting ``PREFLIGHT_JOB_TIMEOUT_SECONDS``) and
    #: its process was ended; the job fails, and is retried.
    TIMEOUT = "timeout"
    #: The engine process died while working on the job (a segfault, a killed child, a
    #: poisoned CUDA context); the job fails, and is retried.
    CRASHED = "crashed"
    #: The worker is shutting down (past the grace period, or told twice) and gave the job
    #: back untouched: queued again, the attempt not counted. Not a failure.
    RELEASED = "released"
    #: A heartbeat found the lease no longer ours: the job was cancelled, or its lease
    #: expired and another worker took it (the runner cannot tell which). The engine is
    #: stopped and nothing is written. Not a failure.
    LOST = "lost"

    @property
    def is_failure(self) -> bool:
        """Whether this outcome is recorded as a failed attempt (``jobs.fail``)."""
        return self in FAILURES


#: The outcomes recorded as a failed attempt; each is retried or not by a :class:`RetryPolicy`.
FAILURES = frozenset({Outcome.ERROR, Outcome.DETERMINISTIC_ERROR, Outcome.TIMEOUT, Outcome.CRASHED})


@dataclass(frozen=True)
class RetryPolicy:
    """Whether a failed attempt is tried again.

    A failure whose outcome is in ``retried`` is queued again while attempts remain (the
    attempt just made, counted from 1 by the claim, is below the job's ``max_attempts``);
    any other failure, or one on the last attempt, fails the job. The default reproduces the
    queue's rules: engine errors a retry may fix and crashes are retried, a timeout once at most;
    a deterministic error (an out-of-memory included) is not.
    """

    #: The failure outcomes that may be retried.
    retried: frozenset[Outcome] = frozenset({Outcome.ERROR, Outcome.TIMEOUT, Outcome.CRASHED})
    #: A timeout is retried only before this attempt: once at most by default, since a job that
    #: ran out of time once will most likely again, and each try holds a worker for the whole timeout.
    timeout_attempts: int = 2

    def __post_init__(self) -> None:
        if not self.retried <= FAILURES:
            raise ValueError(f"only failures are retried, not {sorted(o.value for o in self.retried - FAILURES)}")

    def retries(self, outcome: Outcome, attempt: int, max_attempts: int) -> bool:
        """Whether the job is queued again after failing its ``attempt`` (1, 2, ...) with
        ``outcome``. Raises ValueError for an outcome that is not a failure (DONE, RELEASED,
        LOST): those are never recorded as a failed attempt."""
        if not outcome.is_failure:
            raise ValueError(f"{outcome.value!r} is not a failure; only failed attempts are retried")
        limit = min(max_attempts, self.timeout_attempts) if outcome is Outcome.TIMEOUT else max_attempts
        return outcome in self.retried and attempt < limit

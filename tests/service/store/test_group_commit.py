"""The group commit of submissions (service.store.group_commit) on SQLite and PostgreSQL: concurrent
requests share transactions, yet each gets the answer it would get alone, and one bad
request fails alone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import func, select

from nas import parse_spec, spec_hash
from service.store import jobs
from service.store.db import session_scope
from service.store.group_commit import GroupCommitter
from service.store.models import Candidate, Submission


def new(width: int, *, study: str = "s", trial: int | None = None) -> jobs.NewCandidate:
    parsed = parse_spec({"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": width}]}]})
    return jobs.NewCandidate(
        spec=parsed.model_dump(mode="json", exclude_none=True),
        spec_hash=spec_hash(parsed),
        options={"steps": 1},
        study=study,
        trial=trial,
    )


async def _submit_all(committer: GroupCommitter, requests: list[list[jobs.NewCandidate]]) -> list[Any]:
    try:
        return await asyncio.gather(*(committer.submit(r) for r in requests), return_exceptions=True)
    finally:
        await committer.aclose()


def test_concurrent_requests_share_commits_and_each_gets_its_own_rows(sessions: Any) -> None:
    committer = GroupCommitter(sessions, max_attempts=3)
    requests = [[new(10 + i, trial=i)] for i in range(40)]
    answers = asyncio.run(_submit_all(committer, requests))

    assert committer.requests == 40
    assert committer.commits < 40, "40 requests arriving together must not take 40 transactions"
    for i, answer in enumerate(answers):
        (submitted,) = answer
        assert submitted.created
        assert submitted.row.trial == i and submitted.row.spec["blocks"][0]["layers"][0]["out"] == 10 + i
    assert len({a[0].row.id for a in answers}) == 40
    with session_scope(sessions) as session:
        assert session.scalar(select(func.count()).select_from(Candidate)) == 40
        assert session.scalar(select(func.count()).select_from(Submission)) == 40


def test_the_same_spec_in_two_requests_of_one_commit_is_created_once(sessions: Any) -> None:
    committer = GroupCommitter(sessions, max_attempts=3)
    answers = asyncio.run(_submit_all(committer, [[new(7, trial=0)], [new(7, trial=1)], [new(8), new(7)]]))

    first, second, batch = answers
    assert first[0].created and not second[0].created  # in order, as if sent one after the other
    assert first[0].row.id == second[0].row.id == batch[1].row.id
    assert batch[0].created and not batch[1].created
    with session_scope(sessions) as session:
        assert session.scalar(select(func.count()).select_from(Candidate)) == 2
        assert session.scalar(select(func.count()).select_from(Submission)) == 4


def test_a_request_that_breaks_the_transaction_fails_alone(sessions: Any) -> None:
    committer = GroupCommitter(sessions, max_attempts=3)
    broken = jobs.NewCandidate(spec={"not json": object()}, spec_hash="x" * 64, options={})  # type: ignore[dict-item]
    answers = asyncio.run(_submit_all(committer, [[new(1)], [broken], [new(2)], [new(3)]]))

    assert isinstance(answers[1], Exception)
    assert [a[0].created for i, a in enumerate(answers) if i != 1] == [True, True, True]
    with session_scope(sessions) as session:
        assert session.scalar(select(func.count()).select_from(Candidate)) == 3


def test_a_database_outage_fails_every_request_of_the_commit(tmp_path: Any) -> None:
    from sqlalchemy.exc import OperationalError

    from service.store.db import make_engine, make_sessionmaker

    engine = make_engine(f"sqlite:///{tmp_path / 'never-migrated.db'}")  # no tables: every write fails
    committer = GroupCommitter(make_sessionmaker(engine), max_attempts=3)
    answers = asyncio.run(_submit_all(committer, [[new(1)], [new(2)]]))
    engine.dispose()
    assert all(isinstance(a, OperationalError) for a in answers)


@pytest.mark.parametrize("size", [1, 3])
def test_a_lone_request_is_committed_at_once(sessions: Any, size: int) -> None:
    """No timer: one request alone is one transaction, answered when it commits."""
    committer = GroupCommitter(sessions, max_attempts=3)
    (answer,) = asyncio.run(_submit_all(committer, [[new(100 + i) for i in range(size)]]))
    assert committer.commits == 1 and [s.created for s in answer] == [True] * size


def test_a_value_the_database_refuses_fails_only_its_own_request(sessions: Any) -> None:
    """A trial number beyond 64 bits passes the Python side and is refused by the database."""
    committer = GroupCommitter(sessions, max_attempts=3)
    answers = asyncio.run(_submit_all(committer, [[new(1)], [new(2, trial=2**70)], [new(3)]]))

    assert isinstance(answers[1], Exception)
    assert [a[0].created for i, a in enumerate(answers) if i != 1] == [True, True]
    with session_scope(sessions) as session:
        assert session.scalar(select(func.count()).select_from(Candidate)) == 2
        assert session.scalar(select(func.count()).select_from(Submission)) == 2


def test_closing_commits_what_waits_and_refuses_later_submissions(sessions: Any) -> None:
    async def scenario() -> tuple[list[Any], Exception | None]:
        committer = GroupCommitter(sessions, max_attempts=3)
        pending = [asyncio.ensure_future(committer.submit([new(50 + i)])) for i in range(5)]
        await asyncio.sleep(0)  # every request is waiting before the close begins
        await committer.aclose()
        answers = [await p for p in pending]
        try:
            await committer.submit([new(99)])
        except RuntimeError as exc:
            return answers, exc
        return answers, None

    answers, refused = asyncio.run(scenario())
    assert [a[0].created for a in answers] == [True] * 5
    assert refused is not None and "shutting down" in str(refused)

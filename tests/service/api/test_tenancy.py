"""Tenancy through real HTTP, on SQLite and PostgreSQL: every candidate, batch and study is the
token's that created it; another token gets 404 for it (as for an id that never existed) and
never lists it; owners that submit the same network share the job and its report, each with its
own submission, id and cancel; an admin token sees everything; a token's priority is capped."""

from __future__ import annotations

import concurrent.futures
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import httpx
import pytest
from sqlalchemy import func, select

from nas.report import ConditioningReport
from service.settings import Settings
from service.store import jobs
from service.store.db import make_engine, make_sessionmaker, session_scope
from service.store.models import ApiToken, Candidate, DataBatch
from service.store.tokens import create_token
from service.testing import live_server, queue_candidates

PROBLEM = "application/problem+json"
X = [[float(i + j) / 10 for j in range(4)] for i in range(8)]
Y = [i % 3 for i in range(8)]


def spec(width: int = 8) -> dict[str, Any]:
    return {"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": width}, {"type": "relu"}]}]}


@dataclass
class Tenants:
    """One live server requiring tokens (a tenant holds at most 5 queued or running submissions
    and 2 data batches), and a client for each of tokens A, B and an admin."""

    url: str
    a: httpx.Client
    b: httpx.Client
    admin: httpx.Client
    store: Any  # the sessionmaker of the server's database

    def jobs(self) -> list[Any]:
        with session_scope(self.store) as session:
            return list(session.execute(select(Candidate.id, Candidate.status, Candidate.priority)))

    def finish_one(self, report: ConditioningReport) -> int | None:
        """Finish the most urgent job as a worker would (claim, then complete)."""
        with session_scope(self.store, write=True) as session:
            job = jobs.claim(session, worker="test", device_kind="cpu", lease_seconds=30)
        if job is None:
            return None
        with session_scope(self.store, write=True) as session:
            jobs.complete(session, job_id=job.id, token=job.lease_token, report=report)
        return job.id


@pytest.fixture
def tenants(db_url: str, make_settings: Callable[..., Settings]) -> Iterator[Tenants]:
    engine = make_engine(db_url)
    sessions = make_sessionmaker(engine)
    with session_scope(sessions, write=True) as session:
        tokens = {
            "a": create_token(session, name="a").token,
            "b": create_token(session, name="b").token,
            "admin": create_token(session, name="ops", admin=True).token,
        }
    settings = make_settings(
        db_url, require_auth=True, max_token_priority=5, max_queued_per_owner=5, max_batches_per_owner=2
    )
    with live_server(settings) as url:
        clients = {
            who: httpx.Client(base_url=url, timeout=30, headers={"authorization": f"Bearer {token}"})
            for who, token in tokens.items()
        }
        try:
            yield Tenants(url=url, store=sessions, **clients)
        finally:
            for client in clients.values():
                client.close()
    engine.dispose()


def assert_not_found(response: httpx.Response) -> None:
    assert response.status_code == 404, (response.status_code, response.text)
    assert response.headers["content-type"].startswith(PROBLEM) and response.json()["status"] == 404


def submit(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/candidates", json=body)
    assert response.status_code == 202, response.text
    result: dict[str, Any] = response.json()
    return result


def test_another_tokens_candidate_batch_and_study_are_404_as_if_they_never_existed(tenants: Tenants) -> None:
    mine = submit(tenants.a, {"spec": spec(), "options": {"study": "a-study"}})
    batch = tenants.a.post("/v1/batches", json={"x": X, "y": Y}).json()
    never = "0" * 32
    for path in (f"/v1/candidates/{mine['id']}", f"/v1/candidates/{mine['id']}/wait?timeout=0"):
        assert_not_found(tenants.b.get(path))
        assert tenants.a.get(path).json()["id"] == mine["id"]
    theirs, nobodys = tenants.b.get(f"/v1/candidates/{mine['id']}"), tenants.b.get(f"/v1/candidates/{never}")
    assert theirs.json()["type"] == nobodys.json()["type"] and theirs.json()["title"] == nobodys.json()["title"]
    assert_not_found(tenants.b.delete(f"/v1/candidates/{mine['id']}"))
    assert_not_found(tenants.b.get(f"/v1/batches/{batch['id']}"))
    assert_not_found(tenants.b.get("/v1/studies/a-study/summary"))
    assert_not_found(tenants.b.get("/v1/studies/nobody/summary"))  # the same answer: nothing told apart
    refused = tenants.b.post("/v1/candidates", json={"spec": spec(3), "options": {"data": batch["id"]}})
    assert refused.status_code == 422 and refused.json()["errors"][0]["path"] == "options.data"
    # A's own are untouched and readable
    assert tenants.a.get(f"/v1/batches/{batch['id']}").json() == batch
    assert tenants.a.get("/v1/studies/a-study/summary").json()["total"] == 1
    assert tenants.a.get(f"/v1/candidates/{mine['id']}").json()["status"] == "queued"


def test_a_tokens_list_and_study_summaries_show_only_its_own_submissions(
    tenants: Tenants, sample_report: ConditioningReport
) -> None:
    a_ids = [submit(tenants.a, {"spec": spec(w), "options": {"study": "s"}})["id"] for w in (1, 2)]
    (b_id,) = [submit(tenants.b, {"spec": spec(w), "options": {"study": "s"}})["id"] for w in (3,)]
    assert [c["id"] for c in tenants.a.get("/v1/candidates").json()["candidates"]] == a_ids
    assert [c["id"] for c in tenants.b.get("/v1/candidates").json()["candidates"]] == [b_id]
    assert [c["id"] for c in tenants.b.get("/v1/candidates", params={"study": "s"}).json()["candidates"]] == [b_id]
    page = tenants.a.get("/v1/candidates", params={"limit": 1}).json()
    rest = tenants.a.get("/v1/candidates", params={"cursor": page["next_cursor"]}).json()["candidates"]
    assert [c["id"] for c in page["candidates"] + rest] == a_ids  # a cursor pages the caller's own list
    # the cursor was the store's row id, which told A how many candidates others had submitted
    assert page["next_cursor"] == a_ids[0]  # the last id listed: nothing A has not seen
    foreign = tenants.b.get("/v1/candidates", params={"cursor": page["next_cursor"]})  # another's: no cursor
    assert foreign.status_code == 422 and foreign.json()["errors"][0]["path"] == "query.cursor", foreign.text
    assert tenants.finish_one(sample_report) is not None  # A's first, the oldest job
    # one study name, two owners: two studies
    assert tenants.a.get("/v1/studies/s/summary").json()["total"] == 2
    assert tenants.a.get("/v1/studies/s/summary").json()["counts"]["done"] == 1
    b_summary = tenants.b.get("/v1/studies/s/summary").json()
    assert b_summary["total"] == 1 and b_summary["counts"]["queued"] == 1 and b_summary["scores"]["count"] == 0
    assert tenants.b.get("/v1/candidates", params={"status": "done"}).json()["candidates"] == []


def test_ids_are_opaque_random_and_not_enumerable(tenants: Tenants) -> None:
    batch = submit(tenants.a, {"specs": [spec(w) for w in range(1, 6)]})["candidates"]
    ids = [c["id"] for c in batch]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids) and len(set(ids)) == 5  # 128 random bits each
    neighbour = ids[0][:-1] + format((int(ids[0][-1], 16) + 1) % 16, "x")
    assert_not_found(tenants.a.get(f"/v1/candidates/{neighbour}"))  # nothing to walk from one id to the next
    job_ids = [row.id for row in tenants.jobs()]
    for internal in job_ids:  # the store's sequential ids are no ids of the API, for anyone
        assert_not_found(tenants.a.get(f"/v1/candidates/{internal}"))
        assert_not_found(tenants.admin.get(f"/v1/candidates/{internal}"))


def test_the_same_spec_from_two_tokens_is_tuned_once_and_each_owner_gets_its_own_submission(
    tenants: Tenants, sample_report: ConditioningReport
) -> None:
    first = submit(tenants.a, {"spec": spec(), "options": {"study": "a-s", "trial": 1, "priority": 2}})
    second = submit(tenants.b, {"spec": spec(), "options": {"study": "b-s", "trial": 7}})
    assert first["id"] != second["id"] and first["cached"] is False and second["cached"] is True
    assert (second["study"], second["trial"], second["priority"]) == ("b-s", 7, 0)  # nothing of A's shows
    assert len(tenants.jobs()) == 1  # one job for both
    assert submit(tenants.b, {"spec": spec(), "options": {"study": "b-s"}})["id"] == second["id"]  # B's again
    assert tenants.finish_one(sample_report) is not None
    a_done = tenants.a.get(f"/v1/candidates/{first['id']}").json()
    b_done = tenants.b.get(f"/v1/candidates/{second['id']}").json()
    assert a_done["status"] == b_done["status"] == "done"
    assert a_done["report"] == b_done["report"] and b_done["report"]["scales"] == sample_report.scales
    assert (a_done["study"], b_done["study"]) == ("a-s", "b-s")
    assert tenants.b.get("/v1/studies/b-s/summary").json()["counts"]["done"] == 1
    assert_not_found(tenants.a.get("/v1/studies/b-s/summary"))


def test_a_tenant_sees_a_shared_job_from_its_own_submission_on_and_not_the_worker_that_ran_it(
    tenants: Tenants, sample_report: ConditioningReport
) -> None:
    """B's cache hit showed when A queued, started and finished the network (what A searched, and
    when) and the worker's host and pid; now B's times start at its own submission, and only an
    admin sees the job's own."""
    first = submit(tenants.a, {"spec": spec()})
    assert tenants.finish_one(sample_report) is not None
    a_done = tenants.a.get(f"/v1/candidates/{first['id']}").json()
    time.sleep(0.01)  # B submits strictly later than A's job finished, on any clock's resolution
    second = submit(tenants.b, {"spec": spec()})
    assert second["cached"] is True and second["status"] == "done"
    views = [
        second,
        tenants.b.get(f"/v1/candidates/{second['id']}").json(),
        tenants.b.get(f"/v1/candidates/{second['id']}/wait", params={"timeout": 0}).json(),
        tenants.b.get("/v1/candidates").json()["candidates"][0],
    ]
    for b_view in views:
        times = b_view["timings"]
        assert b_view["worker"] is None and b_view["score"] == a_done["score"]
        assert times["created_at"] > a_done["timings"]["finished_at"]
        assert times["started_at"] == times["finished_at"] == times["created_at"]
        assert times["queued_seconds"] == times["run_seconds"] == 0.0
        assert times["tuning_seconds"] == a_done["timings"]["tuning_seconds"]  # the engine's measure: no when
    assert a_done["worker"] is None  # a tenant's own job: the host and pid are the operator's still
    ops = tenants.admin.get(f"/v1/candidates/{second['id']}").json()
    assert ops["worker"] == "test" and ops["timings"] == a_done["timings"]  # an admin sees the job's own,
    assert ops["timings"]["created_at"] < times["created_at"]  # which A, who queued it, saw too


def test_a_tenant_that_cancelled_before_the_shared_job_started_does_not_see_when_it_started(
    tenants: Tenants, sample_report: ConditioningReport
) -> None:
    """B's cancelled view showed the start A's job had after B's cancel: a time of A's, and a start
    after its own end."""
    submit(tenants.a, {"spec": spec()})
    b = submit(tenants.b, {"spec": spec()})
    assert tenants.b.delete(f"/v1/candidates/{b['id']}").status_code == 200
    time.sleep(0.01)  # the job starts strictly after B's cancel, on any clock's resolution
    assert tenants.finish_one(sample_report) is not None  # it ran for A
    times = tenants.b.get(f"/v1/candidates/{b['id']}").json()["timings"]
    assert times["started_at"] is None and times["finished_at"] >= times["created_at"]


def test_a_tenant_holds_at_most_its_quota_of_unfinished_submissions_and_is_told_when_to_come_back(
    tenants: Tenants, sample_report: ConditioningReport
) -> None:
    """A token queued without bound: 100,000 jobs held every worker for days. Past
    PREFLIGHT_MAX_QUEUED_PER_OWNER (5 here) a submission is a 429 that stores nothing; what it
    cancels or what finishes frees its place; another token and an admin are not held back."""
    held = submit(tenants.a, {"specs": [spec(w) for w in range(1, 5)]})["candidates"]
    over = tenants.a.post("/v1/candidates", json={"specs": [spec(w) for w in range(5, 7)]})
    assert over.status_code == 429 and over.headers["retry-after"] == "10", over.text
    assert (
        over.headers["content-type"].startswith(PROBLEM) and "PREFLIGHT_MAX_QUEUED_PER_OWNER" in over.json()["detail"]
    )
    assert len(tenants.jobs()) == 4  # nothing of the refused batch was stored
    submit(tenants.a, {"spec": spec(5)})  # the fifth fits
    assert tenants.a.post("/v1/candidates", json={"spec": spec(6)}).status_code == 429
    assert tenants.a.delete(f"/v1/candidates/{held[0]['id']}").status_code == 200
    submit(tenants.a, {"spec": spec(6)})  # a cancelled submission holds no place
    finished = tenants.finish_one(sample_report)  # one of A's finishes
    assert finished is not None
    submit(tenants.a, {"spec": spec(7)})
    assert tenants.a.post("/v1/candidates", json={"spec": spec(8)}).status_code == 429  # full again
    # at its quota a token still reads what adds no work: a spec it holds, a finished result
    assert submit(tenants.a, {"spec": spec(7)})["status"] == "queued"
    assert submit(tenants.a, {"spec": spec(2)})["status"] == "done"  # spec(2) finished above
    submit(tenants.b, {"specs": [spec(w) for w in range(11, 16)]})  # B has a quota of its own
    never = tenants.b.post("/v1/candidates", json={"specs": [spec(w) for w in range(31, 37)]})
    assert never.status_code == 413 and "submit fewer at a time" in never.json()["detail"]  # 6 > 5 at any time
    submit(tenants.admin, {"specs": [spec(w) for w in range(21, 28)]})  # an admin has none


def test_a_gates_condition_waits_out_a_full_quota_and_goes_through_once_a_place_frees(
    tenants: Tenants, sample_report: ConditioningReport
) -> None:
    """What docs/service.md promises of the quota's 429: ``condition`` rides it out until its timeout,
    so a search waits for its own work to drain instead of failing its trial."""
    from nas.client import PreflightClient, RetryPolicy

    held = submit(tenants.a, {"specs": [spec(w) for w in range(1, 6)]})["candidates"]
    assert tenants.a.post("/v1/candidates", json={"spec": spec(99)}).status_code == 429

    def drain() -> None:
        time.sleep(0.5)  # the client has met the 429 by now (and it would only wait longer otherwise)
        assert tenants.a.delete(f"/v1/candidates/{held[0]['id']}").status_code == 200
        while tenants.finish_one(sample_report) is not None or len(tenants.jobs()) < 6:
            time.sleep(0.05)

    token = tenants.a.headers["authorization"].removeprefix("Bearer ")
    quick = RetryPolicy(attempts=2, backoff=0.05, max_backoff=0.2)  # Retry-After (10 s) capped at 0.2 s
    with (
        concurrent.futures.ThreadPoolExecutor(1) as pool,
        PreflightClient(tenants.url, token=token, retry=quick, timeout=30) as client,
    ):
        drained = pool.submit(drain)
        candidate = client.condition(spec(99), timeout=120)
        drained.result(timeout=120)
    assert candidate.status == "done" and len(tenants.jobs()) == 6


def test_each_owner_cancels_only_its_own_submission_and_the_job_stops_when_nobody_wants_it(
    tenants: Tenants, sample_report: ConditioningReport
) -> None:
    a = submit(tenants.a, {"spec": spec()})
    b = submit(tenants.b, {"spec": spec()})
    cancelled = tenants.b.delete(f"/v1/candidates/{b['id']}")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert tenants.b.delete(f"/v1/candidates/{b['id']}").json()["status"] == "cancelled"  # idempotent
    assert tenants.a.get(f"/v1/candidates/{a['id']}").json()["status"] == "queued"
    assert [row.status for row in tenants.jobs()] == ["queued"]  # A still wants it
    tenants.a.delete(f"/v1/candidates/{a['id']}")
    assert [row.status for row in tenants.jobs()] == ["cancelled"]  # now nobody does
    again = submit(tenants.b, {"spec": spec()})  # B changes its mind: its own submission, queued again
    assert again["id"] == b["id"] and again["status"] == "queued"
    assert tenants.a.get(f"/v1/candidates/{a['id']}").json()["status"] == "cancelled"
    assert tenants.finish_one(sample_report) is not None  # the job ran for B only
    a_view = tenants.a.get(f"/v1/candidates/{a['id']}").json()
    assert a_view["status"] == "cancelled" and a_view["report"] is None and a_view["score"] is None
    assert tenants.b.get(f"/v1/candidates/{b['id']}").json()["status"] == "done"
    problem = tenants.b.delete(f"/v1/candidates/{b['id']}")
    assert problem.status_code == 409 and problem.headers["content-type"].startswith(PROBLEM)


def test_a_running_job_runs_on_for_the_owner_that_still_wants_it(
    tenants: Tenants, sample_report: ConditioningReport
) -> None:
    a = submit(tenants.a, {"spec": spec()})
    b = submit(tenants.b, {"spec": spec()})
    with session_scope(tenants.store, write=True) as session:
        job = jobs.claim(session, worker="test", device_kind="cpu", lease_seconds=30)
    assert job is not None
    assert tenants.a.delete(f"/v1/candidates/{a['id']}").json()["status"] == "cancelled"
    with session_scope(tenants.store, write=True) as session:  # the worker's lease still holds
        assert jobs.heartbeat(session, job_id=job.id, token=job.lease_token, lease_seconds=30)
        assert jobs.complete(session, job_id=job.id, token=job.lease_token, report=sample_report)
    assert tenants.b.get(f"/v1/candidates/{b['id']}").json()["status"] == "done"
    assert tenants.a.get(f"/v1/candidates/{a['id']}").json()["status"] == "cancelled"


def test_a_token_past_its_quota_is_told_it_holds_at_least_the_quota_not_exactly_it(
    tenants: Tenants, db_url: str
) -> None:
    """Concurrent submissions of one token can pass the quota (docs/service.md), and the count stops
    at the quota: the 429 said "holds 5" of a token that held 7."""
    with session_scope(tenants.store) as session:
        owner = session.scalars(select(ApiToken.id).where(ApiToken.name == "a")).one()
    queue_candidates(db_url, [spec(w) for w in range(40, 47)], {}, owner_id=owner)
    over = tenants.a.post("/v1/candidates", json={"spec": spec(1)})
    assert over.status_code == 429 and "holds at least 5 queued or running" in over.json()["detail"], over.text


def test_the_same_batch_uploaded_by_two_tokens_is_stored_once_and_each_owns_it(tenants: Tenants) -> None:
    first = tenants.a.post("/v1/batches", json={"x": X, "y": Y})
    second = tenants.b.post("/v1/batches", json={"x": X, "y": Y})
    assert first.status_code == second.status_code == 201  # new to each: B is not told A has it
    assert first.json() == second.json()
    assert tenants.b.post("/v1/batches", json={"x": X, "y": Y}).status_code == 200
    assert tenants.b.get(f"/v1/batches/{first.json()['id']}").json() == first.json()
    assert submit(tenants.b, {"spec": spec(3), "options": {"data": first.json()["id"]}})["status"] == "queued"


def test_a_token_stores_at_most_its_quota_of_data_batches_and_is_not_told_what_others_stored(
    tenants: Tenants,
) -> None:
    """PREFLIGHT_MAX_BATCHES_PER_OWNER (2 here): a third batch new to the token is a 409 naming
    the setting, and stores nothing; content another token stored is as new to it as content
    nobody did (the same answer); a batch it holds uploads again (200); an admin is not held."""

    def upload(client: httpx.Client, shift: float) -> httpx.Response:
        return client.post("/v1/batches", json={"x": [[v + shift for v in row] for row in X], "y": Y})

    kept = [upload(tenants.a, shift) for shift in (0.0, 1.0)]
    assert [r.status_code for r in kept] == [201, 201]
    theirs = upload(tenants.b, 2.0)
    assert theirs.status_code == 201
    over, nobodys = upload(tenants.a, 2.0), upload(tenants.a, 3.0)
    assert over.status_code == nobodys.status_code == 409, over.text
    assert (
        over.headers["content-type"].startswith(PROBLEM) and "PREFLIGHT_MAX_BATCHES_PER_OWNER" in over.json()["detail"]
    )
    assert over.json() == {**nobodys.json(), "instance": over.json().get("instance")}
    assert_not_found(tenants.a.get(f"/v1/batches/{theirs.json()['id']}"))  # B's batch did not become A's
    assert upload(tenants.a, 0.0).status_code == 200
    assert [upload(tenants.admin, shift).status_code for shift in (4.0, 5.0, 6.0)] == [201, 201, 201]
    with session_scope(tenants.store) as session:
        stored = session.scalar(select(func.count()).select_from(DataBatch))
    assert stored == 6  # A's two, B's, the admin's three: nothing of the refused uploads


def _stored_batches(tenants: Tenants) -> int:
    with session_scope(tenants.store) as session:
        return session.scalar(select(func.count()).select_from(DataBatch)) or 0


def test_deleting_a_batch_frees_a_place_in_the_quota_and_the_content_goes_with_the_last_hold(
    tenants: Tenants,
) -> None:
    """A token at its quota of 2 lets one batch go (204) and uploads a new one; the content another
    token holds stays for it; the last hold takes the content with it; uploading it again is a 201."""

    def upload(client: httpx.Client, shift: float) -> dict[str, Any]:
        response = client.post("/v1/batches", json={"x": [[v + shift for v in row] for row in X], "y": Y})
        assert response.status_code in (200, 201), response.text
        return cast(dict[str, Any], response.json())

    shared, own = upload(tenants.a, 0.0), upload(tenants.a, 1.0)
    upload(tenants.b, 0.0)
    assert tenants.a.post("/v1/batches", json={"x": [[v + 2.0 for v in row] for row in X]}).status_code == 409
    assert tenants.a.delete(f"/v1/batches/{own['id']}").status_code == 204
    assert_not_found(tenants.a.get(f"/v1/batches/{own['id']}"))
    assert_not_found(tenants.a.delete(f"/v1/batches/{own['id']}"))  # gone: a second delete finds nothing
    assert _stored_batches(tenants) == 1  # A's own batch had no other holder
    upload(tenants.a, 2.0)  # the freed place
    assert tenants.a.delete(f"/v1/batches/{shared['id']}").status_code == 204
    assert_not_found(tenants.a.get(f"/v1/batches/{shared['id']}"))
    assert tenants.b.get(f"/v1/batches/{shared['id']}").json() == shared  # B's hold keeps it
    assert _stored_batches(tenants) == 2
    assert tenants.b.delete(f"/v1/batches/{shared['id']}").status_code == 204
    assert _stored_batches(tenants) == 1  # the last hold took the content
    again = tenants.b.post("/v1/batches", json={"x": X, "y": Y})
    assert again.status_code == 201 and again.json() == shared


def test_a_token_cannot_see_or_delete_another_tokens_batch_by_deleting_it(tenants: Tenants) -> None:
    """Deleting a batch only another token holds is the 404 of one never uploaded, and leaves it."""
    theirs = tenants.b.post("/v1/batches", json={"x": X}).json()
    refused = tenants.a.delete(f"/v1/batches/{theirs['id']}")
    nobodys = tenants.a.delete("/v1/batches/" + "e" * 64)
    assert_not_found(refused)
    assert refused.json()["detail"].replace(theirs["id"], "e" * 64) == nobodys.json()["detail"]
    assert tenants.b.get(f"/v1/batches/{theirs['id']}").json() == theirs
    assert_not_found(tenants.a.delete("/v1/batches/not%00hex"))


def test_a_batch_that_queued_jobs_name_is_not_deleted_until_they_finish_or_are_cancelled(
    tenants: Tenants, sample_report: ConditioningReport
) -> None:
    """Deleting would fail their jobs (the worker could not load the batch): a 409 that counts the
    caller's queued or running submissions naming it, and nothing deleted. Another token's job does
    not hold back this token's delete; a cancelled submission does not either."""
    batch = tenants.a.post("/v1/batches", json={"x": X, "y": Y}).json()["id"]
    tenants.b.post("/v1/batches", json={"x": X, "y": Y})
    mine = submit(tenants.a, {"spec": spec(4), "options": {"data": batch}})
    submit(tenants.a, {"spec": spec(5), "options": {"data": batch}})
    submit(tenants.b, {"spec": spec(6), "options": {"data": batch}})
    refused = tenants.a.delete(f"/v1/batches/{batch}")
    assert refused.status_code == 409 and refused.headers["content-type"].startswith(PROBLEM)
    assert "2 queued or running submissions of this token name data batch" in refused.json()["detail"]
    assert tenants.a.get(f"/v1/batches/{batch}").status_code == 200
    tenants.a.delete(f"/v1/candidates/{mine['id']}")
    with session_scope(tenants.store, write=True) as session:  # a worker takes spec(5)'s job: running
        job = jobs.claim(session, worker="test", device_kind="cpu", lease_seconds=30)
    assert job is not None and job.spec["blocks"][0]["layers"][0]["out"] == 5
    assert (
        "1 queued or running submission of this token names"
        in tenants.a.delete(f"/v1/batches/{batch}").json()["detail"]
    )
    with session_scope(tenants.store, write=True) as session:
        assert jobs.complete(session, job_id=job.id, token=job.lease_token, report=sample_report)
    assert tenants.a.delete(f"/v1/batches/{batch}").status_code == 204  # B's queued job is B's
    assert tenants.b.get(f"/v1/batches/{batch}").status_code == 200
    admin = tenants.admin.delete(f"/v1/batches/{batch}")  # nor does an admin delete under a queued job
    assert admin.status_code == 409 and "1 queued or running job names" in admin.json()["detail"]


def test_a_token_lists_the_batches_it_holds_page_by_page_and_an_admin_lists_all(tenants: Tenants) -> None:
    a = [tenants.a.post("/v1/batches", json={"x": [[v + s for v in row] for row in X]}).json() for s in (0.0, 1.0)]
    b = tenants.b.post("/v1/batches", json={"x": [[v + 9.0 for v in row] for row in X]}).json()
    first = tenants.a.get("/v1/batches", params={"limit": 1}).json()
    assert (
        first["batches"] == [min(a, key=lambda item: item["id"])] and first["next_cursor"] == first["batches"][0]["id"]
    )
    second = tenants.a.get("/v1/batches", params={"limit": 1, "cursor": first["next_cursor"]}).json()
    assert second == {"batches": [max(a, key=lambda item: item["id"])], "next_cursor": None}
    assert tenants.b.get("/v1/batches").json() == {"batches": [b], "next_cursor": None}
    listed = tenants.admin.get("/v1/batches").json()["batches"]
    assert [item["id"] for item in listed] == sorted(item["id"] for item in [*a, b])
    bad = tenants.a.get("/v1/batches", params={"cursor": "x y"})
    assert bad.status_code == 422 and bad.json()["errors"][0]["path"] == "query.cursor"
    assert tenants.a.get("/v1/batches", params={"limit": 0}).status_code == 422


def test_an_admin_deletes_a_batch_for_every_owner(tenants: Tenants) -> None:
    batch = tenants.a.post("/v1/batches", json={"x": X}).json()["id"]
    tenants.b.post("/v1/batches", json={"x": X})
    assert tenants.admin.delete(f"/v1/batches/{batch}").status_code == 204
    assert_not_found(tenants.a.get(f"/v1/batches/{batch}"))
    assert_not_found(tenants.b.get(f"/v1/batches/{batch}"))
    assert _stored_batches(tenants) == 0
    assert_not_found(tenants.admin.delete(f"/v1/batches/{batch}"))


def test_an_admin_token_sees_reads_and_cancels_every_owners_items(tenants: Tenants) -> None:
    a = submit(tenants.a, {"spec": spec(1), "options": {"study": "shared-name"}})
    b = submit(tenants.b, {"spec": spec(2), "options": {"study": "shared-name"}})
    batch = tenants.a.post("/v1/batches", json={"x": X}).json()
    listed = [c["id"] for c in tenants.admin.get("/v1/candidates").json()["candidates"]]
    assert listed == [a["id"], b["id"]]
    assert tenants.admin.get(f"/v1/candidates/{a['id']}").json()["id"] == a["id"]
    assert tenants.admin.get(f"/v1/batches/{batch['id']}").json() == batch
    assert tenants.admin.get("/v1/studies/shared-name/summary").json()["total"] == 2
    assert tenants.admin.delete(f"/v1/candidates/{b['id']}").json()["status"] == "cancelled"
    assert tenants.b.get(f"/v1/candidates/{b['id']}").json()["status"] == "cancelled"
    assert_not_found(tenants.admin.get("/v1/studies/nobody/summary"))


def test_a_tokens_priority_is_capped_and_an_admins_is_not(tenants: Tenants) -> None:
    high = submit(tenants.a, {"spec": spec(1), "options": {"priority": 1000}})
    low = submit(tenants.a, {"spec": spec(2), "options": {"priority": -7}})
    urgent = submit(tenants.admin, {"spec": spec(3), "options": {"priority": 1000}})
    assert (high["priority"], low["priority"], urgent["priority"]) == (5, -7, 1000)
    assert sorted(row.priority for row in tenants.jobs()) == [-7, 5, 1000]  # as queued, not just as shown
    with session_scope(tenants.store, write=True) as session:
        job = jobs.claim(session, worker="test", device_kind="cpu", lease_seconds=30)
    assert job is not None and job.spec["blocks"][0]["layers"][0]["out"] == 3  # the admin's runs first


def test_a_shared_job_runs_at_the_highest_priority_of_the_owners_that_still_want_it(tenants: Tenants) -> None:
    """The job kept the priority of whoever queued it first: a job the admin queued at 1000 and
    cancelled was queued again at 1000 for a tenant capped at 5, and one queued at -9 held back a
    tenant that asked for 4."""

    def priority(width: int) -> int:
        (row,) = [row for row in tenants.jobs() if row.id == job_ids[width]]
        return int(row.priority)

    urgent = submit(tenants.admin, {"spec": spec(8), "options": {"priority": 1000}})
    tenants.admin.delete(f"/v1/candidates/{urgent['id']}")
    job_ids = {8: tenants.jobs()[0].id}
    assert submit(tenants.a, {"spec": spec(8), "options": {"priority": 1000}})["priority"] == 5
    assert priority(8) == 5  # queued again at the cap, not at the admin's 1000

    low = submit(tenants.b, {"spec": spec(9), "options": {"priority": -9}})
    job_ids[9] = next(row.id for row in tenants.jobs() if row.id != job_ids[8])
    high = submit(tenants.a, {"spec": spec(9), "options": {"priority": 4}})
    assert priority(9) == 4  # B's low priority does not hold A's job back
    tenants.a.delete(f"/v1/candidates/{high['id']}")
    assert priority(9) == -9  # it runs on for B alone, at B's priority
    assert tenants.b.get(f"/v1/candidates/{low['id']}").json()["status"] == "queued"


def test_with_auth_off_everything_is_one_anonymous_owner_and_priority_is_not_capped(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    with (
        live_server(make_settings(sqlite_url, max_token_priority=5)) as url,
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        first = submit(client, {"spec": spec(), "options": {"priority": 900, "study": "s"}})
        assert first["priority"] == 900
        assert submit(client, {"spec": spec()})["id"] == first["id"]
        assert [c["id"] for c in client.get("/v1/candidates").json()["candidates"]] == [first["id"]]
        assert client.get("/v1/studies/unknown/summary").json()["total"] == 0  # as before tenancy
    engine = make_engine(sqlite_url)
    with session_scope(make_sessionmaker(engine)) as session:
        assert session.scalar(select(func.count()).select_from(Candidate)) == 1
    engine.dispose()


def test_token_create_admin_makes_a_token_that_sees_everything(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from service.cli import main
    from service.store.tokens import ActiveToken, active_token, hash_token

    monkeypatch.setenv("PREFLIGHT_DATABASE_URL", sqlite_url)
    assert main(["token", "create", "ops", "--admin"]) == 0
    admin = capsys.readouterr().out.strip()
    assert main(["token", "create", "optuna-box"]) == 0
    tenant = capsys.readouterr().out.strip()
    assert main(["token", "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert "\tops\t" in listed[0] and "\tadmin\t" in listed[0] and "\ttenant\t" in listed[1]
    engine = make_engine(sqlite_url)
    with session_scope(make_sessionmaker(engine)) as session:
        found = {token: active_token(session, digest=hash_token(token)) for token in (admin, tenant)}
    engine.dispose()
    assert found[admin] is not None and cast(ActiveToken, found[admin]).admin
    assert found[tenant] is not None and not cast(ActiveToken, found[tenant]).admin


def test_a_tokens_open_waits_are_capped_and_another_tokens_are_not_held_back(
    db_url: str, make_settings: Callable[..., Settings]
) -> None:
    """300 long-polls of one tenant, each polling the store through the shared thread pool,
    slowed every other tenant's reads 100-fold: a token holds at most max_waits_per_owner open."""
    engine = make_engine(db_url)
    try:
        with session_scope(make_sessionmaker(engine), write=True) as session:
            a, b = create_token(session, name="wait-a").token, create_token(session, name="wait-b").token
    finally:
        engine.dispose()
    with live_server(make_settings(db_url, require_auth=True, max_waits_per_owner=1)) as url:
        mine_client, theirs_client = (
            httpx.Client(base_url=url, headers={"authorization": f"Bearer {t}"}, timeout=90) for t in (a, b)
        )
        try:
            mine = mine_client.post("/v1/candidates", json={"spec": spec(3)}).json()["id"]
            theirs = theirs_client.post("/v1/candidates", json={"spec": spec(5)}).json()["id"]
            path = f"/v1/candidates/{mine}/wait"
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                held = pool.submit(mine_client.get, path, params={"timeout": 60})
                deadline = time.monotonic() + 120
                while (probe := mine_client.get(path, params={"timeout": 0})).status_code != 429:
                    assert probe.status_code == 200 and time.monotonic() < deadline, probe.text
                    if held.done():  # the probe was open first and the held wait was the one refused
                        assert held.result().status_code == 429
                        held = pool.submit(mine_client.get, path, params={"timeout": 60})
                    time.sleep(0.05)
                assert probe.headers["retry-after"] == "1" and probe.json()["type"].endswith("/too-many-requests")
                assert "PREFLIGHT_MAX_WAITS_PER_OWNER" in probe.json()["detail"]
                other = theirs_client.get(f"/v1/candidates/{theirs}/wait", params={"timeout": 0})
                assert other.status_code == 200  # another token's waits are its own
                assert mine_client.delete(f"/v1/candidates/{mine}").status_code == 200  # final: the wait answers
                assert held.result().json()["status"] == "cancelled"
            assert mine_client.get(path, params={"timeout": 0}).status_code == 200  # the slot is free again
        finally:
            mine_client.close()
            theirs_client.close()

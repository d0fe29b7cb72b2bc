"""The client against a real running service (uvicorn on a free port, SQLite, embedded worker)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from nas.client import AsyncPreflightClient, PreflightClient, RetryPolicy
from nas.errors import NotFoundError, PreflightConnectionError, SpecRejectedError
from nas.report import ConditioningReport
from nas.testing import FAST_OPTIONS as TINY_OPTIONS
from nas.testing import ill_conditioned_mlp, mlp, well_conditioned_mlp

ILL, WELL = ill_conditioned_mlp(), well_conditioned_mlp()


def test_submit_wait_and_fetch_a_report(client: PreflightClient) -> None:
    submitted = client.submit(WELL, TINY_OPTIONS | {"study": "client-live", "trial": 0})
    done = client.wait(submitted.id, timeout=300)
    assert done.status == "done" and done.id == submitted.id
    report = done.require_report()
    assert isinstance(report, ConditioningReport) and report.verdict in ("keep", "prune")
    assert report.scales and len(report.blocks) == 3 and report.layers
    assert client.get(submitted.id).report == report


def test_the_same_spec_and_options_return_the_same_candidate(client: PreflightClient) -> None:
    first = client.condition(WELL, TINY_OPTIONS, timeout=300)
    again = client.submit(WELL, TINY_OPTIONS)
    assert again.id == first.id and again.finished and again.cached is True
    assert again.timings is not None and again.timings.run_seconds is not None and again.timings.run_seconds >= 0
    assert again.error is None


def test_a_batch_is_submitted_in_one_request_and_answered_in_order(client: PreflightClient) -> None:
    specs = [WELL, mlp(3, "relu"), mlp(2, "tanh")]
    candidates = client.condition_many(specs, TINY_OPTIONS | {"study": "client-batch"}, timeout=300)
    assert [c.status for c in candidates] == ["done"] * 3
    hashes = [c.data["spec_hash"] for c in candidates]
    assert len(set(hashes)) == 3
    summary = client.study_summary("client-batch")
    assert summary["total"] == 3 and summary["scores"]["count"] == 3


def test_a_study_named_with_a_slash_or_dots_has_a_summary(client: PreflightClient) -> None:
    """Submissions took the names, but the summary was a 404: the router decoded %2F before
    matching, and httpx resolved a "." or ".." segment away (/v1/studies/../summary)."""
    for study in ("exp/1", "..", ".", "a/../b"):
        client.submit(WELL, TINY_OPTIONS | {"study": study, "device": "cuda"})  # queued: no worker takes it
        assert client.study_summary(study)["total"] == 1, study


def test_an_invalid_spec_is_a_spec_rejected_error_naming_the_path(client: PreflightClient) -> None:
    bad = {"input_shape": [64], "blocks": [{"layers": [{"type": "linear"}]}]}
    with pytest.raises(SpecRejectedError) as caught:
        client.submit(bad)
    assert caught.value.status == 422
    assert caught.value.detail is not None
    assert "blocks[0].layers[0]" in caught.value.detail
    assert caught.value.problem["title"]


def test_an_unknown_candidate_is_not_found(client: PreflightClient) -> None:
    with pytest.raises(NotFoundError) as caught:
        client.get("987654321")
    assert "987654321" in str(caught.value)


def test_the_async_client_does_the_same(live_service: Any) -> None:
    async def main() -> list[Any]:
        async with AsyncPreflightClient(live_service.url) as client:
            submitted = await client.submit_many([WELL, ILL], TINY_OPTIONS)
            return await asyncio.gather(*(client.wait(c.id, timeout=300) for c in submitted))

    well, ill = asyncio.run(main())
    assert well.status == ill.status == "done"
    assert well.verdict == "keep" and ill.verdict == "prune"


def test_a_service_that_is_not_there_is_a_connection_error_after_retries() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    retry = RetryPolicy(attempts=2, backoff=0.01, max_backoff=0.01)
    with PreflightClient(f"http://127.0.0.1:{port}", retry=retry) as client, pytest.raises(PreflightConnectionError):
        client.get("1")


def test_an_async_client_serves_a_second_loop_while_the_first_is_still_open(live_service: Any) -> None:
    """A second loop raised "bound to a different event loop" from httpx's pool, whose connection
    the first, still open, loop held."""
    client = AsyncPreflightClient(live_service.url)

    async def status_then_close() -> str:
        submitted = await client.submit(WELL, TINY_OPTIONS)
        status = (await client.get(submitted.id)).status
        await client.aclose()  # this loop's connections
        return status

    first = asyncio.new_event_loop()
    try:
        first.run_until_complete(client.submit(WELL, TINY_OPTIONS))  # a pooled connection of the open loop
        assert asyncio.run(status_then_close()) in ("queued", "running", "done")
    finally:
        first.run_until_complete(client.aclose())  # the first loop's, in that loop
        first.close()

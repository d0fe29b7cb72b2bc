"""Retry, backoff and decoding of the client, shared by the sync and async clients.

The transport here is httpx's own MockTransport, to make the network fail on cue; the
client against the real service is tests/nas/test_client_live.py.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from nas.client import AsyncPreflightClient, Candidate, PreflightClient, RetryPolicy
from nas.errors import (
    AuthenticationError,
    CandidateFailed,
    PreflightConnectionError,
    ServerError,
    SpecRejectedError,
    WaitTimeout,
)
from nas.testing import sample_report

FAST = RetryPolicy(attempts=3, backoff=0.0, max_backoff=0.0, jitter=0.0)
DONE = {"id": 7, "status": "done", "report": sample_report(score=1.5, scales={}).model_dump(mode="json")}


@pytest.mark.parametrize(
    ("policy", "attempt", "expected"),
    [
        (RetryPolicy(backoff=0.25, multiplier=2, max_backoff=8, jitter=0), 1, 0.25),
        (RetryPolicy(backoff=0.25, multiplier=2, max_backoff=8, jitter=0), 3, 1.0),
        (RetryPolicy(backoff=0.25, multiplier=2, max_backoff=8, jitter=0), 10, 8.0),
        (RetryPolicy(backoff=1.0, multiplier=1, max_backoff=1, jitter=0), 5, 1.0),
    ],
)
def test_backoff_grows_geometrically_up_to_its_cap(policy: RetryPolicy, attempt: int, expected: float) -> None:
    assert policy.delay(attempt) == pytest.approx(expected)


def test_jitter_spreads_the_delay_within_its_fraction_and_retry_after_wins() -> None:
    policy = RetryPolicy(backoff=1.0, max_backoff=10.0, jitter=0.5)
    delays = [policy.delay(1, random.Random(seed)) for seed in range(50)]
    assert all(0.5 <= d <= 1.5 for d in delays) and len(set(delays)) > 40
    assert RetryPolicy(jitter=0).delay(1, retry_after=3.0) == 3.0
    assert RetryPolicy(jitter=0, max_backoff=2.0).delay(1, retry_after=30.0) == 2.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"attempts": 0}, "attempts"),
        ({"attempts": 2.5}, "attempts must be an integer"),
        ({"backoff": -1.0}, "backoff"),
        ({"multiplier": 0.5}, "multiplier"),
        ({"backoff": 2.0, "max_backoff": 1.0}, "max_backoff"),
        ({"jitter": 2.0}, "jitter"),
    ],
)
def test_bad_retry_policies_are_refused_and_quoted(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"retry": {"attempts": 1}}, "retry must be a nas.client.RetryPolicy"), ({"url": 123}, "url must be")],
)
def test_a_client_argument_of_the_wrong_kind_is_refused_when_the_client_is_made(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        PreflightClient(**kwargs)


def test_a_list_given_as_one_spec_or_one_spec_given_as_a_list_is_refused_before_any_request() -> None:
    client = PreflightClient("http://127.0.0.1:1", retry=RetryPolicy(attempts=1))
    spec = {"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": 2}]}]}
    with pytest.raises(TypeError, match="submit_many"):
        client.submit([spec])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes a list of specs"):
        client.submit_many(spec)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("status", "retried"), [(500, True), (502, True), (503, True), (429, True), (404, False), (422, False)]
)
def test_5xx_and_429_are_retried_4xx_are_not(status: int, retried: bool) -> None:
    assert RetryPolicy().retries_status(status) is retried


# The same scenarios drive both clients.
Handler = Callable[[httpx.Request], httpx.Response]


def run_sync(handler: Handler, call: Callable[[Any], Any], **kwargs: Any) -> Any:
    with PreflightClient(
        "http://preflight.test", transport=httpx.MockTransport(handler), retry=FAST, **kwargs
    ) as client:
        return call(client)


def run_async(handler: Handler, call: Callable[[Any], Any], **kwargs: Any) -> Any:
    async def main() -> Any:
        async with AsyncPreflightClient(
            "http://preflight.test", transport=httpx.MockTransport(handler), retry=FAST, **kwargs
        ) as client:
            return await call(client)

    return asyncio.run(main())


RUNNERS = [pytest.param(run_sync, id="sync"), pytest.param(run_async, id="async")]


@pytest.mark.parametrize("run", RUNNERS)
def test_a_5xx_then_success_is_retried_transparently(run: Any) -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) < 3:
            return httpx.Response(503, json={"title": "Service Unavailable"})
        return httpx.Response(202, json={"id": 7, "status": "queued"})

    candidate = run(handler, lambda c: c.submit({"input_shape": [4]}, {"study": "s"}))
    assert candidate == Candidate(id="7", status="queued")
    assert len(calls) == 3
    assert json.loads(calls[0].content) == {"spec": {"input_shape": [4]}, "options": {"study": "s"}}


@pytest.mark.parametrize("run", RUNNERS)
def test_connection_errors_are_retried_then_raised_as_preflight_connection_error(run: Any) -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(PreflightConnectionError, match="after 3 tries"):
        run(handler, lambda c: c.get("1"))
    assert len(calls) == 3


@pytest.mark.parametrize("run", RUNNERS)
def test_a_persistent_5xx_ends_as_server_error_with_the_problem(run: Any) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            500,
            json={"title": "Internal Server Error", "detail": "boom"},
            headers={"content-type": "application/problem+json"},
        )

    with pytest.raises(ServerError) as caught:
        run(handler, lambda c: c.get("1"))
    assert caught.value.status == 500 and caught.value.detail == "boom"


@pytest.mark.parametrize("run", RUNNERS)
@pytest.mark.parametrize(("status", "kind"), [(422, SpecRejectedError), (401, AuthenticationError)])
def test_4xx_are_not_retried_and_raise_their_typed_error(run: Any, status: int, kind: type) -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(status, json={"title": "no", "detail": "blocks[0]: bad", "status": status})

    with pytest.raises(kind, match="blocks"):
        run(handler, lambda c: c.submit({}))
    assert len(calls) == 1


@pytest.mark.parametrize("run", RUNNERS)
def test_the_token_comes_from_the_environment(run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFLIGHT_API_TOKEN", "secret-token")
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(200, json=DONE)

    run(handler, lambda c: c.get("7"))
    assert seen == ["Bearer secret-token"]


@pytest.mark.parametrize("token", ["pf_\u00e9", "pf_abc\r\nx-injected: 1", "pf_ abc"])
def test_a_token_no_header_can_carry_is_refused_when_the_client_is_made(
    token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A non-ASCII token raised UnicodeEncodeError at the first request, and one with a line break
    was retried and reported as "is the service running?"."""
    with pytest.raises(ValueError, match="token holds a character no token has"):
        PreflightClient("http://unused.invalid", token=token)
    monkeypatch.setenv("PREFLIGHT_API_TOKEN", token)
    with pytest.raises(ValueError, match="PREFLIGHT_API_TOKEN holds a character"):
        PreflightClient("http://unused.invalid")


def test_a_token_with_spaces_or_a_newline_at_its_ends_is_sent_stripped_as_the_service_reads_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PREFLIGHT_API_TOKEN", "pf_abc\n")  # as an env file or $(cat token) may leave it
    assert PreflightClient("http://unused.invalid")._core.headers["authorization"] == "Bearer pf_abc"


def test_the_url_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFLIGHT_URL", "http://gpu-node:9000/")
    assert PreflightClient().url == "http://gpu-node:9000"


@pytest.mark.parametrize("run", RUNNERS)
def test_wait_long_polls_until_the_candidate_is_finished(run: Any) -> None:
    polls = []

    def handler(request: httpx.Request) -> httpx.Response:
        polls.append(float(request.url.params["timeout"]))
        assert request.url.path == "/v1/candidates/7/wait"
        return httpx.Response(200, json=DONE if len(polls) == 3 else {"id": 7, "status": "running"})

    candidate = run(handler, lambda c: c.wait("7", timeout=60), max_poll=5.0)
    assert candidate.score == 1.5 and candidate.verdict == "keep"
    assert polls == [5.0, 5.0, 5.0]


@pytest.mark.parametrize("run", RUNNERS)
def test_wait_raises_wait_timeout_with_the_last_state(run: Any) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"id": 7, "status": "queued"})

    with pytest.raises(WaitTimeout) as caught:
        run(handler, lambda c: c.wait("7", timeout=0.0))
    assert caught.value.candidate.status == "queued"


@pytest.mark.parametrize("run", RUNNERS)
def test_condition_many_submits_once_and_waits_only_for_the_unfinished(run: Any) -> None:
    requests = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append((request.method, request.url.path))
        if request.method == "POST":
            assert len(json.loads(request.content)["specs"]) == 2
            return httpx.Response(202, json={"candidates": [DONE, {"id": 8, "status": "queued"}]})
        return httpx.Response(200, json=DONE | {"id": 8})

    got = run(handler, lambda c: c.condition_many([{"a": 1}, {"b": 2}], timeout=10))
    assert [c.id for c in got] == ["7", "8"]
    assert requests == [("POST", "/v1/candidates"), ("GET", "/v1/candidates/8/wait")]


def test_a_failed_candidate_has_no_report_and_says_why() -> None:
    failed = Candidate.from_json({"id": 3, "status": "failed", "error": "non-finite output"})
    with pytest.raises(CandidateFailed, match="non-finite output"):
        failed.require_report()
    assert failed.finished and failed.score is None and failed.error == "non-finite output"
    assert failed.cached is None and failed.timings is None


def test_a_report_from_a_newer_service_is_read_without_the_keys_this_client_does_not_know() -> None:
    newer = json.loads(json.dumps(DONE))
    newer["report"]["added_later"] = {"figure": 1.0}
    newer["report"]["tuning"]["added_later_too"] = 2
    candidate = Candidate.from_json(newer)
    assert candidate.report is not None and candidate.score == 1.5
    assert "added_later" not in candidate.report.model_dump()
    assert candidate.data["report"]["added_later"] == {"figure": 1.0}  # still there, raw


def test_a_known_report_key_of_the_wrong_type_still_fails() -> None:
    broken = json.loads(json.dumps(DONE))
    broken["report"]["score"] = "high"
    with pytest.raises(ValueError, match="score"):
        Candidate.from_json(broken)


def test_a_batch_with_a_nan_or_a_study_name_that_is_no_string_is_refused_naming_it() -> None:
    client = PreflightClient("http://127.0.0.1:1", retry=RetryPolicy(attempts=1))
    with pytest.raises(ValueError, match=r"x\[1\]\[0\] is nan: a data batch holds finite numbers only"):
        client.upload_batch([[1.0, 2.0], [float("nan"), 3.0]], [0, 1])  # httpx: "not JSON compliant"
    with pytest.raises(TypeError, match="study is the study's name"):
        client.study_summary(5)  # type: ignore[arg-type]

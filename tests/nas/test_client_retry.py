"""Retry, backoff and decoding of the client, shared by the sync and async clients.

The transport here is httpx's own MockTransport, to make the network fail on cue; the
client against the real service is tests/nas/test_client_live.py.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
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


def test_numpy_numbers_are_sent_as_json_numbers_and_a_nan_is_refused_at_its_path() -> None:
    """A search space computed with NumPy gave np.int64, and a NaN in a spec or the options made
    httpx refuse the body ("not JSON serializable", "Out of range float values"), naming nothing."""
    import numpy as np

    sent = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(202, json={"id": "a", "status": "queued"})

    spec = {"input_shape": np.array([4]), "blocks": [{"layers": [{"type": "linear", "out": np.int64(3)}]}]}
    run_sync(handler, lambda c: c.submit(spec, {"seed": np.int64(3), "tolerance": np.float32(0.5)}))
    assert sent == [
        {
            "spec": {"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": 3}]}]},
            "options": {"seed": 3, "tolerance": 0.5},
        }
    ]
    bad = {"input_shape": [4], "blocks": [{"layers": [{"type": "scale", "factor": float("nan")}]}]}
    with pytest.raises(ValueError, match=r"^spec\.blocks\[0\]\.layers\[0\]\.factor is nan: JSON carries finite"):
        run_sync(handler, lambda c: c.submit(bad))
    with pytest.raises(ValueError, match=r"^specs\[1\]\.blocks\[0\]\.layers\[0\]\.factor is nan"):
        run_sync(handler, lambda c: c.submit_many([spec, bad]))
    with pytest.raises(ValueError, match=r"^options\.tolerance is inf"):
        run_sync(handler, lambda c: c.submit(spec, {"tolerance": float("inf")}))
    with pytest.raises(ValueError, match=r"^spec\.blocks\[0\]\.layers\[0\]\.factor is nan"):
        run_sync(handler, lambda c: c.submit(json.dumps(bad)))  # JSON text: Python's json reads NaN
    with pytest.raises(TypeError, match=r"^options has the key np.int64\(1\), which is no text"):
        run_sync(handler, lambda c: c.submit(spec, {np.int64(1): 2}))
    with pytest.raises(TypeError, match=r"^options\.seeds is a set, which JSON cannot carry"):
        run_sync(handler, lambda c: c.submit(spec, {"seeds": {1, 2}}))
    with pytest.raises(TypeError, match="options is a dict of tuning options"):
        run_sync(handler, lambda c: c.submit(spec, "abc"))
    assert len(sent) == 1  # nothing else was sent


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (
            {"status_code": 200, "text": "<html>a proxy's page</html>", "headers": {"content-type": "text/html"}},
            "text/html",
        ),
        ({"status_code": 200, "json": []}, "got a JSON list"),
        ({"status_code": 200, "json": {"hello": "world"}}, "keys ['hello']"),
        ({"status_code": 200}, "got nothing"),
        ({"status_code": 302, "headers": {"location": "https://preflight.test/v1"}}, "a redirect to https://"),
    ],
    ids=["web-page", "list", "other-object", "empty", "redirect"],
)
@pytest.mark.parametrize("run", RUNNERS)
def test_an_answer_that_is_not_the_apis_says_so(run: Any, answer: dict[str, Any], words: str) -> None:
    """JSONDecodeError, AttributeError or KeyError escaped; a 302 read "HTTP 302: ... (HTTP 4xx)"."""
    from nas.errors import UnexpectedResponseError

    with pytest.raises(UnexpectedResponseError, match=re.escape(words)):
        run(lambda request: httpx.Response(**answer), lambda c: c.submit({"input_shape": [4]}))


@pytest.mark.parametrize("run", RUNNERS)
def test_a_retry_after_that_is_no_number_or_date_is_retried_with_the_backoff(run: Any) -> None:
    """Python 3.10+'s parsedate_to_datetime raises on "soon": a ValueError, and no retry."""
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) == 1:
            return httpx.Response(503, headers={"retry-after": "soon"}, json={"status": 503})
        return httpx.Response(202, json={"id": "a", "status": "queued"})

    assert run(handler, lambda c: c.submit({"input_shape": [4]})).status == "queued" and len(calls) == 2


@pytest.mark.parametrize("run", RUNNERS)
def test_a_wait_polls_at_most_the_services_longest_poll_and_refuses_a_nan_timeout(run: Any) -> None:
    """max_poll=4000 sent ?timeout=4000, which the service refuses (le=3600); a NaN deadline is
    never reached, so it polled forever."""
    polls = []

    def handler(request: httpx.Request) -> httpx.Response:
        polls.append(float(request.url.params["timeout"]))
        return httpx.Response(200, json={"id": "a", "status": "done"})

    assert run(handler, lambda c: c.wait("a"), max_poll=4000.0).status == "done"
    assert polls == [3600.0]
    with pytest.raises(ValueError, match="timeout is a number of seconds or None, but got nan"):
        run(handler, lambda c: c.wait("a", float("nan")))
    with pytest.raises(TypeError, match="timeout is a number of seconds or None, but got '5'"):
        run(handler, lambda c: c.wait_many(["a"], "5"))
    assert len(polls) == 1


def test_a_wait_stops_retrying_a_service_that_stopped_answering_at_its_timeout() -> None:
    """Each of 5 attempts waited its poll and the request timeout: wait(timeout=1) took 19 s."""
    attempts = []

    def handler(request: httpx.Request) -> httpx.Response:
        attempts.append(request)
        raise httpx.ReadTimeout("no answer", request=request)

    with PreflightClient(
        "http://preflight.test", transport=httpx.MockTransport(handler), retry=RetryPolicy(attempts=5, backoff=0.05)
    ) as client:
        with pytest.raises(PreflightConnectionError, match="failed after 1 tries"):
            client.wait("a", timeout=0.0)
        assert len(attempts) == 1
        with pytest.raises(PreflightConnectionError, match="failed after 5 tries"):
            client.wait("a")  # no deadline: the retry policy as before
        assert len(attempts) == 6


@pytest.mark.parametrize(
    ("url", "words"),
    [("http://[::1", "is not a URL"), ("preflight.test:8000", "is not an http(s) URL with a host")],
)
def test_a_url_that_is_none_is_refused_when_the_client_is_made(url: str, words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        PreflightClient(url)


def test_a_url_from_an_env_file_with_a_newline_is_read_stripped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFLIGHT_URL", "http://preflight.test:8000/\n")
    assert PreflightClient().url == "http://preflight.test:8000"


def test_a_candidate_or_none_given_as_an_id_is_refused_before_any_request() -> None:
    """get(candidate) sent its repr (5 KB) as the id; get(None) sent "None"."""
    client = PreflightClient("http://127.0.0.1:1", retry=RetryPolicy(attempts=1))
    with pytest.raises(TypeError, match=r"a candidate id is a string \(pass candidate.id\)"):
        client.get(Candidate(id="a", status="done"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="but got a NoneType"):
        client.cancel(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a data batch id is a string, but got a int"):
        client.delete_batch(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("item_id", ["", ".", ".."])
def test_an_empty_or_dot_id_is_refused_before_any_request(item_id: str) -> None:
    """``""`` went to the collection (a redirect, reported as a wrong PREFLIGHT_URL), "." and ".."
    to the collection or above it (a 405, or DELETE /v1)."""
    client = PreflightClient("http://127.0.0.1:1", retry=RetryPolicy(attempts=1))
    with pytest.raises(ValueError, match=f"{re.escape(repr(item_id))} is no data batch id"):
        client.delete_batch(item_id)
    for call in (client.get, client.cancel):
        with pytest.raises(ValueError, match="is no candidate id"):
            call(item_id)


def test_a_missing_x_is_named_and_a_boolean_array_is_sent_as_numbers() -> None:
    """upload_batch(None) said "x is nan"; a NumPy mask went as JSON true, refused as "got bool"."""
    import numpy as np

    from nas.client import _batch_body

    with pytest.raises(TypeError, match="x is required"):
        _batch_body(None, None)
    assert _batch_body(np.array([[True, False], [False, True]]), np.array([True, False])) == {
        "x": [[1, 0], [0, 1]],
        "y": [1, 0],
    }


def test_an_async_client_serves_a_second_asyncio_run() -> None:
    """The second run failed with "Event loop is closed": httpx's pooled connection belonged to
    the first run's loop."""
    client = AsyncPreflightClient(
        "http://preflight.test",
        transport=httpx.MockTransport(lambda request: httpx.Response(200, json={"id": "a", "status": "done"})),
    )

    async def status() -> str:
        return (await client.get("a")).status

    assert asyncio.run(status()) == "done"
    (first,) = client._pools.values()
    assert asyncio.run(status()) == "done"
    assert list(client._pools.values()) != [first]  # the first run's pool, bound to its closed loop, is dropped
    asyncio.run(client.aclose())


def test_a_503_after_a_waits_deadline_is_still_retried_and_numpy_timeouts_are_numbers() -> None:
    """The deadline stops retrying a service that gave no answer, not one that answered 503 (a
    busy database): that raised ServerError where the prescreen expects candidates as last seen."""
    import numpy as np

    answers = iter([httpx.Response(503, json={"status": 503})])

    def handler(request: httpx.Request) -> httpx.Response:
        return next(answers, httpx.Response(200, json={"id": request.url.path.split("/")[3], "status": "running"}))

    waited = run_sync(handler, lambda c: c.wait_many(["a", "b"], 0.0, unfinished="return"))
    assert [(c.id, c.status) for c in waited] == [("a", "running"), ("b", "running")]
    done = run_sync(
        lambda request: httpx.Response(200, json={"id": "a", "status": "done"}), lambda c: c.wait("a", np.int64(5))
    )
    assert done.status == "done"


def _outage_then(answers: list[Any]) -> tuple[Handler, list[httpx.Request]]:
    """A handler that answers the first request (the service is there: an outage is ridden out
    only then), then raises or returns each of ``answers`` in turn, then answers "done"."""
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        n = len(calls) - 2
        if n < 0:
            return httpx.Response(200, json={"id": "a", "status": "queued"})
        if n < len(answers):
            if answers[n] == "refused":
                raise httpx.ConnectError("refused", request=request)
            return httpx.Response(answers[n], json={"status": answers[n], "detail": "busy"})
        return httpx.Response(200, json={"id": "a", "status": "done"})

    return handler, calls


def test_a_wait_rides_out_an_outage_of_a_service_that_answered_before() -> None:
    """A restart of the service (about 10 s) or of its database outlasts the policy's 5 tries
    (about 4 s of pauses): wait(timeout=40) raised PreflightConnectionError 5 s in, and through
    the gate that stopped the search."""
    handler, calls = _outage_then(["refused"] * 6 + [503, 502, 504, 429])
    with PreflightClient("http://preflight.test", transport=httpx.MockTransport(handler), retry=FAST) as client:
        assert client.get("a").status == "queued"
        assert client.wait("a", timeout=60).status == "done"  # FAST: 3 tries, ridden past
    assert len(calls) == 12


def test_the_async_client_rides_out_an_outage_too() -> None:
    handler, calls = _outage_then(["refused"] * 5)

    async def main() -> str:
        async with AsyncPreflightClient(
            "http://preflight.test", transport=httpx.MockTransport(handler), retry=FAST
        ) as client:
            await client.get("a")
            return (await client.wait("a", timeout=60)).status

    assert asyncio.run(main()) == "done" and len(calls) == 7


def test_a_service_that_never_answered_or_a_500_gets_the_policys_tries_even_within_a_wait() -> None:
    """A wrong URL (a typo, a service never started) or a deterministic server error must fail in
    seconds, not hold a gate's trial for its whole timeout."""
    refused: list[httpx.Request] = []

    def never(request: httpx.Request) -> httpx.Response:
        refused.append(request)
        raise httpx.ConnectError("Name or service not known", request=request)

    with PreflightClient("http://preflihgt.test", transport=httpx.MockTransport(never), retry=FAST) as client:
        with pytest.raises(PreflightConnectionError, match="after 3 tries"):
            client.wait("a", timeout=600)
    assert len(refused) == 3
    handler, calls = _outage_then([500] * 10)
    with PreflightClient("http://preflight.test", transport=httpx.MockTransport(handler), retry=FAST) as client:
        client.get("a")
        with pytest.raises(ServerError):
            client.wait("a", timeout=600)
    assert len(calls) == 1 + 3


def test_riding_out_an_outage_is_never_a_busy_loop_and_a_retried_poll_asks_for_what_is_left() -> None:
    """A policy without backoff made 11,752 tries in one second; each retry sent the first try's
    whole poll (?timeout=), so the wait outlasted its timeout by a poll."""
    from nas.client import RIDE_OUT_PAUSE

    handler, calls = _outage_then(["refused"] * 1000)
    with PreflightClient("http://preflight.test", transport=httpx.MockTransport(handler), retry=FAST) as client:
        client.get("a")
        with pytest.raises(PreflightConnectionError):
            client.wait("a", timeout=1.5)
    polls = [float(request.url.params["timeout"]) for request in calls[1:]]
    assert len(polls) <= 3 + 1.5 / RIDE_OUT_PAUSE + 1  # the policy's tries, then one a pause
    assert polls[0] == pytest.approx(1.5, abs=0.1) and polls[-1] < polls[0] - RIDE_OUT_PAUSE


def test_a_submission_past_its_deadline_still_gets_the_policys_tries() -> None:
    posts: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        posts.append(request)
        if len(posts) == 1:
            raise httpx.ConnectError("reset", request=request)
        return httpx.Response(202, json={"id": "a", "status": "done"})

    assert run_sync(handler, lambda c: c.condition({}, timeout=0)).status == "done"
    assert len(posts) == 2


def test_a_batch_larger_than_the_services_is_sent_in_batches_and_a_refusal_names_its_place_in_the_whole_list() -> None:
    """300 specs were one request, refused with 413 (the service takes 256 by default)."""
    from nas.client import MAX_BATCH

    sizes = []

    def handler(request: httpx.Request) -> httpx.Response:
        specs = json.loads(request.content)["specs"]
        sizes.append(len(specs))
        if any(spec.get("name") == "bad" for spec in specs):
            index = next(i for i, spec in enumerate(specs) if spec.get("name") == "bad")
            path = f"specs[{index}].blocks"
            return httpx.Response(422, json={"status": 422, "detail": f"{path}: bad", "errors": [{"path": path}]})
        return httpx.Response(202, json={"candidates": [{"id": spec["name"], "status": "queued"} for spec in specs]})

    spec = {"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": 2}]}]}
    specs = [dict(spec, name=str(i)) for i in range(300)]
    candidates = run_sync(handler, lambda c: c.submit_many(specs))
    assert sizes == [MAX_BATCH, 300 - MAX_BATCH] and [c.id for c in candidates] == [str(i) for i in range(300)]
    specs[259] = dict(spec, name="bad")
    with pytest.raises(SpecRejectedError) as caught:
        run_sync(handler, lambda c: c.submit_many(specs))
    assert caught.value.detail == "specs[259].blocks: bad"
    assert caught.value.problem["errors"] == [{"path": "specs[259].blocks"}]


def test_a_url_with_a_password_is_refused_beside_a_token_and_never_shown() -> None:
    """httpx sent the URL's user and password as Basic auth over the bearer token (a 401), and
    every error message printed the password."""
    from nas.errors import ClientSettingError

    with pytest.raises(ClientSettingError, match="Basic auth") as caught:
        PreflightClient("http://user:secretpw@preflight.test", token="t0ken")
    assert "secretpw" not in str(caught.value)
    client = PreflightClient("http://user:secretpw@127.0.0.1:1", retry=RetryPolicy(attempts=1))  # a proxy's login
    with pytest.raises(PreflightConnectionError) as refused:
        client.get("a")
    assert "secretpw" not in str(refused.value) and "user:***@127.0.0.1:1" in str(refused.value)
    assert refused.value.url == "http://user:***@127.0.0.1:1"
    for unparsable in ("ftp://user:secretpw@host", "http://user:secretpw@[::1"):
        with pytest.raises(ClientSettingError) as bad:
            PreflightClient(unparsable)
        assert "secretpw" not in str(bad.value) and "user:***@" in str(bad.value)


@pytest.mark.parametrize("run", RUNNERS)
@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (
            lambda: httpx.Response(404, text="<html>Not Found</html>", headers={"content-type": "text/html"}),
            "text/html",
        ),
        (lambda: httpx.Response(401, text=""), "HTTP 401 with text/plain"),
        (lambda: httpx.Response(200, content=b"junk", headers={"content-encoding": "gzip"}), "cannot be decoded"),
    ],
    ids=["a-web-page", "an-empty-401", "a-body-its-headers-misdescribe"],
)
def test_an_error_answer_that_is_not_the_apis_is_an_unexpected_response(
    run: Any, answer: Callable[[], httpx.Response], words: str
) -> None:
    """A proxy's HTML 404 was "No such candidate or study", its 401 "set PREFLIGHT_API_TOKEN", and
    a body with a false Content-Encoding httpx's raw DecodingError."""
    from nas.errors import UnexpectedResponseError

    with pytest.raises(UnexpectedResponseError, match=words):
        run(lambda request: answer(), lambda c: c.get("a"))  # a body is decoded as the answer is read


def test_a_proxys_own_413_or_429_page_keeps_its_typed_error() -> None:
    """nginx's 1 MiB body limit answers an HTML 413: it still says to send less, not that the URL is wrong."""
    from nas.errors import PayloadTooLargeError

    page = httpx.Response(413, text="<html>413 Request Entity Too Large</html>", headers={"content-type": "text/html"})
    with pytest.raises(PayloadTooLargeError):
        run_sync(lambda request: page, lambda c: c.get("a"))


def test_the_backoff_of_a_very_late_try_is_its_cap_not_an_overflow() -> None:
    assert RetryPolicy(attempts=10**6).delay(1100) == 8.0
    assert RetryPolicy(attempts=10**6, multiplier=10, jitter=0).delay(400) == 8.0
    assert RetryPolicy(backoff=0.0, max_backoff=0.0).delay(10**6) == 0.0


@pytest.mark.parametrize("run", RUNNERS)
def test_a_report_this_client_cannot_read_is_an_unexpected_response_naming_where(run: Any) -> None:
    """A stored report holds null for a figure that was not finite; where the report model wants
    a number, get() and wait() raised pydantic's ValidationError, no PreflightError."""
    from nas.errors import UnexpectedResponseError

    broken = json.loads(json.dumps(DONE))
    broken["report"]["tuning"]["seconds"] = None
    with pytest.raises(
        UnexpectedResponseError, match=r"candidate 7: its report cannot be read at report\.tuning\.seconds"
    ):
        run(lambda request: httpx.Response(200, json=broken), lambda c: c.get("7"))


def test_condition_submits_through_an_outage_within_its_timeout() -> None:
    posts: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            posts.append(request)
            if len(posts) <= 5:
                raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200 if request.method == "GET" else 202, json={"id": "a", "status": "done"})

    with PreflightClient("http://preflight.test", transport=httpx.MockTransport(handler), retry=FAST) as client:
        client.get("a")  # the service has answered this client
        assert client.condition({}, timeout=60).status == "done"
    assert len(posts) == 6  # the same submission again: the service finds the same job


@pytest.mark.parametrize("run", RUNNERS)
def test_a_batch_delete_whose_first_try_got_no_answer_is_done_when_the_retry_finds_it_gone(run: Any) -> None:
    """The first try may have deleted it before the connection dropped: the retry's 404 is that
    delete, not an unknown id; a 404 to the first try is (NotFoundError)."""
    from nas.errors import NotFoundError

    calls: list[httpx.Request] = []
    missing = {"type": "about:blank", "title": "Not Found", "status": 404, "detail": "no data batch with id ab"}

    def dropped_then_gone(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) == 1:
            raise httpx.ReadError("connection reset", request=request)
        return httpx.Response(404, json=missing, headers={"content-type": "application/problem+json"})

    assert run(dropped_then_gone, lambda client: client.delete_batch("ab")) is None
    assert [(r.method, r.url.path) for r in calls] == [("DELETE", "/v1/batches/ab")] * 2

    def gone(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json=missing, headers={"content-type": "application/problem+json"})

    with pytest.raises(NotFoundError, match="no data batch with id ab"):
        run(gone, lambda client: client.delete_batch("ab"))


@pytest.mark.parametrize("run", RUNNERS)
@pytest.mark.parametrize(
    "first_try",
    [
        pytest.param(lambda request: httpx.Response(503, json={"title": "busy"}), id="503"),
        pytest.param(lambda request: httpx.Response(429, json={"title": "slow down"}), id="429"),
        pytest.param(
            lambda request: (_ for _ in ()).throw(httpx.ConnectError("refused", request=request)), id="refused"
        ),
    ],
)
def test_a_batch_delete_whose_first_try_was_not_carried_out_reports_an_unknown_id(
    run: Any, first_try: Callable[[httpx.Request], httpx.Response]
) -> None:
    """A 503, a 429 or a refused connection deleted nothing: the retry's 404 is the id's own (it
    read as done, so a mistyped id was reported deleted)."""
    from nas.errors import NotFoundError

    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) == 1:
            return first_try(request)
        missing = {"type": "about:blank", "title": "Not Found", "status": 404, "detail": "no data batch with id ab"}
        return httpx.Response(404, json=missing, headers={"content-type": "application/problem+json"})

    with pytest.raises(NotFoundError, match="no data batch with id ab"):
        run(handler, lambda client: client.delete_batch("ab"))
    assert len(calls) == 2

"""The REST API through real HTTP (uvicorn on a free port): submit, dedup, long-poll, list,
cancel, study summaries, auth refusals and problem+json errors.

Jobs are finished here by calling the queue as a worker would (claim + complete), so these
tests need no engine; tests/service/test_workers.py runs the real one."""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from sqlalchemy import select

from nas.examples import EXAMPLE_MLP
from nas.report import ConditioningReport
from nas.validate import parse_spec as nas_parse_spec
from service.revision import engine_revision
from service.settings import Settings
from service.store import jobs
from service.store.db import make_engine, make_sessionmaker, session_scope
from service.store.models import Candidate
from service.store.tokens import create_token, revoke_token
from service.testing import live_server

PROBLEM = "application/problem+json"


def spec(width: int = 8, **extra: Any) -> dict[str, Any]:
    return {"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": width}, {"type": "relu"}]}], **extra}


@pytest.fixture
def api(db_url: str, make_settings: Callable[..., Settings]) -> Iterator[httpx.Client]:
    with live_server(make_settings(db_url)) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client


@pytest.fixture
def sqlite_api(sqlite_url: str, make_settings: Callable[..., Settings]) -> Iterator[httpx.Client]:
    with live_server(make_settings(sqlite_url)) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client


class Worker:
    """Finishes jobs through the queue, as the runner does, with a given report."""

    def __init__(self, url: str) -> None:
        self.engine = make_engine(url)
        self.sessions = make_sessionmaker(self.engine)

    def finish_one(self, report: ConditioningReport) -> int | None:
        with session_scope(self.sessions, write=True) as session:
            job = jobs.claim(session, worker="test", device_kind="cpu", lease_seconds=30)
        if job is None:
            return None
        with session_scope(self.sessions, write=True) as session:
            jobs.complete(session, job_id=job.id, token=job.lease_token, report=report)
        return job.id


@pytest.fixture
def worker(db_url: str) -> Iterator[Worker]:
    w = Worker(db_url)
    yield w
    w.engine.dispose()


def assert_problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    assert body["status"] == status and body["title"] and "Traceback" not in response.text
    return body


def test_submit_answers_202_with_a_queued_candidate(api: httpx.Client) -> None:
    response = api.post("/v1/candidates", json={"spec": spec(), "options": {"study": "s", "trial": 3, "steps": 2}})
    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "queued" and body["cached"] is False and body["study"] == "s" and body["trial"] == 3
    assert body["options"]["steps"] == 2 and body["report"] is None
    assert body["engine"] == engine_revision()  # the revision it is keyed under
    fetched = api.get(f"/v1/candidates/{body['id']}").json()
    assert fetched["id"] == body["id"] and fetched["status"] == "queued" and fetched["engine"] == body["engine"]


def test_the_same_network_and_options_is_not_tuned_twice(
    api: httpx.Client, worker: Worker, sample_report: ConditioningReport
) -> None:
    first = api.post("/v1/candidates", json={"spec": spec(), "options": {"study": "a", "steps": 2}}).json()
    # Same meaning: other key order, a name, explicit defaults, another study and trial.
    same = {
        "name": "renamed",
        "blocks": [{"layers": [{"out": 8, "type": "linear", "bias": True}, {"type": "relu"}]}],
        "input_shape": [4],
    }
    again = api.post("/v1/candidates", json={"spec": same, "options": {"study": "b", "trial": 9, "steps": 2}}).json()
    assert again["id"] == first["id"] and again["cached"] is True
    other = api.post("/v1/candidates", json={"spec": spec(), "options": {"steps": 3}}).json()
    assert other["id"] != first["id"]
    worker.finish_one(sample_report)
    hit = api.post("/v1/candidates", json={"spec": spec(), "options": {"steps": 2}})
    assert hit.status_code == 202
    assert hit.json()["status"] == "done" and hit.json()["report"]["scales"] == sample_report.scales


def test_auto_head_std_and_the_number_it_resolves_to_are_one_job(api: httpx.Client) -> None:
    """``output_std`` "auto" is keyed as the number the engine applies (0.5 without BatchNorm, 1.0
    with it), so asking for that number explicitly shares the job, and the other does not."""
    plain = api.post("/v1/candidates", json={"spec": spec(), "options": {"steps": 2}}).json()
    assert plain["options"]["output_std"] == 0.5
    explicit = api.post("/v1/candidates", json={"spec": spec(), "options": {"steps": 2, "output_std": 0.5}}).json()
    assert explicit["id"] == plain["id"] and explicit["cached"] is True
    normed = spec()
    normed["blocks"][0]["layers"].insert(1, {"type": "batchnorm"})
    auto = api.post("/v1/candidates", json={"spec": normed, "options": {"steps": 2, "output_std": "auto"}}).json()
    assert auto["options"]["output_std"] == 1.0 and auto["cached"] is False
    one = api.post("/v1/candidates", json={"spec": normed, "options": {"steps": 2, "output_std": 1.0}}).json()
    half = api.post("/v1/candidates", json={"spec": normed, "options": {"steps": 2, "output_std": 0.5}}).json()
    assert one["id"] == auto["id"] and one["cached"] is True
    assert half["id"] != auto["id"] and half["cached"] is False


def test_a_batch_is_answered_in_order(api: httpx.Client) -> None:
    body = {"specs": [spec(1), spec(2), spec(1)], "options": {"study": "batch"}}
    response = api.post("/v1/candidates", json=body)
    assert response.status_code == 202
    ids = [c["id"] for c in response.json()["candidates"]]
    assert len(ids) == 3 and ids[0] == ids[2] != ids[1]


def test_a_bad_spec_gets_422_with_its_json_path_and_nothing_is_queued(api: httpx.Client) -> None:
    bad = {"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": 0}]}]}
    problem = assert_problem(api.post("/v1/candidates", json={"specs": [spec(), bad]}), 422)
    assert problem["type"].endswith("/invalid-spec")
    assert problem["errors"][0]["path"] == "specs[1].blocks[0].layers[0] (linear).out"
    assert api.get("/v1/candidates").json()["candidates"] == []
    shapes = {
        "input_shape": [1, 8, 8],
        "blocks": [{"layers": [{"type": "linear", "out": 2}, {"type": "conv2d", "out": 2, "kernel": 3}]}],
    }
    problem = assert_problem(api.post("/v1/candidates", json={"spec": shapes}), 422)
    assert problem["errors"][0]["path"].startswith("spec.blocks[0]")


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"spec": 3}, "spec"),
        ({"specs": []}, "specs"),
        ({"spec": {}, "options": {"steps": -1}}, "options.steps"),
        ({"spec": {}, "options": {"no_such_option": 1}}, "options.no_such_option"),
        ({"spec": {}, "options": {"device": "tpu"}}, "options.device"),
        ({"spec": {}, "options": {"steps": True}}, "options.steps"),  # was read as 1 step
        ({"spec": {}, "options": {"priority": "11"}}, "options.priority"),  # was read as 11
        ({"spec": {}, "options": {"priority": True}}, "options.priority"),  # was read as 1
        ({"spec": {}, "options": {"trial": True}}, "options.trial"),
        ({"spec": {}, "options": {"trial": 3.0}}, "options.trial"),
        ({"spec": {}, "options": {"diagnostics": "no"}}, "options.diagnostics"),  # was read as false
        ({"spec": {}, "extra": 1}, "extra"),
    ],
)
def test_bad_requests_get_422_problems_naming_the_field(sqlite_api: httpx.Client, body: Any, path: str) -> None:
    problem = assert_problem(sqlite_api.post("/v1/candidates", json=body), 422)
    assert path in [issue["path"] for issue in problem["errors"]]


def test_a_batch_refusal_names_every_refused_spec_so_a_client_drops_them_at_once(sqlite_api: httpx.Client) -> None:
    """The batch named only its first refused spec: a client dropping refused specs (the gate's
    prescreen) sent the batch again once per refused spec."""
    bad = {"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": 0}]}]}
    flat = {"input_shape": [4], "blocks": [{"layers": [{"type": "relu"}]}]}  # no parameters
    problem = assert_problem(sqlite_api.post("/v1/candidates", json={"specs": [bad, spec(), flat, bad]}), 422)
    assert [e["path"].split(".")[0] for e in problem["errors"]] == ["specs[0]", "specs[2]", "specs[3]"]
    assert problem["detail"].startswith("3 of 4 specs refused: specs[0].blocks[0].layers[0] (linear).out: ")
    assert sqlite_api.get("/v1/candidates").json()["candidates"] == []  # all or nothing, as before
    many = {"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": 0}]} for _ in range(60)]}
    problem = assert_problem(sqlite_api.post("/v1/candidates", json={"specs": [spec(), many, bad]}), 422)
    paths = [e["path"] for e in problem["errors"]]
    assert all(path.startswith("specs[1]") for path in paths) and len(paths) == 51  # 50, then the count
    assert problem["errors"][-1] == {"path": "specs[1]", "message": "10 more issues not listed"}
    assert "; 1 more not listed: " in problem["detail"]  # specs[2] is named by the next request
    assert assert_problem(sqlite_api.post("/v1/candidates", json={"spec": bad}), 422)["detail"].startswith("spec.")


@pytest.mark.parametrize("batch", [False, True], ids=["spec", "specs"])
def test_a_network_without_parameters_is_refused_and_nothing_is_queued(sqlite_api: httpx.Client, batch: bool) -> None:
    """It was queued, and the worker failed it three times over with torch's "element 0 of tensors
    does not require grad"."""
    relu = {"input_shape": [16], "blocks": [{"layers": [{"type": "relu"}]}]}
    body = {"specs": [EXAMPLE_MLP, relu]} if batch else {"spec": relu}
    problem = assert_problem(sqlite_api.post("/v1/candidates", json=body), 422)
    assert problem["errors"][0]["path"] == ("specs[1].blocks" if batch else "spec.blocks")
    assert "no parameters" in problem["errors"][0]["message"]
    assert sqlite_api.get("/v1/candidates", params={"limit": 10}).json()["candidates"] == []


def test_an_unknown_device_is_refused_with_the_valid_values_not_a_pattern(sqlite_api: httpx.Client) -> None:
    problem = assert_problem(sqlite_api.post("/v1/candidates", json={"spec": {}, "options": {"device": "gpu"}}), 422)
    (issue,) = [i for i in problem["errors"] if i["path"] == "options.device"]
    assert "'auto', 'cpu', 'cuda' or 'cuda:N'" in issue["message"] and "'gpu'" in issue["message"]
    assert "^(" not in issue["message"]  # no raw regular expression


@pytest.mark.parametrize("device", ["cuda:\u0661\u0662", "cuda:\uff11"], ids=["arabic-indic", "full-width"])
def test_a_device_number_in_other_digits_than_ascii_is_refused(sqlite_api: httpx.Client, device: str) -> None:
    """Python's \\d took them (the published pattern means 0-9): a job for a GPU no worker names."""
    problem = assert_problem(
        sqlite_api.post("/v1/candidates", json={"spec": spec(), "options": {"device": device}}), 422
    )
    assert [issue["path"] for issue in problem["errors"]] == ["options.device"]


def test_a_study_name_too_long_is_measured_in_characters(sqlite_api: httpx.Client) -> None:
    problem = assert_problem(
        sqlite_api.post("/v1/candidates", json={"spec": spec(), "options": {"study": "s" * 513}}), 422
    )
    assert "at most 512 characters" in problem["errors"][0]["message"], problem  # pydantic said "items"


def test_an_oversized_key_or_layer_type_is_not_echoed_back_whole(sqlite_api: httpx.Client) -> None:
    """A 3 MB layer type came back twice in a 6 MB 422; a megabyte-long unknown key of the spec,
    the options or a batch came back in full as its path."""
    long = "k" * 1_000_000
    layer = {"input_shape": [4], "blocks": [{"layers": [{"type": long}]}]}
    for route, body in [
        ("/v1/candidates", {"spec": layer}),
        ("/v1/candidates", {"spec": {**spec(), long: 1}}),
        ("/v1/candidates", {"spec": {**spec(), "-" + long: 1}}),
        ("/v1/candidates", {"spec": spec(), "options": {long: 1}}),
        ("/v1/batches", {"x": [[1.0], [2.0]], long: 1}),
    ]:
        response = sqlite_api.post(route, json=body)
        assert_problem(response, 422)
        assert len(response.content) < 4000 and re.search(r"\(100000\d characters\)", response.text), response.text[
            :300
        ]


def test_an_empty_body_is_named_as_such(sqlite_api: httpx.Client) -> None:
    """It read "$: Field required"."""
    for route in ("/v1/candidates", "/v1/batches"):
        problem = assert_problem(sqlite_api.post(route, headers={"content-type": "application/json"}), 422)
        assert problem["errors"] == [{"path": "$", "message": problem["errors"][0]["message"]}]
        assert problem["errors"][0]["message"].startswith("the request has no body: send a JSON object")


def test_malformed_json_is_a_problem_not_a_crash(sqlite_api: httpx.Client) -> None:
    response = sqlite_api.post("/v1/candidates", content=b"{not json", headers={"content-type": "application/json"})
    assert_problem(response, 422)


def test_a_json_syntax_error_names_its_line_and_column(sqlite_api: httpx.Client) -> None:
    body = b'{\n  "spec": {\n    "input_shape": [4],,\n  }\n}'
    response = sqlite_api.post("/v1/candidates", content=body, headers={"content-type": "application/json"})
    problem = assert_problem(response, 422)
    assert "line 3, column 24" in problem["errors"][0]["message"], problem


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"spec": "\xff\xfe"}', "not UTF-8 (byte b'\\xff' at offset 10)"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"spec": {"input_shape": [' + b"9" * 5000 + b"]}}", "digits"),
    ],
    ids=["not-utf8", "nested-100000-deep", "5000-digit-integer"],
)
def test_a_body_that_cannot_be_parsed_is_a_422_at_the_root_saying_why(
    sqlite_api: httpx.Client, body: bytes, reason: str
) -> None:
    """FastAPI answers these with a bare 400 "There was an error parsing the body"."""
    for route in ("/v1/candidates", "/v1/batches"):
        response = sqlite_api.post(route, content=body, headers={"content-type": "application/json"})
        problem = assert_problem(response, 422)
        assert problem["errors"][0]["path"] == "$" and reason in problem["errors"][0]["message"], problem


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("/v1/candidates?cursor=garbage", "query.cursor"),
        ("/v1/candidates?verdict=bogus", "query.verdict"),
        ("/v1/candidates?study=%00", "query.study"),
        ("/v1/candidates/1/wait?timeout=NaN", "query.timeout"),
        ("/v1/studies/s/summary?q=0.5&q=2", "query.q[1]"),
        ("/v1/studies/%00/summary", "path.study"),
        ("/v1/studies/%ff%fe/summary", "path"),
        ("/v1/candidates?study=%ff", "query.study"),
        ("/v1/candidates?limit=5&cursor=%ED%A0%80", "query.cursor"),  # a lone surrogate's UTF-8 bytes
        ("/v1/candidates?%ff=1", "query"),
    ],
)
def test_a_bad_parameter_is_a_422_naming_where_it_is(sqlite_api: httpx.Client, url: str, path: str) -> None:
    problem = assert_problem(sqlite_api.get(url), 422)
    assert problem["errors"][0]["path"] == path and problem["detail"].startswith(path), problem


def test_a_spec_error_is_located_under_the_field_that_holds_the_spec(sqlite_api: httpx.Client) -> None:
    overflowing = {
        "input_shape": [4],
        "blocks": [{"layers": [{"type": "residual", "body": [{"type": "relu"}], "beta": 1e308}]}],
    }
    for body, path in [
        ({"spec": {**spec(), "x-y": 1}}, 'spec["x-y"]'),  # a key that is not a name, quoted
        ({"spec": overflowing}, "spec.blocks[0].layers[0] (residual).beta"),  # was queued, then failed in the worker
    ]:
        problem = assert_problem(sqlite_api.post("/v1/candidates", json=body), 422)
        assert [issue["path"] for issue in problem["errors"]] == [path], problem


def test_a_refused_item_of_a_list_is_one_issue_not_also_a_list_too_short(sqlite_api: httpx.Client) -> None:
    """pydantic counts the items left after refusing one: probe_lrs [0] also read "Tuple should have
    at least 1 item after validation, not 0", as if the list were empty."""
    body = {"spec": spec(), "options": {"probe_lrs": [0]}}
    problem = assert_problem(sqlite_api.post("/v1/candidates", json=body), 422)
    assert [issue["path"] for issue in problem["errors"]] == ["options.probe_lrs[0]"], problem
    empty = assert_problem(sqlite_api.post("/v1/candidates", json={**body, "options": {"probe_lrs": []}}), 422)
    assert [issue["path"] for issue in empty["errors"]] == ["options.probe_lrs"], empty  # a list that is empty


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"spec": spec(), "a b": 1}, '["a b"]'),
        ({"spec": spec(), "": 1}, '[""]'),
        ({"spec": spec(), "1": 1}, '["1"]'),
        ({"spec": spec(), "options": {"thresholds": {"a.b": 1}}}, 'options.thresholds["a.b"]'),
        ({"spec": spec(), "options": {"thresholds": {"foo": 1}}}, "options.thresholds.foo"),
    ],
)
def test_an_unknown_key_that_is_not_a_name_is_named_quoted_not_left_out(
    sqlite_api: httpx.Client, body: dict, path: str
) -> None:
    """The top level of the body and the thresholds dropped such a key from the path ("$: Extra
    inputs are not permitted"), as if it were pydantic's label of a union member."""
    problem = assert_problem(sqlite_api.post("/v1/candidates", json=body), 422)
    assert [issue["path"] for issue in problem["errors"]] == [path], problem


def test_a_body_of_another_media_type_than_json_is_a_415_naming_the_header(sqlite_api: httpx.Client) -> None:
    body = json.dumps({"spec": spec()}).encode()
    for media_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        response = sqlite_api.post("/v1/candidates", content=body, headers={"content-type": media_type})
        problem = assert_problem(response, 415)
        assert problem["errors"][0]["path"] == "header.content-type" and media_type.split(";")[0] in problem["detail"]
    for media_type in ("application/json; charset=utf-8", "application/merge-patch+json"):
        response = sqlite_api.post("/v1/candidates", content=body, headers={"content-type": media_type})
        assert response.status_code == 202, response.text


def test_a_body_without_a_content_type_is_read_as_json(sqlite_api: httpx.Client) -> None:
    """As docs/service.md says; FastAPI from 0.122 read it as bytes, and answered "Input should be
    a valid dictionary or object"."""
    body = json.dumps({"spec": spec()}).encode()
    response = sqlite_api.post("/v1/candidates", content=body)
    assert "content-type" not in response.request.headers
    assert response.status_code == 202, response.text
    batch = json.dumps({"x": [[float(i), 1.0] for i in range(4)]}).encode()
    assert sqlite_api.post("/v1/batches", content=batch).status_code == 201
    for empty in ("", "; charset=utf-8"):  # no media type named: read as JSON too
        response = sqlite_api.post("/v1/candidates", content=body, headers={"content-type": empty})
        assert response.status_code == 202, response.text
    assert 'route="unmatched"' not in sqlite_api.get("/metrics").text  # the route is recorded where metrics read it


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ('{"spec": {"\\ud800": 1, "input_shape": [8], "blocks": []}}', 'spec["\\ud800"]'),
        ('{"spec": {"input_shape": [8], "blocks": []}, "options": {"a\\udc00": 1}}', 'options["a\\udc00"]'),
        ('{"specs": [{"input_shape": [8], "\\ud800": 1}]}', 'specs[0]["\\ud800"]'),
    ],
    ids=["spec", "options", "batch-of-specs"],
)
def test_a_key_holding_a_lone_surrogate_is_refused_at_that_key(sqlite_api: httpx.Client, body: str, path: str) -> None:
    """pydantic cannot read such a key: the spec or the options were refused whole, at "spec" or
    "options", with "Input should be a valid string, unable to parse raw data as a unicode string"."""
    response = sqlite_api.post("/v1/candidates", content=body, headers={"content-type": "application/json"})
    problem = assert_problem(response, 422)
    assert problem["errors"][0]["path"] == path, problem
    assert "lone surrogate" in problem["errors"][0]["message"]


@pytest.mark.parametrize(
    ("options", "spec_fields", "path", "message"),
    [
        ({"study": "a\\ud800"}, {}, "options.study", "must be valid Unicode text (it holds a lone surrogate"),
        ({"loss": "\\ud800"}, {}, "options.loss", "must be valid Unicode text (it holds a lone surrogate"),
        ({"device": "\\udc00"}, {}, "options.device", "must be valid Unicode text (it holds a lone surrogate"),
        ({}, {"format": "\\ud800"}, "spec.format", "must be valid Unicode text (it holds a lone surrogate"),
        ({"study": "a\\u0000"}, {}, "options.study", "must not contain the NUL character"),
    ],
    ids=["study", "loss", "device", "spec-format", "study-nul"],
)
def test_a_value_holding_a_lone_surrogate_or_nul_is_refused_in_the_same_words_everywhere(
    sqlite_api: httpx.Client, options: dict, spec_fields: dict, path: str, message: str
) -> None:
    """Some fields said pydantic's "unable to parse raw data as a unicode string", and a
    validator's refusal began "Value error, "; a spec's name already read as these do."""
    body = json.dumps({"spec": {**spec(), **spec_fields}, "options": options}).replace(
        "\\\\", "\\"
    )  # "\\ud800" -> the escape itself
    response = sqlite_api.post("/v1/candidates", content=body, headers={"content-type": "application/json"})
    problem = assert_problem(response, 422)
    assert problem["errors"][0]["path"] == path, problem
    assert problem["errors"][0]["message"].startswith(message), problem


def test_a_body_naming_a_key_twice_is_refused_at_the_object_that_does(sqlite_api: httpx.Client) -> None:
    """Python's json keeps the last value: {"out": 8, "out": 16} was a width of 16, stored with no word."""
    layer = '{"type": "linear", "out": 8, "out": 16}'
    body = '{"spec": {"input_shape": [4], "blocks": [{"layers": [{"type": "relu"}, ' + layer + "]}]}}"
    problem = assert_problem(sqlite_api.post("/v1/candidates", content=body), 422)
    assert problem["errors"] == [
        {"path": "spec.blocks[0].layers[1]", "message": "duplicate key 'out': name each key of an object once"}
    ]
    twice = json.dumps({"spec": spec()})[:-1] + ', "spec": {}}'
    assert assert_problem(sqlite_api.post("/v1/candidates", content=twice), 422)["errors"][0]["path"] == "$"
    batch = '{"x": [[1.0, 2.0]], "y": [0], "y": [1]}'
    assert assert_problem(sqlite_api.post("/v1/batches", content=batch), 422)["errors"][0]["path"] == "$"
    deep = '{"specs": [' + json.dumps(spec()) + ', {"input_shape": [4], "input_shape": [5], "blocks": []}]}'
    assert assert_problem(sqlite_api.post("/v1/candidates", content=deep), 422)["errors"][0]["path"] == "specs[1]"
    listed = sqlite_api.get("/v1/candidates").json()["candidates"]
    assert listed == []  # nothing was stored
    ok = json.dumps({"spec": spec()})  # the same key in two objects is no repeat
    assert sqlite_api.post("/v1/candidates", content=ok).status_code == 202


def test_a_method_a_path_does_not_allow_is_405_naming_every_method_it_does(sqlite_api: httpx.Client) -> None:
    """RFC 9110: a 405's Allow lists the target's methods; the router named only its first route's
    (DELETE /v1/candidates said "Allow: POST", though GET lists candidates)."""
    for method, path, template, allowed in [
        ("DELETE", "/v1/candidates", "/v1/candidates", {"GET", "HEAD", "POST"}),
        ("POST", "/v1/candidates/c_abc", "/v1/candidates/{candidate_id}", {"GET", "HEAD", "DELETE"}),
        ("DELETE", "/v1/batches", "/v1/batches", {"GET", "HEAD", "POST"}),
        ("POST", "/v1/batches/ab", "/v1/batches/{batch_id}", {"GET", "HEAD", "DELETE"}),
    ]:
        response = sqlite_api.request(method, path)
        problem = assert_problem(response, 405)
        assert set(response.headers["allow"].split(", ")) == allowed
        assert problem["detail"] == f"{method} is not a method of {template}: it allows {response.headers['allow']}"
        for other in allowed - {"POST"}:  # each named method is served there (a POST without a body is a 422)
            assert sqlite_api.request(other, path).status_code != 405


def test_a_content_type_given_twice_is_refused_naming_the_header(sqlite_api: httpx.Client) -> None:
    """The format check read the last one and FastAPI the first: text/plain then JSON passed the
    check and was misread as "not an object"."""
    body = json.dumps({"spec": spec()}).encode()
    twice = [("content-type", "text/plain"), ("content-type", "application/json")]
    problem = assert_problem(sqlite_api.post("/v1/candidates", content=body, headers=twice), 400)
    assert problem["errors"][0]["path"] == "header.content-type" and "2 times" in problem["detail"]


def test_a_cell_spec_is_stored_and_sent_as_documented_with_from_on_its_edges(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    """Edges were stored (and sent by the client from a parsed spec) under the model's field name
    ``source``, which the spec format does not have."""
    from nas.client import PreflightClient
    from nas.space import nasbench201_spec

    cell_spec = nas_parse_spec(nasbench201_spec([1] * 6, channels=2, cells_per_stage=1))  # a parsed spec object
    with live_server(make_settings(sqlite_url)) as url, PreflightClient(url) as client:
        client.submit(cell_spec)
    engine = make_engine(sqlite_url)
    with session_scope(make_sessionmaker(engine)) as session:
        (stored,) = session.scalars(select(Candidate.spec)).all()
    engine.dispose()
    edges = [edge for block in stored["blocks"] for layer in block["layers"] for edge in layer.get("edges", [])]
    assert edges and all("from" in edge and "source" not in edge for edge in edges)


def test_a_bare_spec_gets_a_hint_to_wrap_it(sqlite_api: httpx.Client) -> None:
    problem = assert_problem(sqlite_api.post("/v1/candidates", json=spec()), 422)
    assert problem["errors"][0]["path"] == "$" and '{"spec": <your spec>' in problem["errors"][0]["message"]


def test_unknown_ids_are_404_problems(sqlite_api: httpx.Client) -> None:
    for method, path in [
        ("GET", "/v1/candidates/999"),
        ("GET", "/v1/candidates/999/wait?timeout=0"),
        ("DELETE", "/v1/candidates/999"),
        ("GET", "/v1/nothing"),
        ("GET", "/v1/candidates/" + "a" * 65),  # was a 422 naming max_length, for an id that names nothing
        ("GET", "/v1/batches/" + "f" * 2000),
    ]:
        problem = assert_problem(sqlite_api.request(method, path), 404)
        assert problem["instance"] == path.split("?")[0] and len(problem["detail"]) < 120


def test_oversized_bodies_and_batches_are_413(sqlite_url: str, make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(sqlite_url, max_body_bytes=4096, max_batch=3)
    with live_server(settings) as url, httpx.Client(base_url=url) as client:
        big = {"spec": spec(name="x" * 5000)}
        assert_problem(client.post("/v1/candidates", json=big), 413)
        assert_problem(client.post("/v1/candidates", json={"specs": [spec(i) for i in range(1, 5)]}), 413)

        def chunks() -> Iterator[bytes]:  # no Content-Length: the streamed size is counted
            yield b'{"spec": {"name": "'
            for _ in range(10):
                yield b"y" * 1000
            yield b'"}}'

        assert_problem(
            client.post("/v1/candidates", content=chunks(), headers={"content-type": "application/json"}), 413
        )


def test_spec_size_limits_apply_before_queueing(sqlite_api: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    huge = {
        "input_shape": [4],
        "blocks": [{"layers": [{"type": "linear", "out": 100_000}, {"type": "linear", "out": 100_000}]}],
    }
    problem = assert_problem(sqlite_api.post("/v1/candidates", json={"spec": huge}), 422)
    assert "PREFLIGHT_SPEC_MAX_PARAMETERS" in problem["detail"]


POISON_KERNEL = {  # a conv with kernel 255 on [16, 256, 256]: ~1e12 multiply-accumulates per sample
    "input_shape": [16, 256, 256],
    "blocks": [{"layers": [{"type": "conv2d", "out": 16, "kernel": 255}, {"type": "global_avgpool"}]}],
}
POISON_BATCH = {  # a small conv net on [4, 512, 512]: fine at batch 64, 16 GiB of activations at 4096
    "input_shape": [4, 512, 512],
    "blocks": [{"layers": [{"type": "conv2d", "out": 4, "kernel": 3}, {"type": "relu"}, {"type": "global_avgpool"}]}],
}


@pytest.mark.parametrize(
    ("spec", "options", "path", "setting"),
    [
        (POISON_KERNEL, {}, "options.batch_size", "PREFLIGHT_SPEC_MAX_STEP_MACS"),
        (POISON_BATCH, {"batch_size": 4096}, "options.batch_size", "PREFLIGHT_SPEC_MAX_ACTIVATION_BYTES"),
        (
            POISON_BATCH,
            {"hessian_batch_size": 4096},
            "options.hessian_batch_size",
            "PREFLIGHT_SPEC_MAX_ACTIVATION_BYTES",
        ),
    ],
    ids=["kernel-255", "batch-4096", "hessian-batch-4096"],
)
def test_poison_jobs_are_refused_before_queueing_by_their_own_batch_and_compute(
    sqlite_api: httpx.Client, spec: dict[str, Any], options: dict[str, Any], path: str, setting: str
) -> None:
    response = sqlite_api.post("/v1/candidates", json={"spec": spec, "options": options})
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["errors"][0]["path"] == path and setting in problem["detail"]
    # in a batch, the spec whose job is too large is named, so that a prescreen can drop it alone
    problem = sqlite_api.post("/v1/candidates", json={"specs": [EXAMPLE_MLP, spec], "options": options}).json()
    assert problem["errors"][0]["path"] == "specs[1]" and f"at {path}" in problem["errors"][0]["message"], problem
    assert sqlite_api.get("/v1/candidates").json()["candidates"] == []  # nothing queued
    assert sqlite_api.post("/v1/candidates", json={"spec": POISON_BATCH, "options": {}}).status_code == 202


def test_a_4_mb_spec_is_refused_from_its_layer_count_off_the_event_loop(sqlite_api: httpx.Client) -> None:
    """The issue's 161,304-layer spec: a 422 naming the layer limit, counted before validation (it
    once took 7-12 s of pydantic on the event loop), nothing queued, the server still answering."""
    spec = {"input_shape": [4], "blocks": [{"layers": [{"type": "relu"}] * 161_304}]}
    response = sqlite_api.post("/v1/candidates", json={"spec": spec})
    problem = assert_problem(response, 422)
    assert problem["errors"][0]["path"] == "spec.blocks" and "PREFLIGHT_SPEC_MAX_LAYERS" in problem["detail"]
    assert sqlite_api.get("/healthz").status_code == 200
    assert sqlite_api.get("/v1/candidates").json()["candidates"] == []


def test_long_poll_returns_at_timeout_or_when_done(
    api: httpx.Client, worker: Worker, sample_report: ConditioningReport
) -> None:
    candidate = api.post("/v1/candidates", json={"spec": spec()}).json()
    started = time.monotonic()
    still = api.get(f"/v1/candidates/{candidate['id']}/wait", params={"timeout": 0.4}).json()
    assert still["status"] == "queued" and 0.35 < time.monotonic() - started < 5
    threading.Timer(0.5, worker.finish_one, args=(sample_report,)).start()
    started = time.monotonic()
    done = api.get(f"/v1/candidates/{candidate['id']}/wait", params={"timeout": 20}).json()
    assert done["status"] == "done" and done["score"] == sample_report.score and done["verdict"] == "keep"
    assert time.monotonic() - started < 5
    assert done["report"]["blocks"][1]["apjn_after"] == 1.0 and done["timings"]["tuning_seconds"] == 0.25


def test_list_filters_and_pages_with_a_cursor(
    api: httpx.Client, worker: Worker, sample_report: ConditioningReport
) -> None:
    ids = [
        api.post("/v1/candidates", json={"spec": spec(w), "options": {"study": "s" if w % 2 else "t"}}).json()["id"]
        for w in range(1, 8)
    ]
    seen, cursor = [], None
    while True:
        page = api.get("/v1/candidates", params={"limit": 3, **({"cursor": cursor} if cursor else {})}).json()
        seen += [c["id"] for c in page["candidates"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids
    study = api.get("/v1/candidates", params={"study": "s"}).json()["candidates"]
    assert [c["id"] for c in study] == ids[0::2]
    assert worker.finish_one(sample_report) is not None  # the oldest job: the first submitted (ids[0])
    done = api.get("/v1/candidates", params={"status": "done", "verdict": "keep", "include_report": True}).json()
    assert [c["id"] for c in done["candidates"]] == [ids[0]] and done["candidates"][0]["report"] is not None
    assert_problem(api.get("/v1/candidates", params={"cursor": "!!"}), 422)
    huge = base64.urlsafe_b64encode(b"c" + b"9" * 40).decode().rstrip("=")  # beyond a 64-bit id: not a 500
    assert_problem(api.get("/v1/candidates", params={"cursor": huge}), 422)
    assert_problem(api.get("/v1/candidates", params={"status": "lost"}), 422)


def test_cancel_a_queued_candidate_then_conflict_when_done(
    api: httpx.Client, worker: Worker, sample_report: ConditioningReport
) -> None:
    first = api.post("/v1/candidates", json={"spec": spec(1)}).json()
    cancelled = api.delete(f"/v1/candidates/{first['id']}")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert api.delete(f"/v1/candidates/{first['id']}").json()["status"] == "cancelled"  # idempotent
    second = api.post("/v1/candidates", json={"spec": spec(2)}).json()
    worker.finish_one(sample_report)
    assert_problem(api.delete(f"/v1/candidates/{second['id']}"), 409)
    again = api.post("/v1/candidates", json={"spec": spec(1)}).json()
    assert again["id"] == first["id"] and again["status"] == "queued"


def test_study_summary_counts_and_quantiles(
    api: httpx.Client, worker: Worker, sample_report: ConditioningReport
) -> None:
    for width in range(1, 6):
        api.post("/v1/candidates", json={"spec": spec(width), "options": {"study": "q"}})
    for score in (1.0, 2.0, 3.0, 4.0):
        worker.finish_one(
            sample_report.model_copy(update={"score": score, "verdict": "keep" if score > 1 else "prune"})
        )
    summary = api.get("/v1/studies/q/summary", params=[("q", 0.5), ("q", 0.25)]).json()
    assert summary["total"] == 5 and summary["counts"]["done"] == 4 and summary["counts"]["queued"] == 1
    assert summary["verdicts"] == {"keep": 3, "prune": 1}
    assert summary["scores"]["quantiles"] == {"0.5": 2.5, "0.25": 1.75} and summary["scores"]["mean"] == 2.5
    assert api.get("/v1/studies/nobody/summary").json()["total"] == 0
    assert_problem(api.get("/v1/studies/q/summary", params={"q": 1.5}), 422)
    signed = api.get("/v1/studies/q/summary", params=[("q", "-0"), ("q", "0")]).json()
    assert signed["scores"]["quantiles"] == {"0.0": 1.0}  # -0 is the quantile 0, not a key "-0.0" beside it


def test_a_study_named_as_long_as_optuna_allows_is_stored_and_summarised(api: httpx.Client) -> None:
    """Optuna names studies in up to 512 characters; at 200 a gate on such a study failed every
    check (and PostgreSQL would refuse a longer value than its column)."""
    study = "s" * 512
    created = api.post("/v1/candidates", json={"spec": spec(), "options": {"study": study, "trial": 3}})
    assert created.status_code == 202, created.text
    assert api.get(f"/v1/studies/{study}/summary").json()["total"] == 1
    listed = api.get("/v1/candidates", params={"study": study}).json()
    assert [item["id"] for item in listed["candidates"]] == [created.json()["id"]]


def test_a_study_named_with_a_line_break_is_summarised_under_one_metrics_label(api: httpx.Client) -> None:
    """Optuna takes any string as a study's name: one with a newline was stored, but the route's
    ``path`` pattern (``.*``) does not match a newline, so its summary was a 404; and the study
    route was counted under two labels, "{study}" and "{study:path}"."""
    for study in ("a\nb", "x/\r\ny"):
        created = api.post("/v1/candidates", json={"spec": spec(), "options": {"study": study}})
        assert created.status_code == 202, created.text
        summary = api.get(f"/v1/studies/{quote(study, safe='')}/summary")
        assert summary.status_code == 200 and summary.json()["total"] == 1, summary.text
    api.get("/v1/studies/nobody%0A/summary")  # a 200 with zero counts, under the same label
    labels = set(re.findall(r'route="(/v1/studies[^"]*)"', api.get("/metrics").text))
    assert labels == {"/v1/studies/{study}/summary"}


@pytest.mark.parametrize(
    ("query", "path", "message"),
    [
        ("/v1/candidates?study=s1&study=s2", "query.study", "given 2 times; give it once"),
        ("/v1/candidates?limit=1&limit=2", "query.limit", "given 2 times"),
        ("/v1/candidates?studdy=s1", "query.studdy", "unknown parameter (this route takes: cursor, include_report,"),
        ("/v1/candidates?limit=5_0", "query.limit", "'5_0' is not a decimal integer"),
        ("/v1/candidates?limit=%2B5", "query.limit", "'+5' is not a decimal integer"),
        ("/v1/candidates?limit=%205", "query.limit", "' 5' is not a decimal integer"),
        ("/v1/candidates?limit=%D9%A1%D9%A2", "query.limit", "'١٢' is not a decimal integer"),
        ("/v1/studies/s1/summary?q=0.5&q=1_0e-1", "query.q[1]", "'1_0e-1' is not a decimal number"),
        ("/v1/studies/s1/summary?quantile=0.5", "query.quantile", "unknown parameter (this route takes: q)"),
        ("/v1/batches/ab?x=1", "query.x", "unknown parameter (this route takes: none)"),
        ("/v1/schema?x=1", "query.x", "unknown parameter (this route takes: none)"),
        ("/v1/candidates?include_report=yes", "query.include_report", "'yes' is not true or false"),
        ("/v1/candidates?include_report=1", "query.include_report", "'1' is not true or false"),
        ("/v1/candidates?study=", "query.study", "String should have at least 1 character"),
    ],
)
def test_a_query_parameter_given_twice_unknown_or_loosely_written_is_refused_where_it_is(
    api: httpx.Client, query: str, path: str, message: str
) -> None:
    """FastAPI kept the last of a repeated parameter (?study=s1&study=s2 listed s2's candidates)
    and ignored an unknown one (?studdy=s1 listed every study's), and pydantic read 5_0 as 50."""
    problem = assert_problem(api.get(query), 422)
    assert problem["errors"][0]["path"] == path and problem["errors"][0]["message"].startswith(message), problem


def test_query_parameters_as_the_routes_take_them_are_read(api: httpx.Client) -> None:
    api.post("/v1/candidates", json={"spec": spec(), "options": {"study": "s1"}})
    listed = api.get("/v1/candidates?study=s1&limit=1").json()
    assert len(listed["candidates"]) == 1
    assert api.get("/v1/studies/s1/summary?q=.5&q=1e-1&q=0.25").status_code == 200
    assert api.get("/v1/candidates?limit=2&status=queued&include_report=true").status_code == 200
    assert api.get("/v1/candidates?include_report=false").status_code == 200


def test_schema_health_readiness_and_metrics(api: httpx.Client) -> None:
    assert api.get("/v1/schema").json()["$id"].endswith("architecture-spec-v1.1.json")
    assert api.get("/healthz").json() == {"status": "ok"}
    assert api.get("/readyz").json() == {"status": "ready"}
    api.post("/v1/candidates", json={"spec": spec()})
    metrics = api.get("/metrics").text
    assert "preflight_queue_depth 1.0" in metrics and 'preflight_jobs{status="queued"} 1.0' in metrics
    assert 'route="/v1/candidates"' in metrics and "preflight_tuning_seconds_count" in metrics
    assert api.get("/openapi.json").json()["paths"]["/v1/candidates"]["post"]


def test_readyz_is_503_when_migrations_are_missing(tmp_path: Any, make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(f"sqlite:///{tmp_path / 'empty.db'}", check_migrations=False)
    with live_server(settings, migrate=False) as url:
        response = httpx.get(url + "/readyz")
        problem = assert_problem(response, 503)
        assert "preflight db upgrade" in problem["detail"]
        assert response.headers["retry-after"] == "1"  # as every 503 (docs/service.md); it had none
        assert httpx.head(url + "/readyz").status_code == 503


def test_the_health_checks_answer_head_as_monitors_probe(sqlite_api: httpx.Client) -> None:
    """HEAD got 405 (Allow: GET); load balancers and monitors probe with HEAD."""
    for path in ("/healthz", "/readyz"):
        response = sqlite_api.head(path)
        assert response.status_code == 200 and response.content == b"", (path, response.status_code)


def test_tokens_are_required_beyond_localhost_or_when_asked(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    assert Settings(host="0.0.0.0", require_auth=False).auth_required
    assert not Settings(host="127.0.0.1").auth_required
    engine = make_engine(sqlite_url)
    sessions = make_sessionmaker(engine)
    with session_scope(sessions, write=True) as session:
        token = create_token(session, name="ci").token
    with live_server(make_settings(sqlite_url, require_auth=True)) as url, httpx.Client(base_url=url) as client:
        problem = assert_problem(client.post("/v1/candidates", json={"spec": spec()}), 401)
        assert problem["type"].endswith("/unauthorized")
        assert_problem(client.get("/v1/candidates"), 401).get("detail")
        assert client.get("/v1/candidates").headers["www-authenticate"].startswith("Bearer")
        assert_problem(client.get("/v1/candidates", headers={"authorization": "Bearer pf_wrong"}), 401)
        assert_problem(client.get("/v1/candidates", headers={"authorization": f"Basic {token}"}), 401)
        assert_problem(client.get("/metrics"), 401)
        assert_problem(client.get("/v1/schema"), 401)  # every /v1 route, the schema too
        good = {"authorization": f"Bearer {token}"}
        assert client.get("/v1/schema", headers=good).json()["$id"].endswith("architecture-spec-v1.1.json")
        assert client.post("/v1/candidates", json={"spec": spec()}, headers=good).status_code == 202
        tab = {"authorization": f"Bearer\t{token}"}  # any whitespace after the scheme: read as no token before
        assert client.get("/v1/candidates", headers=tab).status_code == 200
        for route in ("/v1/candidates", "/v1/schema"):  # two Authorization headers: the first acted, in silence
            twice = [("authorization", f"Bearer {token}"), ("authorization", "Bearer pf_wrong")]
            problem = assert_problem(client.get(route, headers=twice), 400)
            assert problem["errors"][0]["path"] == "header.authorization", problem
        twice = [("authorization", "Bearer pf_wrong"), ("authorization", f"Bearer {token}")]
        for route, body in (("/v1/candidates", {"spec": spec()}), ("/v1/batches", {"x": [[1.0], [2.0]]})):
            problem = assert_problem(client.post(route, json=body, headers=twice), 400)  # checked before the body
            assert problem["errors"][0]["path"] == "header.authorization", problem
        assert client.get("/healthz").status_code == 200
        with session_scope(sessions, write=True) as session:
            assert len(revoke_token(session, name="ci")) == 1
        assert_problem(client.get("/v1/candidates", headers=good), 401)
    engine.dispose()


def test_a_request_with_a_body_is_refused_for_its_token_before_the_body_is_read(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    """FastAPI parses a body before the route's dependencies run: a caller without a token had a
    malformed body answered 422 (and a large one decoded) before its 401."""
    engine = make_engine(sqlite_url)
    with session_scope(make_sessionmaker(engine), write=True) as session:
        token = create_token(session, name="ci").token
    engine.dispose()
    json_type = {"content-type": "application/json"}
    with live_server(make_settings(sqlite_url, require_auth=True)) as url, httpx.Client(base_url=url) as client:
        for path in ("/v1/candidates", "/v1/batches"):
            for headers in ({}, {"authorization": "Bearer pf_wrong"}, {"authorization": f"Basic {token}"}):
                problem = assert_problem(client.post(path, content=b"{bad", headers=json_type | headers), 401)
                assert problem["type"].endswith("/unauthorized")
            good = json_type | {"authorization": f"bearer  {token}"}  # the scheme in any case, as before
            assert_problem(client.post(path, content=b"{bad", headers=good), 422)
        body = {"spec": spec()}
        assert client.post("/v1/candidates", json=body, headers={"authorization": f"Bearer {token}"}).status_code == 202


def test_a_request_answered_before_routing_is_timed_under_the_route_its_path_names(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    """The middlewares that answer before the router runs (a 401 before the body is read, a 415)
    left no route in the scope, and their requests were all labelled "unmatched"."""
    engine = make_engine(sqlite_url)
    with session_scope(make_sessionmaker(engine), write=True) as session:
        token = create_token(session, name="ci").token
    engine.dispose()
    auth = {"authorization": f"Bearer {token}"}
    with live_server(make_settings(sqlite_url, require_auth=True)) as url, httpx.Client(base_url=url) as client:
        assert_problem(client.post("/v1/candidates", json={"spec": spec()}), 401)
        assert_problem(client.post("/v1/batches", content=b"x", headers=auth | {"content-type": "text/plain"}), 415)
        assert_problem(client.get("/no/such/path", headers=auth), 404)
        metrics = client.get("/metrics", headers=auth).text
    assert 'method="POST",route="/v1/candidates",status="401"' in metrics
    assert 'method="POST",route="/v1/batches",status="415"' in metrics
    assert 'route="unmatched",status="404"' in metrics and "/no/such/path" not in metrics  # never the raw path


def test_behind_a_proxy_at_a_path_prefix_the_api_checks_and_labels_requests_by_their_route(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    """Under ``root_path`` uvicorn keeps the prefix in the request's path: the token check before the
    body is read (``/v1/`` only) let a malformed body answer 422 before its 401, and the answers
    given before routing were labelled "unmatched" and a 405 named one method, as if no route
    matched."""
    engine = make_engine(sqlite_url)
    with session_scope(make_sessionmaker(engine), write=True) as session:
        token = create_token(session, name="ci").token
    engine.dispose()
    auth, json_type = {"authorization": f"Bearer {token}"}, {"content-type": "application/json"}
    settings = make_settings(
        sqlite_url, require_auth=True, root_path="/preflight", max_body_bytes=4096, max_batch_body_bytes=64 * 1024
    )
    batch = {"x": [[i / 7, j / 3] for j in range(2) for i in range(300)]}  # about 20 KB: over 4 KB, under 64
    with live_server(settings) as url, httpx.Client(base_url=url) as client:  # the proxy stripped the prefix
        assert client.post("/v1/batches", json=batch, headers=auth).status_code == 201  # the batch's own limit
        problem = assert_problem(client.post("/v1/candidates", content=b"{bad", headers=json_type), 401)
        assert problem["instance"] == "/preflight/v1/candidates"  # the path the caller sent, through the proxy
        assert_problem(client.post("/v1/candidates", content=b"{bad", headers=json_type | auth), 422)
        response = client.request("DELETE", "/v1/candidates", headers=auth)
        assert_problem(response, 405)
        assert set(response.headers["allow"].split(", ")) == {"GET", "HEAD", "POST"}
        metrics = client.get("/metrics", headers=auth).text
        assert "/preflight/openapi.json" in client.get("/docs").text
    assert 'method="POST",route="/v1/candidates",status="401"' in metrics


@pytest.mark.parametrize("prefix", ["preflight", "/preflight/", "/", "/a b", "/x?y=1"])
def test_a_root_path_that_is_not_a_path_prefix_is_refused_naming_the_setting(prefix: str) -> None:
    """uvicorn joins the prefix to each path as given: ``preflight/v1/...`` or ``//v1/...`` would
    match no route, and every request would answer 404."""
    with pytest.raises(ValueError, match="root_path .* is not a path prefix: give it as /name"):
        Settings(root_path=prefix)
    assert Settings(root_path="/team/preflight").root_path == "/team/preflight"


def test_a_token_check_while_the_database_is_down_is_a_503_to_retry_for_a_post_too(
    sqlite_url: str, make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check before the body is read runs outside the app's error handlers: a POST answered 500
    where a GET answered 503 with Retry-After."""
    from sqlalchemy.exc import OperationalError

    from service.api.auth import TokenCache

    def down(self: TokenCache, token: str) -> None:
        raise OperationalError("SELECT api_tokens", {}, Exception("unable to open database file"))

    with live_server(make_settings(sqlite_url, require_auth=True)) as url, httpx.Client(base_url=url) as client:
        monkeypatch.setattr(TokenCache, "caller", down)
        headers = {"authorization": "Bearer pf_any"}
        for response in (
            client.post("/v1/candidates", json={"spec": spec()}, headers=headers),
            client.get("/v1/candidates", headers=headers),
        ):
            problem = assert_problem(response, 503)
            assert problem["type"].endswith("/unavailable") and response.headers["retry-after"] == "1"


def test_a_long_poll_is_refused_once_its_token_is_revoked(
    sqlite_url: str, make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait checked the token once, when it began, and answered 200 up to max_wait_seconds
    after the token was revoked; docs/configuration.md says revocation takes effect within
    token_cache_seconds (0 here). The token is revoked once the wait has read the candidate."""
    from service.api.routes import candidates as routes

    engine = make_engine(sqlite_url)
    sessions = make_sessionmaker(engine)
    with session_scope(sessions, write=True) as session:
        token = create_token(session, name="ci").token
    polling = threading.Event()
    read_once = routes._read_once

    def watched(*args: Any) -> Any:
        polling.set()
        return read_once(*args)

    settings = make_settings(sqlite_url, require_auth=True, max_wait_seconds=600.0)
    with live_server(settings) as url:
        good = {"authorization": f"Bearer {token}"}
        queued = httpx.post(f"{url}/v1/candidates", json={"spec": spec()}, headers=good).json()  # no worker runs
        monkeypatch.setattr(routes, "_read_once", watched)
        answers: list[httpx.Response] = []
        wait_url = f"{url}/v1/candidates/{queued['id']}/wait"
        waiting = threading.Thread(
            target=lambda: answers.append(httpx.get(wait_url, params={"timeout": 600}, headers=good, timeout=900))
        )
        waiting.start()
        assert polling.wait(timeout=300)  # inside the wait, past its first token check
        with session_scope(sessions, write=True) as session:
            assert len(revoke_token(session, name="ci")) == 1
        waiting.join(timeout=900)
        assert_problem(answers[0], 401)  # not a 200 at the end of the 600 s wait
    engine.dispose()


def test_many_concurrent_cancels_do_not_starve_the_thread_pool(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    """On SQLite a write holds the process's write lock; cancels (writes) outnumbering the
    API's threads must still all be answered, and reads after them too."""
    settings = make_settings(sqlite_url, api_threads=2)
    with live_server(settings) as url, httpx.Client(base_url=url, timeout=20) as client:
        body = {
            "specs": [
                {"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": w}]}]} for w in range(1, 13)
            ]
        }
        ids = [c["id"] for c in client.post("/v1/candidates", json=body).json()["candidates"]]
        statuses: list[int] = []

        def cancel(candidate_id: int) -> None:
            statuses.append(httpx.delete(f"{url}/v1/candidates/{candidate_id}", timeout=20).status_code)

        threads = [threading.Thread(target=cancel, args=(i,)) for i in ids]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert sorted(statuses) == [200] * len(ids)
        assert all(client.get(f"/v1/candidates/{i}").json()["status"] == "cancelled" for i in ids)


LINEAR = {"type": "linear", "out": 2}
VALID = {"input_shape": [4], "blocks": [{"layers": [LINEAR]}]}


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/candidates", {"spec": {"name": "a\u0000b", **VALID}}),
        ("POST", "/v1/candidates", {"spec": {"name": "a\ud800", **VALID}}),
        ("POST", "/v1/candidates", {"spec": {**VALID, "blocks": [{"name": "\u0000", "layers": [LINEAR]}]}}),
        ("POST", "/v1/candidates", {"spec": VALID, "options": {"study": "s\u0000"}}),
        ("POST", "/v1/candidates", {"spec": VALID, "options": {"study": "\udfff"}}),
        ("GET", "/v1/studies/a%00b/summary", None),
        ("GET", "/v1/batches/a%00b", None),
        ("GET", "/v1/candidates?study=%00", None),
        ("GET", "/v1/candidates?verdict=a%00", None),
    ],
)
def test_nul_characters_and_lone_surrogates_are_refused_not_a_server_error(
    api: httpx.Client, method: str, path: str, body: Any
) -> None:
    content = None if body is None else json.dumps(body).encode()  # ensure_ascii: a lone surrogate as \\ud800
    response = api.request(method, path, content=content, headers={"content-type": "application/json"})
    assert response.status_code in (404, 422), (response.status_code, response.text)
    if response.status_code == 422:
        assert_problem(response, 422)


def test_a_spec_with_thousands_of_faults_gets_a_bounded_problem(sqlite_api: httpx.Client) -> None:
    bad = {"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": "x" * 200}]} for _ in range(500)]}
    response = sqlite_api.post("/v1/candidates", json={"spec": bad})
    problem = assert_problem(response, 422)
    assert len(response.content) < 20_000, len(response.content)
    assert len(problem["errors"]) <= 51 and "more (see errors)" in problem["detail"]


@pytest.mark.parametrize(
    "options",
    [
        {f"unknown_{i}": 1 for i in range(5_000)},  # each key was listed, in the detail and in errors
        {"thresholds": {f"k{i}": 1.0 for i in range(5_000)}},  # pydantic's issues, each listed
        {"data": [[0.0] * 100] * 100},  # the value was echoed whole
    ],
    ids=["unknown-keys", "invalid-values", "data-not-an-id"],
)
def test_options_with_thousands_of_faults_get_a_bounded_problem(sqlite_api: httpx.Client, options: Any) -> None:
    response = sqlite_api.post("/v1/candidates", json={"spec": {}, "options": options})
    problem = assert_problem(response, 422)
    assert len(response.content) < 20_000, len(response.content)
    assert len(problem.get("errors", [])) <= 51 and problem["errors"][0]["path"].startswith("options.")


def test_the_docs_render_offline_from_assets_the_app_serves(sqlite_api: httpx.Client) -> None:
    """/docs and /redoc point at Swagger UI and ReDoc files the app serves itself (no CDN)."""
    for page, asset_name in (("/docs", "swagger-ui-bundle.js"), ("/redoc", "redoc.standalone.js")):
        html = sqlite_api.get(page).text
        assert "cdn.jsdelivr" not in html and "unpkg.com" not in html
        asset = re.search(r'src="([^"]*' + re.escape(asset_name) + ')"', html)
        assert asset is not None, html
        served = sqlite_api.get(asset.group(1))
        assert served.status_code == 200 and len(served.content) > 100_000  # the library itself


def test_the_openapi_declares_the_bearer_scheme_and_problem_json_errors(sqlite_api: httpx.Client) -> None:
    spec = sqlite_api.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["HTTPBearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "an API token: `preflight token create NAME`",
    }
    submit = spec["paths"]["/v1/candidates"]["post"]
    assert submit["security"] == [{"HTTPBearer": []}]
    errors = {code: response for code, response in submit["responses"].items() if code[0] in "45"}
    assert errors and all(list(r["content"]) == ["application/problem+json"] for r in errors.values())
    assert "415" in errors and "415" in spec["paths"]["/v1/batches"]["post"]["responses"]  # the middleware's refusal
    assert "security" not in spec["paths"]["/healthz"]["get"]
    for path, item in spec["paths"].items():  # the batch and study routes listed pydantic's 422 and no 401
        for method, operation in item.items():
            if operation.get("security"):  # behind the token
                assert "401" in operation["responses"], (method, path)
            for code, response in operation["responses"].items():
                if code[0] in "45":
                    assert list(response["content"]) == ["application/problem+json"], (method, path, code)


def test_an_integer_longer_than_python_reads_is_refused_at_its_place_not_with_sys_advice(
    sqlite_api: httpx.Client,
) -> None:
    """Python refuses to convert an integer of over 4300 digits; its message told the caller to
    call ``sys.set_int_max_str_digits``."""
    for path, body in [
        ("/v1/batches", '{"x": [[1, ' + "9" * 5000 + "], [2, 3]]}"),
        ("/v1/candidates", '{"spec": {"input_shape": [' + "9" * 5000 + "]}}"),
    ]:
        problem = assert_problem(sqlite_api.post(path, content=body), 422)
        message = problem["errors"][0]["message"]
        assert message.startswith("invalid JSON at line 1, column ") and message.endswith(
            "a number of 5000 digits, more than 4300"
        )
        assert "sys" not in message


def test_a_data_batch_has_a_body_limit_of_its_own(sqlite_url: str, make_settings: Callable[..., Settings]) -> None:
    """2**20 numbers fit no 4 MiB body: a batch is held to ``max_batch_body_bytes``, every other
    request to ``max_body_bytes``, and each 413 names the setting that would let it through."""
    settings = make_settings(sqlite_url, max_body_bytes=4096, max_batch_body_bytes=64 * 1024)
    batch = {"x": [[i / 7, j / 3] for j in range(2) for i in range(300)]}  # about 20 KB: over 4 KB, under 64
    huge = {"x": [[i / 7, j / 3] for j in range(2) for i in range(2000)]}  # about 140 KB, 4000 samples
    assert len(json.dumps(batch)) > 4096
    with live_server(settings) as url, httpx.Client(base_url=url) as client:
        assert client.post("/v1/batches", json=batch).status_code == 201
        assert client.post("/v1/batches/", json=batch).status_code != 413  # the router's redirect, not the 4 KB limit
        refused = assert_problem(client.post("/v1/candidates", json={"spec": spec(name="x" * 5000)}), 413)
        assert "PREFLIGHT_MAX_BODY_BYTES" in refused["detail"]
        too_big = assert_problem(client.post("/v1/batches", json=huge), 413)
        assert "65536 bytes (setting PREFLIGHT_MAX_BATCH_BODY_BYTES)" in too_big["detail"]


def test_every_get_route_answers_head_with_the_gets_status_and_no_body(sqlite_api: httpx.Client) -> None:
    """RFC 9110 9.3.2; FastAPI answered HEAD only where a route named it (the health checks)."""
    created = sqlite_api.post("/v1/candidates", json={"spec": spec()}).json()
    for path in (f"/v1/candidates/{created['id']}", "/v1/candidates", "/v1/schema", "/openapi.json", "/healthz"):
        got, head = sqlite_api.get(path), sqlite_api.head(path)
        assert head.status_code == got.status_code == 200, path
        assert head.content == b"" and head.headers["content-type"] == got.headers["content-type"], path
    missing = sqlite_api.head("/v1/candidates/" + "0" * 32)
    assert missing.status_code == 404 and missing.content == b""


def test_a_405_names_head_wherever_it_names_get(sqlite_api: httpx.Client) -> None:
    for path in ("/healthz", "/docs"):  # documented, and not (the offline docs page)
        response = sqlite_api.post(path)
        assert response.status_code == 405, path
        assert {m.strip() for m in response.headers["allow"].split(",")} == {"GET", "HEAD"}, path

"""Data batches over real HTTP, on SQLite and PostgreSQL: upload once by content, name them in
a submission's options, refuse what does not fit with the JSON path at fault, and condition on
them in the worker (the trainability probe then fits the batch's own labels)."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from service.settings import Settings
from service.testing import live_server

PROBLEM = "application/problem+json"
SPEC = {
    "input_shape": [4],
    "blocks": [
        {"layers": [{"type": "linear", "out": 8}, {"type": "relu"}]},
        {"layers": [{"type": "linear", "out": 3}]},
    ],
}
X = [[float(i + j) / 10 for j in range(4)] for i in range(8)]
Y = [i % 3 for i in range(8)]
TINY = {"steps": 1, "n_vectors": 1, "batch_size": 8, "diagnostics": False, "hessian_iterations": 0, "probe_steps": 3}


@pytest.fixture
def api(db_url: str, make_settings: Callable[..., Settings]) -> Iterator[httpx.Client]:
    with live_server(make_settings(db_url)) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client


def _problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    return response.json()


def test_a_batch_is_stored_once_under_the_hash_of_its_content(api: httpx.Client) -> None:
    first = api.post("/v1/batches", json={"x": X, "y": Y})
    assert first.status_code == 201, first.text
    body = first.json()
    assert body["shape"] == [8, 4] and body["labels"] == "class" and len(body["id"]) == 64
    again = api.post("/v1/batches", json={"y": Y, "x": X})
    assert again.status_code == 200 and again.json() == body
    unlabelled = api.post("/v1/batches", json={"x": X}).json()
    assert unlabelled["id"] != body["id"] and unlabelled["labels"] is None
    assert api.get(f"/v1/batches/{body['id']}").json() == body
    _problem(api.get("/v1/batches/" + "0" * 64), 404)


def test_an_imbalanced_batch_is_stored_with_a_warning_that_names_its_labels(api: httpx.Client) -> None:
    """Class labels far from balanced flatter the probe (its reference is ln C): the batch is
    stored all the same, and the answer (upload and read) says so, on the labels' path."""
    skewed = [0] * 7 + [1]  # entropy 0.54 of ln 2
    stored = api.post("/v1/batches", json={"x": X, "y": skewed})
    assert stored.status_code == 201, stored.text
    body = stored.json()
    assert body["balance"] == pytest.approx(0.5436, abs=1e-4)
    assert len(body["warnings"]) == 1 and body["warnings"][0].startswith("y: the class labels are imbalanced")
    assert api.get(f"/v1/batches/{body['id']}").json() == body
    balanced = api.post("/v1/batches", json={"x": X, "y": Y}).json()
    assert balanced["warnings"] == [] and balanced["balance"] > 0.9
    assert api.post("/v1/batches", json={"x": X}).json()["balance"] is None  # no labels, nothing to weigh


def test_the_client_deletes_a_batch_and_is_told_when_it_holds_none_or_jobs_still_need_it(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    from nas.client import PreflightClient
    from nas.errors import ConflictError, NotFoundError

    with live_server(make_settings(sqlite_url)) as url, PreflightClient(url) as client:
        batch = client.upload_batch(X, Y)
        queued = client.submit(SPEC, {"data": batch})
        with pytest.raises(ConflictError, match="1 queued or running job names data batch"):
            client.delete_batch(batch)
        client.cancel(queued.id)
        client.delete_batch(batch)
        with pytest.raises(NotFoundError, match=f"no data batch with id {batch}"):
            client.delete_batch(batch)
        assert client.upload_batch(X, Y) == batch  # the same content, the same id
        other = client.upload_batch(X)
        assert [item["id"] for item in client.list_batches()] == sorted([batch, other])


def test_the_client_lists_every_page_of_batches(
    sqlite_url: str, make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from nas import client as client_module
    from nas.client import AsyncPreflightClient, PreflightClient

    monkeypatch.setattr(client_module, "_BATCHES_PAGE", 2)
    with live_server(make_settings(sqlite_url)) as url, PreflightClient(url) as client:
        ids = [client.upload_batch([[v + shift for v in row] for row in X]) for shift in range(5)]
        assert [item["id"] for item in client.list_batches()] == sorted(ids)

        async def listed() -> list[dict[str, Any]]:
            async with AsyncPreflightClient(url) as async_client:
                return await async_client.list_batches()

        assert [item["id"] for item in asyncio.run(listed())] == sorted(ids)


def test_the_client_raises_a_batch_warning_for_an_imbalanced_upload(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    from nas.client import PreflightClient
    from nas.errors import BatchWarning

    with live_server(make_settings(sqlite_url)) as url, PreflightClient(url) as client:
        with pytest.warns(BatchWarning, match="imbalanced"):
            batch = client.upload_batch(X, [0] * 7 + [1])
        with warnings.catch_warnings():
            warnings.simplefilter("error", BatchWarning)
            client.upload_batch(X, Y)
    assert len(batch) == 64


def test_a_batch_given_as_one_tensor_per_sample_uploads_as_the_stacked_batch(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    """A list of per-sample tensors or arrays (what indexing a dataset gives) and 0-d label tensors
    are the same batch as the stacked arrays: the same content, so the same id. JSON could not
    carry them as they were."""
    import numpy as np
    import torch

    from nas.client import PreflightClient

    with live_server(make_settings(sqlite_url)) as url, PreflightClient(url) as client:
        stacked = client.upload_batch(torch.tensor(X), torch.tensor(Y))  # float32
        per_sample = client.upload_batch([torch.tensor(row) for row in X], [torch.tensor(label) for label in Y])
        arrays = client.upload_batch(tuple(np.array(row) for row in X), Y)  # float64: the lists' values
        lists = client.upload_batch(X, Y)
    assert per_sample == stacked and arrays == lists


def test_the_client_writes_float32_in_its_shortest_form_so_2_to_the_20_numbers_fit(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    """The client wrote each float32 as float64's repr (``0.10000000149011612``), about 20 bytes a
    number: a 2**20-number batch, the documented most, was a 413. In float32's shortest form it
    is about 12 bytes a number, and the service reads back every value exactly (the id is of the
    content in float32: computed here from the array itself)."""
    import numpy as np
    import torch

    from nas.client import PreflightClient
    from service.store.data_batches import batch_id

    x = torch.randn(256, 4096, generator=torch.Generator().manual_seed(0))  # 2**20 float32 numbers
    settings = make_settings(sqlite_url, max_batch_body_bytes=14 * 2**20)
    with live_server(settings) as url, PreflightClient(url) as client:
        stored = client.upload_batch(x)
        assert stored == batch_id({"values": x.numpy().astype(np.float64).tolist()}, None, None)
        small = x[:4, :8]
        assert client.upload_batch(small) == client.upload_batch(small.double())
        assert client.upload_batch(small.to(torch.bfloat16)) == client.upload_batch(small.to(torch.bfloat16).float())


def test_the_async_client_uploads_the_same_batch_under_the_same_id(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    """It writes the arrays out in a thread (about a second per 2**20 numbers), not on the loop."""
    import asyncio

    import torch

    from nas.client import AsyncPreflightClient, PreflightClient
    from nas.errors import BatchRejectedError

    x = torch.tensor(X, dtype=torch.float32) / 3

    async def main(url: str) -> str:
        async with AsyncPreflightClient(url) as client:
            with pytest.raises(BatchRejectedError):
                await client.upload_batch([[1.0, 2.0]])
            return await client.upload_batch(x, torch.tensor(Y))

    with live_server(make_settings(sqlite_url)) as url, PreflightClient(url) as client:
        assert asyncio.run(main(url)) == client.upload_batch(x.double(), Y)


def test_the_client_names_what_is_wrong_with_a_batch_before_and_after_sending_it(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    from nas.client import PreflightClient
    from nas.errors import BatchRejectedError, SpecRejectedError

    with live_server(make_settings(sqlite_url)) as url, PreflightClient(url) as client:
        with pytest.raises(TypeError, match=r"^x is an array of samples .* not a dict: call upload_batch\(x, y\)"):
            client.upload_batch({"x": X, "y": Y})  # was "Object of type ndarray is not JSON serializable"
        with pytest.raises(BatchRejectedError, match=r"x: expected 2 to 4096 samples, got 1") as refused:
            client.upload_batch([[1.0, 2.0]])  # was a SpecRejectedError, for a batch
        assert isinstance(refused.value, SpecRejectedError) and refused.value.problem["errors"][0]["path"] == "x"


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        ({"x": [[1.0, 2.0], [3.0]]}, "x[1]"),  # ragged
        ({"x": [[1.0, "a"], [3.0, 4.0]]}, "x[0][1]"),
        ({"x": [[1.0, 2.0]]}, "x"),  # one sample
        ({"x": [[1.0, 2.0], [3.0, 4.0]], "y": [0]}, "y"),  # one label for two samples
        ({"x": [[1.0, 2.0], [3.0, 4.0]], "y": [0, -1]}, "y"),
        ({"x": [[1.0, 2.0], [3.0, 4.0]], "z": 1}, "z"),
        ({"y": [0, 1]}, "x"),
        ({"x": [[[[[[[1.0]]]]]], [[[[[[1.0]]]]]]]}, "x[0][0][0][0][0][0]"),  # nested too deep
        ({"x": [[1.0, 10**400], [3.0, 4.0]]}, "x[0][1]"),  # a 401-digit integer: was an OverflowError, a 500
        ({"x": [[1.0, 2.0], [3.0, 4.0]], "y": [0, 10**30]}, "y[1]"),  # a label beyond 2**53
        ({"x": [[-(2**63), 1], [3, 4]]}, "x[0][0]"),  # int64's minimum: was stored
        ({"x": [[2**60, 1.0], [3.0, 4.0]]}, "x[0][0]"),  # an integer beyond 2**53 among floats: was stored
        ({"x": [[1.0, 2.0], [3.0, -1e39]]}, "x[1][1]"),  # infinite in float32, where the engine reads it: was stored
        ({"x": [[0.0, 0.0]] * 4, "y": [0, 1, 0, 1]}, "x"),  # one sample repeated: was stored, and every job pruned
    ],
)
def test_a_bad_batch_is_refused_with_the_json_path_at_fault(
    api: httpx.Client, payload: dict[str, Any], path: str
) -> None:
    problem = _problem(api.post("/v1/batches", json=payload), 422)
    assert problem["errors"][0]["path"] == path, problem


def test_an_unknown_key_holding_a_lone_surrogate_is_refused_naming_it_not_a_500(api: httpx.Client) -> None:
    """JSON may escape a lone surrogate (``\\ud800``), which UTF-8 cannot encode: the problem that
    quotes such a key was itself unencodable, a 500."""
    body = b'{"x": [[1.0], [2.0]], "\\ud800z": 1}'
    problem = _problem(api.post("/v1/batches", content=body, headers={"content-type": "application/json"}), 422)
    # a JSON path, as the spec's keys are named (it was the bare key)
    path = '["\\ud800z"]'
    assert problem["errors"][0]["path"] == path
    assert problem["detail"] == f"{path}: not valid Unicode text (the key holds a lone surrogate): no field is named so"


def test_a_submission_naming_a_missing_or_misfit_batch_is_refused_and_nothing_is_queued(api: httpx.Client) -> None:
    missing = _problem(api.post("/v1/candidates", json={"spec": SPEC, "options": {"data": "f" * 64}}), 422)
    assert missing["errors"][0]["path"] == "options.data"
    malformed = _problem(api.post("/v1/candidates", json={"spec": SPEC, "options": {"data": "not-an-id"}}), 422)
    assert malformed["errors"][0]["path"] == "options.data"
    wide = api.post("/v1/batches", json={"x": [[0.0] * 5, [1.0] * 5]}).json()["id"]
    body = {"specs": [SPEC, {**SPEC, "input_shape": [5]}], "options": {"data": wide}}
    misfit = _problem(api.post("/v1/candidates", json=body), 422)
    assert misfit["errors"][0]["path"] == "specs[0].input_shape"
    assert api.get("/v1/candidates", params={"limit": 10}).json()["candidates"] == []


def test_a_batch_size_that_takes_only_identical_samples_is_refused_at_submission(api: httpx.Client) -> None:
    """The upload passes (a later sample differs), but a job conditions on the first ``batch_size``
    samples: they were all the same, and the job failed in the worker."""
    x = [[0.5, 0.5, 0.5, 0.5]] * 5 + [[1.0, 0.0, 1.0, 0.0]] * 3
    batch = api.post("/v1/batches", json={"x": x, "y": Y}).json()["id"]
    problem = _problem(
        api.post("/v1/candidates", json={"spec": SPEC, "options": {"data": batch, "batch_size": 5}}), 422
    )
    assert problem["errors"][0]["path"] == "options.batch_size", problem
    assert "first 5 samples are all the same" in problem["errors"][0]["message"]
    assert api.get("/v1/candidates", params={"limit": 10}).json()["candidates"] == []
    reaching = api.post("/v1/candidates", json={"spec": SPEC, "options": {"data": batch, "batch_size": 6}})
    assert reaching.status_code in (200, 201, 202), reaching.text


@pytest.mark.parametrize(
    ("y", "message"),
    [
        ([i % 5 for i in range(8)], r"class labels must be in \[0, 2\] for 3 logits, but range over \[0, 4\]"),
        ([[float(i), 0.0] for i in range(8)], r"2 float target\(s\) per sample, but the network outputs \[3\]"),
        (
            [float(i % 3) for i in range(8)],
            r"^the data batch's 'y': 1 float target\(s\) per sample, but the network outputs \[3\] \(3 per sample\) "
            r"\(the labels arrived as floats such as 1\.0; class labels are integers\)$",
        ),
    ],
    ids=["label-beyond-the-logits", "float-targets-of-another-width", "class-labels-sent-as-floats"],
)
def test_a_submission_whose_labels_do_not_fit_the_network_output_is_refused_at_its_head(
    api: httpx.Client, y: list[Any], message: str
) -> None:
    batch = api.post("/v1/batches", json={"x": X, "y": y}).json()["id"]
    problem = _problem(api.post("/v1/candidates", json={"specs": [SPEC], "options": {"data": batch}}), 422)
    assert problem["errors"][0]["path"] == "specs[0].blocks[1]", problem
    assert re.search(message, problem["errors"][0]["message"]), problem
    assert api.get("/v1/candidates", params={"limit": 10}).json()["candidates"] == []
    fits = api.post("/v1/batches", json={"x": X, "y": [[float(i)] * 3 for i in range(8)]}).json()["id"]
    assert api.post("/v1/candidates", json={"spec": SPEC, "options": {"data": fits}}).status_code in (200, 201, 202)


def test_a_network_whose_output_is_no_vector_is_refused_without_labels_for_the_probe(api: httpx.Client) -> None:
    """Without labels the probe draws class labels over a vector of logits: a conv-only network
    was queued, its probe failed inside (a loss of 'spatial targets') and it was kept unscored."""
    body = {"layers": [{"type": "conv2d", "out": 2, "kernel": 3}]}
    conv = {"input_shape": [1, 4, 4], "blocks": [body]}
    classifier = {**conv, "blocks": [body, {"layers": [{"type": "global_avgpool"}, {"type": "linear", "out": 3}]}]}
    images = [[[[float(i + j) / 10] * 4 for j in range(4)]] for i in range(8)]
    unlabelled = api.post("/v1/batches", json={"x": images}).json()["id"]
    for options in ({}, {"data": unlabelled}):
        problem = _problem(api.post("/v1/candidates", json={"specs": [classifier, conv], "options": options}), 422)
        assert [issue["path"] for issue in problem["errors"]] == ["specs[1].blocks[0]"], problem
        assert "output has shape [2, 4, 4], not a vector of class scores" in problem["errors"][0]["message"]
    assert api.get("/v1/candidates", params={"limit": 10}).json()["candidates"] == []
    targets = [[[[0.5] * 4] * 4] * 2 for _ in range(8)]  # float targets of the output's shape: the probe fits them
    labelled = api.post("/v1/batches", json={"x": images, "y": targets}).json()["id"]
    for options in ({"probe_steps": 0}, {"data": labelled}):
        assert api.post("/v1/candidates", json={"spec": conv, "options": options}).status_code in (200, 201, 202)


def test_uploading_a_batch_stored_before_labels_were_described_brings_its_shape_up_to_date(
    api: httpx.Client, db_url: str
) -> None:
    """A batch stored without the labels' shape and class count skips the labels check; the
    same content uploaded again (200, the same id) records them, and the check applies."""
    from sqlalchemy import update

    from service.store.db import make_engine
    from service.store.models import DataBatch

    y = [i % 5 for i in range(8)]
    batch = api.post("/v1/batches", json={"x": X, "y": y}).json()["id"]
    engine = make_engine(db_url)
    with engine.begin() as connection:
        connection.execute(
            update(DataBatch).where(DataBatch.id == batch).values(shape={"x": [8, 4], "labels": "class"})
        )
    engine.dispose()
    legacy = api.post("/v1/candidates", json={"spec": SPEC, "options": {"data": batch, **TINY}})
    assert legacy.status_code in (200, 201, 202), legacy.text
    again = api.post("/v1/batches", json={"x": X, "y": y})
    assert again.status_code == 200 and again.json()["id"] == batch
    problem = _problem(api.post("/v1/candidates", json={"spec": SPEC, "options": {"data": batch, "seed": 1}}), 422)
    assert problem["errors"][0]["path"] == "spec.blocks[1]", problem


def test_the_batch_is_part_of_the_cache_key(api: httpx.Client) -> None:
    a = api.post("/v1/batches", json={"x": X, "y": Y}).json()["id"]
    b = api.post("/v1/batches", json={"x": X}).json()["id"]
    with_a = api.post("/v1/candidates", json={"spec": SPEC, "options": {"data": a}}).json()
    again = api.post("/v1/candidates", json={"spec": SPEC, "options": {"data": a}}).json()
    with_b = api.post("/v1/candidates", json={"spec": SPEC, "options": {"data": b}}).json()
    without = api.post("/v1/candidates", json={"spec": SPEC}).json()
    assert again["id"] == with_a["id"] and again["cached"]
    assert len({with_a["id"], with_b["id"], without["id"]}) == 3


def test_the_synthetic_batch_option_is_keyed_only_where_no_data_is_given(api: httpx.Client) -> None:
    """``synthetic_inputs`` chooses the batch drawn without data: with a data batch it computes
    nothing different, so it makes no second job; without one it does."""
    a = api.post("/v1/batches", json={"x": X, "y": Y}).json()["id"]
    plain = api.post("/v1/candidates", json={"spec": SPEC, "options": {"data": a}}).json()
    pink = api.post("/v1/candidates", json={"spec": SPEC, "options": {"data": a, "synthetic_inputs": "pink"}}).json()
    assert pink["id"] == plain["id"] and pink["cached"] is True
    white = api.post("/v1/candidates", json={"spec": SPEC}).json()
    drawn = api.post("/v1/candidates", json={"spec": SPEC, "options": {"synthetic_inputs": "pink"}}).json()
    assert drawn["id"] != white["id"] and drawn["cached"] is False


@pytest.mark.slow  # a subprocess or a real worker loop: several seconds
def test_the_worker_conditions_and_probes_on_the_uploaded_batch(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    from nas.client import PreflightClient

    with live_server(make_settings(sqlite_url), embedded_worker=True) as url, PreflightClient(url) as client:
        batch = client.upload_batch(X, Y)
        given = client.condition(SPEC, {**TINY, "data": batch}, timeout=90)
        gaussian = client.condition(SPEC, TINY, timeout=90)
    assert given.status == "done" and gaussian.status == "done", (given, gaussian)
    report, baseline = given.require_report(), gaussian.require_report()  # typed ConditioningReports
    assert report.tuning.probe is not None and baseline.tuning.probe is not None
    assert report.environment.data == "given" and report.tuning.probe.targets == "given"
    assert baseline.environment.data == "gaussian" and baseline.tuning.probe.targets == "random"

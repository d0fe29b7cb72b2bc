"""Data batches in the store: parsing refuses a bad upload with a plain :class:`InvalidBatch`
naming the JSON path (the API turns it into a 422), and, on PostgreSQL, two uploads of the
same content racing to insert it both get the one row, two owners letting go of one batch at once
leave no content behind, and an upload racing the last hold's delete stores the content anew."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

X = [[float(i + j) / 10 for j in range(4)] for i in range(8)]
Y = [i % 3 for i in range(8)]


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ([1, 2], "$"),
        ({"x": X, "z": 1}, "z"),
        ({"y": Y}, "x"),
        ({"x": [[1.0], [1.0, 2.0]]}, "x[1]"),
        ({"x": X, "y": [0, 1]}, "y"),
        ({"x": [[1.5, 2.0, 0.0]] * 3}, "x"),  # one sample repeated
        ({"x": [[1.0, 2.0], [1.0 + 1e-9, 2.0]]}, "x"),  # the same in float32, where the engine reads it
        ({"x": [[[1.0]], [[2.0]]]}, "x"),  # samples of rank 2 fit no spec: was stored
        ({"x": [[[[[1.0]]]], [[[[2.0]]]]]}, "x"),  # samples of rank 4
    ],
)
def test_parse_raises_invalid_batch_with_the_json_path(body: Any, path: str) -> None:
    from service.store import data_batches
    from service.store.errors import InvalidBatch

    with pytest.raises(InvalidBatch) as caught:
        data_batches.parse(body)
    assert caught.value.path == path and str(caught.value) == f"{path}: {caught.value.message}"


def test_samples_that_fit_no_input_shape_are_refused_saying_which_shapes_do() -> None:
    from service.store import data_batches
    from service.store.errors import InvalidBatch

    with pytest.raises(InvalidBatch, match=r"samples of shape \[1, 1\] fit no spec: .* \[N, D\] or \[N, C, H, W\]"):
        data_batches.parse({"x": [[[1.0]], [[2.0]]]})
    assert data_batches.parse({"x": [[[[1.0]]], [[[2.0]]]]})[2]["x"] == [2, 1, 1, 1]


def _id(body: dict[str, Any]) -> str:
    from service.store import data_batches

    x, y, shape = data_batches.parse(body)
    return data_batches.batch_id(x, y, shape["labels"])


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ({"x": [[1], [2]]}, {"x": [[1.0], [2.0]]}),
        ({"x": [[-0.0], [1.0]]}, {"x": [[0.0], [1.0]]}),
        ({"x": [[0.1], [0.7]]}, {"x": [[float(np.float32(0.1))], [float(np.float32(0.7))]]}),
        ({"x": X, "y": [0.5] * 8}, {"x": X, "y": [float(np.float32(0.5))] * 8}),
        ({"x": X, "y": [-0.0] * 8}, {"x": X, "y": [0] * 4 + [0.0] * 4}),
    ],
    ids=["int-and-float", "minus-zero", "float64-and-its-float32", "float-targets", "float-targets-minus-zero"],
)
def test_one_content_as_the_engine_reads_it_is_one_batch(a: dict[str, Any], b: dict[str, Any]) -> None:
    """The engine reads a batch in float32: ids of the raw JSON made each of these pairs two
    batches, two ids and two jobs of the same computation. The engine's reading of the pair is
    the same too (``worker.engine.inputs.batch``), so the id follows the engine."""
    import torch

    from nas import parse_spec
    from nas.options import ConditionOptions
    from worker.engine.inputs import batch

    assert _id(a) == _id(b)
    spec = parse_spec({"input_shape": [len(a["x"][0])], "blocks": [{"layers": [{"type": "linear", "out": 1}]}]})
    read = [batch(spec, body, ConditionOptions(), torch.device("cpu")) for body in (a, b)]
    for first, second in zip(read[0][:2], read[1][:2], strict=True):
        if first is None or second is None:
            assert first is second
        else:
            assert first.dtype == second.dtype and torch.equal(first, second)


def test_content_the_engine_reads_differently_is_another_batch() -> None:
    ids = {
        _id({"x": X}),
        _id({"x": X, "y": Y}),  # labelled
        _id({"x": X, "y": [float(v) for v in Y]}),  # the same numbers as float targets
        _id({"x": [row[:2] for row in X] * 2}),  # the same numbers in another shape
        _id({"x": [[v + 1e-3 for v in row] for row in X]}),
    }
    assert len(ids) == 5


@pytest.mark.parametrize(
    ("y", "warning"),
    [
        ([0] * 8, r"^y: every label is class 0: "),  # one class: no balance was computed, no warning given
        ([1] * 8, r"^y: every label is class 1: "),  # was read as imbalance over two classes
        ([0.0, 1.0] * 4, r"^y: every label is a whole number sent as a float \(such as 1\.0\)"),
        ([1.0000000001, 0.0] * 4, r"^y: every label is a whole number sent as a float"),  # so in float32, like its id
        ([0, 1.0] * 4, r"^y: every label is a whole number sent as a float"),
        (
            [0, 2**31] * 4,
            r"imbalanced \(their entropy is 0\.03 of ln 2147483649; only 2 of the classes 0 to 2147483648 occur",
        ),
        (
            [0] * 64 + [1] * 64,
            r"^y: the first 64 samples, the ones a job conditions on at the default batch_size, are imbalanced",
        ),
    ],
    ids=[
        "all-zero",
        "all-one",
        "whole-floats",
        "whole-in-float32",
        "int-and-float",
        "huge-class-id",
        "sorted-by-class",
    ],
)
def test_labels_that_make_the_report_read_wrong_are_stored_with_a_warning_that_says_why(
    y: list[Any], warning: str
) -> None:
    from service.store import data_batches

    x = [[float(i), float(i % 3)] for i in range(len(y))]
    warnings = data_batches.label_warnings(data_batches.parse({"x": x, "y": y})[2])
    assert len(warnings) == 1 and re.search(warning, warnings[0]), warnings


@pytest.mark.parametrize(
    "y",
    [[0, 1] * 64, [0.25, 1.5] * 4, [[0.5, 1.0]] * 8, [[1.0, 0.0], [0.0, 1.0]] * 4, [1e9 * i for i in range(8)]],
    ids=["classes", "targets", "pairs", "one-hot-targets", "large-whole-targets"],
)
def test_labels_that_read_right_get_no_warning(y: list[Any]) -> None:
    from service.store import data_batches

    x = [[float(i), float(i % 3)] for i in range(len(y))]
    assert data_batches.label_warnings(data_batches.parse({"x": x, "y": y})[2]) == []


@pytest.mark.postgres
def test_an_upload_that_loses_the_insert_race_gets_the_winners_row(pg_url: str, race: Any) -> None:
    """Two transactions store the same batch at once on PostgreSQL: neither saw the other's
    row when it checked, the second insert waits on the first's key and then finds it taken.
    It answers with that row (created False), not an integrity error."""
    from service.store import data_batches
    from service.store.db import make_engine, make_sessionmaker
    from service.store.migrations import upgrade

    upgrade(pg_url)
    engine = make_engine(pg_url)
    x, y, shape = data_batches.parse({"x": X, "y": Y})
    try:
        outcome = race(make_sessionmaker(engine), lambda session: data_batches.store(session, x, y, shape))
    finally:
        engine.dispose()
    assert outcome["first"][1] and outcome["blocked"]  # the first inserted it; the second waited on its key
    assert "error" not in outcome, outcome
    assert outcome["result"] == (data_batches.batch_id(x, y, "class"), False)


def _stored_ids(sessions: Any) -> list[str]:
    from sqlalchemy import select

    from service.store.models import DataBatch

    with sessions() as session:
        return list(session.scalars(select(DataBatch.id)))


@pytest.mark.postgres
def test_two_owners_letting_go_of_a_batch_at_once_take_the_content_with_the_last_hold(pg_url: str, race: Any) -> None:
    """Each delete would see the other's uncommitted hold and keep the content, leaving it held by
    nobody; the second waits on the first's lock of the content row instead, and deletes it."""
    from service.store import data_batches
    from service.store.db import make_engine, make_sessionmaker
    from service.store.owners import Caller

    engine = make_engine(pg_url)
    sessions = make_sessionmaker(engine)
    x, y, shape = data_batches.parse({"x": X, "y": Y})
    key = data_batches.batch_id(x, y, "class")
    owners = iter([Caller(owner_id=1), Caller(owner_id=2)])
    try:
        for owner in (1, 2):
            with sessions.begin() as session:
                data_batches.store(session, x, y, shape, owner_id=owner)
        outcome = race(sessions, lambda session: data_batches.release(session, key, next(owners)))
        assert outcome["first"] is True and outcome["blocked"] and outcome.get("result") is True, outcome
        assert _stored_ids(sessions) == []
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_an_upload_racing_the_last_holds_delete_stores_the_content_anew(pg_url: str, race: Any) -> None:
    """The upload read the content row as there, and its hold then referenced a deleted row (an
    integrity error, a 500); it waits on the delete's lock instead and inserts the content again."""
    from service.store import data_batches
    from service.store.db import make_engine, make_sessionmaker
    from service.store.owners import Caller

    engine = make_engine(pg_url)
    sessions = make_sessionmaker(engine)
    x, y, shape = data_batches.parse({"x": X, "y": Y})
    key = data_batches.batch_id(x, y, "class")
    steps = iter(["release", "upload"])

    def act(session: Any) -> Any:
        if next(steps) == "release":
            return data_batches.release(session, key, Caller(owner_id=1))
        return data_batches.store(session, x, y, shape, owner_id=2)[1]

    try:
        with sessions.begin() as session:
            data_batches.store(session, x, y, shape, owner_id=1)
        outcome = race(sessions, act)
        assert "error" not in outcome, outcome
        assert outcome["first"] is True and outcome["blocked"] and outcome["result"] is True
        assert _stored_ids(sessions) == [key]
        with sessions() as session:
            assert data_batches.shape_of(session, key, Caller(owner_id=2)) == shape
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_an_upload_that_loses_the_insert_race_to_content_deleted_since_stores_it_anew(pg_url: str) -> None:
    """B's insert waits on A's uncommitted row, A commits, and A lets go of the batch before B
    reads the winner's row (here: as B's insert fails). B read it unlocked and found nothing (an
    assertion, a 500), or found it and then held a deleted row (a foreign key violation, found by
    a stress run); it now reads it locked and inserts the content again when it is gone."""
    import threading

    from sqlalchemy import event

    from service.store import data_batches
    from service.store.db import make_engine, make_sessionmaker
    from service.store.owners import Caller

    engine = make_engine(pg_url)
    sessions = make_sessionmaker(engine)
    x, y, shape = data_batches.parse({"x": X, "y": Y})
    key = data_batches.batch_id(x, y, "class")
    released: list[bool] = []

    def release_on_lost_insert(context: Any) -> None:  # in B's thread, as its insert fails
        if not released and "data_batches_pkey" in str(context.original_exception):
            with sessions.begin() as session:
                released.append(data_batches.release(session, key, Caller(owner_id=1)))

    event.listen(engine, "handle_error", release_on_lost_insert)
    outcome: dict[str, Any] = {}

    def upload_b() -> None:
        try:
            with sessions.begin() as session:
                outcome["result"] = data_batches.store(session, x, y, shape, owner_id=2)
        except Exception as exc:
            outcome["error"] = exc

    try:
        first = sessions()
        data_batches.store(first, x, y, shape, owner_id=1)  # inserted, not committed
        racer = threading.Thread(target=upload_b, daemon=True)
        racer.start()
        racer.join(1.0)
        blocked = racer.is_alive()
        first.commit()
        first.close()
        racer.join(30)
        assert blocked and not racer.is_alive()
        assert released == [True] and "error" not in outcome, outcome
        assert outcome["result"] == (key, True)
        assert _stored_ids(sessions) == [key]
        with sessions() as session:
            assert data_batches.shape_of(session, key, Caller(owner_id=2)) == shape
            assert data_batches.shape_of(session, key, Caller(owner_id=1)) is None
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "value",
    [
        [[0.5, 1.0], [2.0, 3.0]],
        [[[1, 2, 3]] * 4] * 5,
        [[1e-3] * 64] * 2,
        [[[[0.0]]]] * 3,
    ],
)
def test_the_numpy_shape_agrees_with_the_walk_on_well_formed_batches(value: Any) -> None:
    from service.store.data_batches import _fast_shape, _shape

    fast = _fast_shape(value)
    assert fast is not None and fast == _shape(value, "x", depth=1)  # depth 1: the walk alone


@pytest.mark.parametrize(
    "value",
    [
        [[1.0, True]],
        [[1, 2], [3]],
        [[1.0, float("nan")]],
        [[2**60, 1]],
        [[-(2**63), 1]],  # np.abs of int64's minimum is itself, negative: it passed as small
        [[2**60, 1.0]],  # among floats numpy makes it a float: it passed
        [[1e39, 1.0]],  # finite in float64, infinite in the engine's float32
        [[1, "2"]],
        [[]],
        [[1.0, None]],
        3.0,
    ],
    ids=[
        "bool",
        "ragged",
        "nan",
        "beyond-2**53",
        "int64-minimum",
        "big-int-among-floats",
        "beyond-float32",
        "string",
        "empty",
        "null",
        "scalar",
    ],
)
def test_anything_off_leaves_the_numpy_path_for_the_walk_that_names_it(value: Any) -> None:
    from service.store.data_batches import _fast_shape

    assert _fast_shape(value) is None

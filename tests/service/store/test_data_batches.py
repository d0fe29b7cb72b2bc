"""Data batches in the store: parsing refuses a bad upload with a plain :class:`InvalidBatch`
naming the JSON path (the API turns it into a 422), and, on PostgreSQL, two uploads of the
same content racing to insert it both get the one row."""

from __future__ import annotations

from typing import Any

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
    ],
)
def test_parse_raises_invalid_batch_with_the_json_path(body: Any, path: str) -> None:
    from service.store import data_batches
    from service.store.errors import InvalidBatch

    with pytest.raises(InvalidBatch) as caught:
        data_batches.parse(body)
    assert caught.value.path == path and str(caught.value) == f"{path}: {caught.value.message}"


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
    row, created = outcome["result"]
    assert (row.id, created) == (data_batches.batch_id(x, y), False)


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

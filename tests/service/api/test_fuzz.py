"""Fuzzing the API from its own OpenAPI document (schemathesis strategies driven by
hypothesis): whatever the input, no answer is a 500, and every error is problem+json."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.api.app import create_app
from service.settings import Settings
from service.testing import live_server

OPERATIONS = [
    (method.upper(), path)
    for path, item in create_app(Settings(database_url="sqlite://")).openapi()["paths"].items()
    for method in item
]


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def fuzz_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A live server on each backend (the PostgreSQL one on this session's migrated database)."""
    if request.param == "sqlite":
        database = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'preflight.db'}"
    else:
        database = str(request.getfixturevalue("postgres_url"))
    config = Settings(database_url=database, max_wait_seconds=0.2, max_body_bytes=64 * 1024)
    with live_server(config) as url:
        yield url


@pytest.fixture(scope="module")
def fuzz_schema(fuzz_url: str) -> Any:
    return schemathesis.openapi.from_url(fuzz_url + "/openapi.json")


@pytest.mark.slow
@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_no_input_makes_a_server_error(fuzz_schema: Any, method: str, path: str) -> None:
    operation = fuzz_schema[path][method]

    @given(case=operation.as_strategy())
    @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(case: schemathesis.Case) -> None:
        response = case.call(timeout=30)
        assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.text[:500]}"
        if response.status_code >= 400:
            (content_type,) = response.headers["content-type"]  # schemathesis: header -> values
            assert content_type.startswith("application/problem+json"), response.text
            assert response.json()["status"] == response.status_code

    check()


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
FIELDS = [
    "type",
    "out",
    "kernel",
    "stride",
    "padding",
    "groups",
    "bias",
    "init",
    "body",
    "shortcut",
    "alpha",
    "beta",
    "p",
    "factor",
    "slope",
    "layers",
]


@pytest.mark.slow
def test_specs_with_any_field_set_to_any_json_never_make_a_server_error(fuzz_url: str) -> None:
    from nas.examples import EXAMPLE_CNN, EXAMPLE_MLP

    with httpx.Client(base_url=fuzz_url, timeout=30) as client:

        @given(
            base=st.sampled_from([EXAMPLE_MLP, EXAMPLE_CNN]),
            block=st.integers(0, 2),
            layer=st.integers(0, 2),
            field=st.sampled_from(FIELDS),
            value=JSON,
            options=st.dictionaries(
                st.sampled_from(["steps", "loss", "n_vectors", "priority", "device", "trial", "study", "thresholds"]),
                JSON,
                max_size=2,
            ),
        )
        @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(
            base: dict[str, Any], block: int, layer: int, field: str, value: Any, options: dict[str, Any]
        ) -> None:
            spec = copy.deepcopy(base)
            layers = spec["blocks"][block]["layers"]
            layers[min(layer, len(layers) - 1)][field] = value
            response = client.post("/v1/candidates", json={"spec": spec, "options": options})
            assert response.status_code in (202, 413, 422), response.text
            if response.status_code != 202:
                assert response.headers["content-type"].startswith("application/problem+json")

        check()

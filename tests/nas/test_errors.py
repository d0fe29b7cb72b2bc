from __future__ import annotations

from typing import cast

import pytest

from nas.errors import (
    AuthenticationError,
    ClientError,
    ConflictError,
    NotFoundError,
    PayloadTooLargeError,
    PreflightError,
    RateLimitedError,
    ServerError,
    SpecRejectedError,
    error_for_status,
)


@pytest.mark.parametrize(
    ("status", "kind", "family"),
    [
        (400, ClientError, ClientError),
        (401, AuthenticationError, ClientError),
        (403, AuthenticationError, ClientError),
        (404, NotFoundError, ClientError),
        (409, ConflictError, ClientError),
        (413, PayloadTooLargeError, ClientError),
        (422, SpecRejectedError, ClientError),
        (429, RateLimitedError, ClientError),
        (500, ServerError, ServerError),
        (503, ServerError, ServerError),
    ],
)
def test_each_status_maps_to_its_class_under_one_root(status: int, kind: type, family: type) -> None:
    error = error_for_status(status, {"title": "t", "detail": "d"})
    assert type(error) is kind
    assert isinstance(error, family)
    assert isinstance(error, PreflightError)


def test_the_problem_document_is_carried_and_quoted() -> None:
    problem = {
        "type": "about:blank",
        "title": "Invalid spec",
        "status": 422,
        "detail": "blocks[0].layers[0] (linear).out: required",
        "errors": [{"path": "x"}],
    }
    error = cast(ClientError, error_for_status(422, problem))
    assert error.status == 422
    assert error.problem == problem
    assert error.detail == problem["detail"]
    assert "Invalid spec" in str(error) and "blocks[0]" in str(error)


def test_without_a_problem_document_the_class_docstring_is_the_message() -> None:
    error = error_for_status(404)
    assert str(error).startswith("HTTP 404: No such candidate")
    assert PreflightError().args[0] == "The Preflight service could not do what was asked."

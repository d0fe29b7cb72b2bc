"""Tuning options: checked against the engine's ConditionOptions where they enter, and put
in canonical form (every default filled in, device left out) for the cache key."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel, ValidationError

from nas.spec import json_path
from service.problems import ProblemError, ProblemIssue

__all__ = ["canonical_tuning_options", "condition_options_model"]

# Where a job runs is the worker's choice among those its device preference allows; it is
# not part of what the job computes, so not part of the cache key.
_NOT_IN_KEY = frozenset({"device"})


@cache
def condition_options_model() -> type[BaseModel]:
    from worker.options import ConditionOptions

    return ConditionOptions


def canonical_tuning_options(options: dict[str, Any], *, field: str = "options") -> dict[str, Any]:
    """Validate tuning options with the engine's model; raise a 422 problem naming the bad key."""
    model = condition_options_model()
    unknown = sorted(set(options) - set(model.model_fields) - _NOT_IN_KEY)
    if unknown:
        known = ", ".join(sorted(set(model.model_fields) - _NOT_IN_KEY))
        raise ProblemError(
            422,
            f"unknown option(s) {', '.join(unknown)}; tuning options are: {known}",
            kind="invalid-request",
            errors=[ProblemIssue(path=f"{field}.{key}", message="unknown option") for key in unknown],
        )
    try:
        parsed = model.model_validate({k: v for k, v in options.items() if k not in _NOT_IN_KEY})
    except ValidationError as exc:
        issues = [
            ProblemIssue(path=f"{field}.{json_path(tuple(error['loc']))}", message=error["msg"])
            for error in exc.errors(include_url=False)
        ]
        raise ProblemError(
            422, "; ".join(f"{i.path}: {i.message}" for i in issues), kind="invalid-request", errors=issues
        ) from None
    return parsed.model_dump(mode="json", exclude=set(_NOT_IN_KEY))

"""Tuning options: checked against ``nas.options.ConditionOptions`` where they enter, and put
in canonical form (every default filled in, device left out) for the cache key."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from nas.canonical import DATA_OPTION as DATA
from nas.canonical import NOT_IN_KEY as _NOT_IN_KEY
from nas.options import ConditionOptions
from nas.spec import error_path, json_key, primary_errors, quote_short, readable_message
from service.api.problems import DETAIL_ISSUES, ProblemError, ProblemIssue, bounded, under
from service.store.data_batches import is_batch_id

__all__ = ["DATA", "canonical_tuning_options"]


def canonical_tuning_options(options: dict[str, Any], *, field: str = "options") -> dict[str, Any]:
    """Validate tuning options with the engine's model; raise a 422 problem naming the bad key."""
    model = ConditionOptions
    data = options.pop(DATA, None)
    if data is not None and not is_batch_id(data):
        raise ProblemError(
            422,
            f"{field}.{DATA}: expected the id of an uploaded data batch (POST /v1/batches), got {quote_short(data)}",
            kind="invalid-request",
            errors=[ProblemIssue(path=f"{field}.{DATA}", message="not a data batch id")],
        )
    unknown = sorted(set(options) - set(model.model_fields) - _NOT_IN_KEY)
    if unknown:
        known = ", ".join(sorted((set(model.model_fields) - _NOT_IN_KEY) | {DATA}))
        named = ", ".join(quote_short(key) for key in unknown[:DETAIL_ISSUES])
        more = f" and {len(unknown) - DETAIL_ISSUES} more" if len(unknown) > DETAIL_ISSUES else ""
        _, issues = bounded([ProblemIssue(path=json_key(field, key), message="unknown option") for key in unknown], "")
        raise ProblemError(
            422,
            f"unknown option(s) {named}{more}; tuning options are: {known}",
            kind="invalid-request",
            errors=issues,
        )
    try:
        parsed = model.model_validate({k: v for k, v in options.items() if k not in _NOT_IN_KEY})
    except ValidationError as exc:
        detail, issues = bounded(
            [
                ProblemIssue(
                    path=under(field, error_path(tuple(error["loc"]), error["type"])),
                    message=readable_message(error),
                )
                for error in primary_errors(exc.errors(include_url=False))
            ],
            "invalid options",
        )
        raise ProblemError(422, detail, kind="invalid-request", errors=issues) from None
    canonical = parsed.model_dump(mode="json", exclude=set(_NOT_IN_KEY))
    return canonical | ({DATA: data} if data is not None else {})

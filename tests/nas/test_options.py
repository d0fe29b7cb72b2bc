"""Conditioning options are as strict as the spec's counts: a count is an integral number and a switch
is true or false; what pydantic would coerce (``true`` to 1, ``"no"`` to false) is reported instead."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from nas.options import ConditionOptions


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"steps": True}, "steps"),
        ({"steps": "10"}, "steps"),
        ({"steps": 10.0}, "steps"),
        ({"probe_steps": 5.5}, "probe_steps"),
        ({"seed": "0"}, "seed"),
        ({"diagnostics": 1}, "diagnostics"),
        ({"balance": "false"}, "balance"),
        ({"center_outputs": "no"}, "center_outputs"),
    ],
)
def test_a_count_or_switch_of_another_type_is_refused_naming_the_option(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ConditionOptions.model_validate(options)
    assert [error["loc"] for error in caught.value.errors()] == [(field,)]


def test_numbers_of_the_right_kind_are_taken_numpy_ones_too() -> None:
    given = {"steps": np.int64(3), "batch_size": 32, "diagnostics": np.True_, "balance": False, "tolerance": 1}
    opts = ConditionOptions.model_validate(given)
    assert (opts.steps, opts.batch_size, opts.diagnostics, opts.balance, opts.tolerance) == (3, 32, True, False, 1.0)
    assert type(opts.steps) is int and type(opts.diagnostics) is bool


def test_the_canonical_form_a_job_stores_validates_again_unchanged() -> None:
    """The service stores ``model_dump(mode="json")`` and the worker validates it again."""
    dumped = ConditionOptions(steps=4, diagnostics=True).model_dump(mode="json")
    assert ConditionOptions.model_validate(dumped).model_dump(mode="json") == dumped


def test_a_hessian_batch_of_one_is_refused_as_a_batch_of_one_is() -> None:
    """At one sample a BatchNorm network has no batch statistics: every such network lost its
    Hessian figures, with a note, rather than the option being refused."""
    with pytest.raises(ValidationError) as caught:
        ConditionOptions.model_validate({"hessian_batch_size": 1})
    assert [error["loc"] for error in caught.value.errors()] == [("hessian_batch_size",)]
    assert ConditionOptions.model_validate({"hessian_batch_size": 2}).hessian_batch_size == 2

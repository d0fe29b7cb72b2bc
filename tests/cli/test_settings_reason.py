"""How a refused setting reads: pydantic's faults with the value shown (a typo hides in a long
variable), but a database URL's (it may hold a password), and once only where our validator's
message names the value already."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from service.cli.usage import settings_reason
from service.settings import Settings


def _reason(**values: object) -> str:
    with pytest.raises(ValidationError) as caught:
        Settings(**values)  # type: ignore[arg-type]
    (fault,) = caught.value.errors()
    return settings_reason(fault)


def test_a_refused_value_is_shown_once() -> None:
    assert _reason(max_batch="25O").endswith("unable to parse string as an integer (got '25O')")
    assert _reason(lease_seconds="0") == "Input should be greater than 0 (got '0')"  # the 0 in the bound is not it
    root = _reason(root_path="https://example.com/x")
    assert root.startswith("root_path 'https://example.com/x' is not a path prefix") and "(got" not in root
    assert _reason(page_size="9" * 100).endswith("(got '" + "9" * 67 + "... (102 characters))")  # as a spec's


def test_a_database_urls_value_is_never_shown() -> None:
    from service.cli.usage import _SECRET_FIELDS

    fault = {
        "type": "value_error",
        "loc": ("database_url",),
        "msg": "Value error, bad",
        "input": "postgresql://u:secret@h/db",
    }
    assert "database_url" in _SECRET_FIELDS and settings_reason(fault) == "bad"

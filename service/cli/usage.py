"""The one error a command raises for input the user can fix (a file argument that is missing, a
folder, unreadable or of the wrong kind): ``preflight``'s ``main`` prints it as one line and exits
2, the status of bad arguments (docs/configuration.md, "Exit statuses")."""

from __future__ import annotations

from typing import Any

__all__ = ["UsageError", "settings_reason"]

# what a refused setting's value is not echoed for: a database URL may carry a password
_SECRET_FIELDS = ("database_url",)


class UsageError(Exception):
    """Bad input named by its message; exit status 2, no traceback."""


def settings_reason(fault: Any) -> str:
    """A settings fault in the words every refusal uses (``readable_message``: a validator's
    message without pydantic's "Value error, "), with the value it refused quoted as a spec's is
    (``quote_short``), so a typo shows where the variable is long; not a database URL's, and not
    where our validator's message names it already."""
    from nas.spec import quote_short, readable_message  # a failure's path: not at every start

    reason = readable_message(fault)
    field = str(fault["loc"][0]) if fault.get("loc") else ""
    if field in _SECRET_FIELDS or "input" not in fault or isinstance(fault["input"], dict):
        return reason
    if fault["type"] == "value_error" and str(fault["input"]) in reason:  # our validators name the value
        return reason
    return f"{reason} (got {quote_short(fault['input'])})"

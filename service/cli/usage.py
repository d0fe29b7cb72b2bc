"""The one error a command raises for input the user can fix (a file argument that is missing, a
folder, unreadable or of the wrong kind): ``preflight``'s ``main`` prints it as one line and exits
2, the status of bad arguments (docs/configuration.md, "Exit statuses")."""

from __future__ import annotations

from typing import Any

__all__ = ["UsageError", "settings_reason"]

# what a refused setting's value is not echoed for: a database URL may carry a password
_SECRET_FIELDS = ("database_url",)
_SHOWN = 60  # characters of a refused value shown


class UsageError(Exception):
    """Bad input named by its message; exit status 2, no traceback."""


def settings_reason(fault: Any) -> str:
    """A settings validator's message without pydantic's "Value error, " (a ValueError it raised),
    and the value it refused (but a database URL's), so a typo shows where the variable is long."""
    own = str(fault["msg"]).startswith("Value error, ")  # our validator's message, not pydantic's
    reason = str(fault["msg"]).removeprefix("Value error, ")
    field = str(fault["loc"][0]) if fault.get("loc") else ""
    if field in _SECRET_FIELDS or "input" not in fault or isinstance(fault["input"], dict):
        return reason
    if own and str(fault["input"]) in reason:  # our validators name the value they refuse
        return reason
    shown = repr(fault["input"])
    return f"{reason} (got {shown if len(shown) <= _SHOWN else shown[:_SHOWN] + '...'})"

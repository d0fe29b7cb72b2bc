"""The one error a command raises for input the user can fix (a file argument that is missing, a
folder, unreadable or of the wrong kind): ``preflight``'s ``main`` prints it as one line and exits
2, the status of bad arguments (docs/configuration.md, "Exit statuses")."""

from __future__ import annotations

__all__ = ["UsageError", "settings_reason"]


class UsageError(Exception):
    """Bad input named by its message; exit status 2, no traceback."""


def settings_reason(message: str) -> str:
    """A settings validator's message without pydantic's "Value error, " (a ValueError it raised)."""
    return message.removeprefix("Value error, ")

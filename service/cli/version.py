"""The installed version of Preflight (``preflight --version``, the start-up log)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _distribution_version

__all__ = ["version"]


def version() -> str:
    """The version of the installed ``nas-preflight`` distribution, or ``unknown`` when it
    runs from a source tree that was never installed."""
    try:
        return _distribution_version("nas-preflight")
    except PackageNotFoundError:
        return "unknown"

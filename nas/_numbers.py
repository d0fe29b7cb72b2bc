"""What counts as a number where an argument asks for one: numpy's numbers too, never a bool (an
``int`` subclass that ``prune=True`` or ``n_trials=True`` would slip in as 1) nor a numeric string.
The one rule for the spec's counts, the search spaces' ranges and the gate's and pruner's arguments."""

from __future__ import annotations

import numbers

__all__ = ["is_integral", "is_real"]


def is_integral(value: object) -> bool:
    """An integer: Python's or numpy's, not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: object) -> bool:
    """A real number: Python's or numpy's, integers included, not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)

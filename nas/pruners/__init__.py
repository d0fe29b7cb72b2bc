"""Optuna pruners that use the conditioning report."""

from __future__ import annotations

from nas.pruners._conditioning import ConditioningPruner

__all__ = ["ConditioningPruner"]

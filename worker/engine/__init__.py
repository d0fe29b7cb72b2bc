"""The conditioning engine: one module per paper's method, composed by ``pipeline.condition``.

Imports ``nas`` and torch only (never the service or the job loop).
"""

from __future__ import annotations

from nas.options import ConditionOptions
from nas.report import ConditioningReport
from worker.engine.pipeline import condition

__all__ = ["ConditionOptions", "ConditioningReport", "condition"]

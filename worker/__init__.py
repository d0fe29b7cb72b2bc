"""The conditioning engine (one module per paper's method) and the job runner.

``condition`` is bound here after its module is imported, so ``worker.condition`` is the
function (the module stays reachable as ``sys.modules["worker.condition"]`` and through
``from worker.condition import ...``).
"""

from __future__ import annotations

from worker.condition import condition
from worker.options import ConditionOptions
from worker.report import ConditioningReport

__all__ = ["ConditionOptions", "ConditioningReport", "condition"]

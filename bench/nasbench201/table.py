"""The trained CIFAR-10 accuracy of every NAS-Bench-201 cell, from the ``analog-nasbench`` wheel.

AnalogNAS-Bench (PyPI ``analog-nasbench``, a bench-only dependency) ships a table of all 15,625
NAS-Bench-201 cells with, among analog-hardware figures, ``baseline_accuracy``: the CIFAR-10 test
accuracy after full digital training, from its own training runs. The file is a pickle. It is
read here directly (not through the package's loader, which imports pandas and ``pkg_resources``)
with a restricted unpickler that admits only the package's two record classes, mapped to plain
local records: any other global in the file (a function, a class with side effects) is refused
before anything is built, so a tampered file cannot run code.

**The encoding, established from the table itself** (the package does not document it;
``tests/bench/nasbench201/test_table.py`` checks every step):

* Op indices: 1 is ``none`` (the all-1 cell trains to exactly 10 %, chance), 2 is
  ``nor_conv_3x3`` (the all-2 cell: 93.2 %), 3 is ``nor_conv_1x1`` (89.5 %), 0 is
  ``skip_connect`` and 4 ``avg_pool_3x3``: the cell whose only live edge is 0->3 trains to 86.6 %
  with op 0 and 75.1 % with op 4, what an identity and a stack of 15 blurring pools would give.
* Edge order: the 341 cells at exactly 10 % are exactly the cells with no live route from node 0
  to node 3 (a route is cut by a ``none`` edge) under two of the 720 orders of the 6 edges: the
  lexicographic one, (0,1), (0,2), (0,3), (1,2), (1,3), (2,3), and its reversal (node j <-> 3 - j),
  which maps every route to a route with the same ops in reverse order and so cannot be told
  apart by the table. We use the lexicographic order. NAS-Bench-201's order (its architecture
  strings) is 0->1, 0->2, 1->2, 0->3, 1->3, 2->3: positions 2 and 3 swap.
* NAS-Bench-201's best CIFAR-10 cell (``|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+
  |skip_connect~0|nor_conv_3x3~1|nor_conv_3x3~2|``, invariant under the reversal) is third of
  15,625 here, at 93.99 %, 0.08 points below the table's best, (2, 2, 0, 2, 3, 2) at 94.07 %: one
  training run per cell, so the top few are within noise of each other.
"""

from __future__ import annotations

import pickle
from functools import cache
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Any

from nas.space import NB201_EDGES

__all__ = [
    "ANALOG_EDGES",
    "ANALOG_OPS",
    "NASBench201TableMissing",
    "RestrictedUnpickler",
    "analog_to_nasbench201",
    "load_table",
    "table_path",
]

ANALOG_OPS: tuple[str, ...] = ("skip_connect", "none", "nor_conv_3x3", "nor_conv_1x1", "avg_pool_3x3")
ANALOG_EDGES: tuple[tuple[int, int], ...] = ((0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3))
_ADMITTED = {("analognasbench.data", "Architecture"), ("analognasbench.data", "DriftMeasurement")}


class NASBench201TableMissing(RuntimeError):
    """The table's package is not installed; the message says how to get it."""


class _Record:
    """A plain stand-in for the package's record classes: attributes only, no behaviour."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict):
            raise pickle.UnpicklingError(f"unexpected record state of type {type(state).__name__}")
        self.__dict__.update(state)


class RestrictedUnpickler(pickle.Unpickler):
    """Admits only AnalogNAS-Bench's ``Architecture`` and ``DriftMeasurement`` records; every other
    global (``os.system``, ``builtins.eval``, any class) is an ``UnpicklingError``."""

    def find_class(self, module: str, name: str) -> type:
        if (module, name) in _ADMITTED:
            return _Record
        raise pickle.UnpicklingError(f"refused global {module}.{name}: the table holds only its own records")


def table_path() -> Path:
    """The table file inside the installed ``analog-nasbench`` distribution."""
    try:
        dist = distribution("analog-nasbench")
    except PackageNotFoundError:
        raise NASBench201TableMissing(
            "the NAS-Bench-201 accuracy table needs the bench-only package analog-nasbench: "
            'pip install "nas-preflight[bench]" (or make setup)'
        ) from None
    for file in dist.files or []:
        if file.name == "data.anb" and file.parts[0] == "analognasbench":
            return Path(str(dist.locate_file(file)))
    raise NASBench201TableMissing("analog-nasbench is installed but its data.anb is not in it; reinstall it")


def analog_to_nasbench201(cell: tuple[int, ...]) -> tuple[str, ...]:
    """A table key (op indices in the lexicographic edge order) to NAS-Bench-201's op names in its
    own edge order (``nas.space.NB201_EDGES``), ready for ``nas.space.nasbench201_spec``."""
    if len(cell) != len(ANALOG_EDGES) or any(not 0 <= op < len(ANALOG_OPS) for op in cell):
        raise ValueError(f"not a table key: {cell!r}")
    by_edge = {edge: ANALOG_OPS[op] for edge, op in zip(ANALOG_EDGES, cell, strict=True)}
    return tuple(by_edge[edge] for edge in NB201_EDGES)


@cache
def load_table(path: Path | None = None) -> dict[tuple[str, ...], float]:
    """Every cell's CIFAR-10 test accuracy (%) after full training, keyed by its op names in
    NAS-Bench-201's edge order."""
    with open(path or table_path(), "rb") as handle:
        raw = RestrictedUnpickler(handle).load()
    if not isinstance(raw, dict) or len(raw) != 15_625:
        raise ValueError(f"expected a table of 15,625 cells, got {type(raw).__name__} of {len(raw)}")
    return {analog_to_nasbench201(tuple(key)): float(record.baseline_accuracy) for key, record in raw.items()}

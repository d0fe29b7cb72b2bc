"""The NAS-Bench-201 accuracy table: read only through the restricted unpickler, and its op
encoding and edge order established from the table itself (bench/nasbench201/table.py)."""

from __future__ import annotations

import io
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from bench.nasbench201.table import (
    RestrictedUnpickler,
    analog_to_nasbench201,
)
from nas.canonical import spec_hash
from nas.space import NB201_EDGES, nasbench201_spec, parse_nasbench201_arch
from nas.validate import parse_spec

BEST = "|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|skip_connect~0|nor_conv_3x3~1|nor_conv_3x3~2|"


class _Exploit:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def test_the_restricted_unpickler_refuses_any_other_global_before_running_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(pickle.UnpicklingError, match="refused global"):
        RestrictedUnpickler(io.BytesIO(pickle.dumps({"x": _Exploit(marker)}))).load()
    assert not marker.exists()
    with pytest.raises(pickle.UnpicklingError, match="refused global builtins.eval"):
        RestrictedUnpickler(io.BytesIO(b"cbuiltins\neval\n(S'1'\ntR.")).load()


def test_the_all_none_cell_is_at_chance_and_the_all_conv3x3_cell_near_93(table: dict) -> None:
    assert len(table) == 15_625
    assert table[("none",) * 6] == 10.0
    assert 92.0 < table[("nor_conv_3x3",) * 6] < 94.0
    assert table[("nor_conv_3x3",) * 6] > table[("nor_conv_1x1",) * 6]


def _has_live_route(ops: tuple[str, ...]) -> bool:
    live = {0}
    for target in (1, 2, 3):
        if any(t == target and s in live and op != "none" for (s, t), op in zip(NB201_EDGES, ops, strict=True)):
            live.add(target)
    return 3 in live


def test_the_cells_at_chance_are_exactly_those_without_a_live_route(table: dict) -> None:
    # only the right op for "none" and an edge order consistent with the table make these two sets equal
    at_chance = {ops for ops, accuracy in table.items() if accuracy <= 10.0}
    dead = {ops for ops in table if not _has_live_route(ops)}
    assert at_chance == dead and len(dead) == 341


def test_skip_and_pool_are_told_apart_by_the_cells_with_one_live_edge(table: dict) -> None:
    only = {
        op: table[tuple(op if edge == (0, 3) else "none" for edge in NB201_EDGES)]
        for op in ("skip_connect", "avg_pool_3x3")
    }
    assert only["skip_connect"] > only["avg_pool_3x3"] + 5  # an identity cell, against 15 stacked 3x3 blurs


def test_nasbench201s_best_cell_is_within_noise_of_the_tables_best(table: dict) -> None:
    ranked = sorted(table, key=cast(Callable[[Any], float], table.get), reverse=True)  # every key is in the table
    best = parse_nasbench201_arch(BEST)
    assert ranked.index(best) < 3
    assert table[ranked[0]] - table[best] < 0.1


def test_table_keys_map_to_nasbench201_edge_order() -> None:
    # the table's positions are (0,1), (0,2), (0,3), (1,2), (1,3), (2,3); NAS-Bench-201's swap the middle two
    assert analog_to_nasbench201((2, 2, 0, 3, 4, 1)) == (
        "nor_conv_3x3",
        "nor_conv_3x3",
        "nor_conv_1x1",
        "skip_connect",
        "avg_pool_3x3",
        "none",
    )
    with pytest.raises(ValueError):
        analog_to_nasbench201((0, 1, 2))


def test_table_cells_become_distinct_specs_of_the_space(table: dict) -> None:
    cells = list(table)[::1500]
    hashes = {spec_hash(parse_spec(nasbench201_spec(ops, channels=4, cells_per_stage=1))) for ops in cells}
    assert len(hashes) == len(cells)

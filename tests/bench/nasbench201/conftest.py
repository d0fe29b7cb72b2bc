"""The NAS-Bench-201 accuracy table for these tests, or a skip saying how to get it."""

from __future__ import annotations

import pytest

from bench.nasbench201.table import NASBench201TableMissing, load_table, table_path


@pytest.fixture(scope="session")
def table() -> dict[tuple[str, ...], float]:
    try:
        table_path()
    except NASBench201TableMissing as missing:
        pytest.skip(str(missing))
    return load_table()

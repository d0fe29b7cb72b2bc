"""The quota's count benchmark runs, and both ways of counting agree (it asserts so)."""

from __future__ import annotations

import pytest

from bench.perf.quota_count import main


def test_the_quota_count_from_the_unfinished_jobs_equals_the_count_from_the_owners_history(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--history", "300", "--queued", "40", "--repeats", "1"]) == 0
    assert capsys.readouterr().out.startswith("history 300, queued 40: 20 held;")

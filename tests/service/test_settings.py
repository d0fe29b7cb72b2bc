"""Settings refuse combinations that break the queue, at start-up, naming the fix."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from service.settings import Settings


@pytest.mark.parametrize(("lease", "heartbeat"), [(30.0, 30.0), (10.0, 60.0)])
def test_a_heartbeat_not_shorter_than_the_lease_is_refused(lease: float, heartbeat: float) -> None:
    with pytest.raises(ValidationError, match="heartbeat_seconds .* must be shorter than lease_seconds"):
        Settings(lease_seconds=lease, heartbeat_seconds=heartbeat)


def test_a_heartbeat_within_the_lease_is_accepted() -> None:
    settings = Settings(lease_seconds=3.0, heartbeat_seconds=0.5)
    assert settings.heartbeat_seconds < settings.lease_seconds


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("lease_seconds", float("inf"), "finite number"),
        ("poll_seconds", 1e10, "less than or equal to 3600"),
        ("job_timeout_seconds", float("nan"), "finite number"),
        ("max_attempts", 10**20, "less than or equal to 1000"),
        ("engine_memory_bytes", 1000, "too small to start the engine"),
        ("engine_memory_bytes", 10**23, "less than or equal to"),
    ],
)
def test_a_setting_past_what_the_queue_can_represent_is_refused_at_start(
    field: str, value: float, message: str
) -> None:
    """Each of these started and then crashed a worker (an infinite lease overflowed a timedelta, a
    huge poll a timestamp), made every submission a 500 (an attempt count beyond SQLite's integers)
    or killed the engine child as it started, retried forever."""
    overrides: dict[str, Any] = {field: value}
    with pytest.raises(ValidationError, match=message):
        Settings(**overrides)


def test_no_memory_limit_and_a_workable_one_are_accepted() -> None:
    assert Settings(engine_memory_bytes=0).engine_memory_bytes == 0
    assert Settings(engine_memory_bytes=2 * 2**30).engine_memory_bytes == 2 * 2**30

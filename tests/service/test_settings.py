"""Settings refuse combinations that break the queue, at start-up, naming the fix."""

from __future__ import annotations

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

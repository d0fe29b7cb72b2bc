"""``service.testing.scratch_database``: the one way tests and benchmarks get a throwaway PostgreSQL
database; it is gone afterwards even when a connection to it is still open."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from service.testing import scratch_database

pytestmark = pytest.mark.postgres


def _databases(server: str) -> set[str]:
    engine = create_engine(server, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            return {row[0] for row in connection.execute(text("SELECT datname FROM pg_database"))}
    finally:
        engine.dispose()


def test_the_scratch_database_is_empty_and_dropped_with_a_connection_still_open(postgres_server):
    with scratch_database(postgres_server, "preflight_scratch_test") as url:
        name = url.rsplit("/", 1)[1]
        assert name.startswith("preflight_scratch_test_") and name in _databases(postgres_server)
        engine = create_engine(url, poolclass=NullPool)
        held = engine.connect()
        tables = held.execute(text("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"))
        assert tables.scalar() == 0
    assert name not in _databases(postgres_server)
    with pytest.raises(OperationalError):  # the open connection was terminated by the drop
        held.execute(text("SELECT 1"))
    held.close()
    engine.dispose()

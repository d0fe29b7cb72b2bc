"""Shared by tests/service/api and tests/service/store: real databases for the service tests:
a SQLite file per test, and one PostgreSQL database per test session, created under a unique
name through the ``postgres`` database and dropped at the end.

PostgreSQL is found at PREFLIGHT_TEST_POSTGRES_URL (default: the CI server below). When it
cannot be reached the PostgreSQL tests are skipped, or fail if PREFLIGHT_TEST_REQUIRE_POSTGRES=1.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from nas.report import ConditioningReport
from nas.testing import sample_report as nas_sample_report
from service.settings import Settings
from service.store.db import make_engine, make_sessionmaker
from service.store.migrations import upgrade
from service.testing import scratch_database

DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
# Fast leases so that crash recovery shows within seconds.
FAST_QUEUE = {"lease_seconds": 3.0, "heartbeat_seconds": 0.5, "poll_seconds": 0.05, "token_cache_seconds": 0.0}


def _admin_url() -> str:
    url = make_url(os.environ.get("PREFLIGHT_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL))
    return url.set(database="postgres").render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The admin URL of a reachable PostgreSQL server, or skip (or fail, when required)."""
    admin = _admin_url()
    try:
        engine = create_engine(admin, connect_args={"connect_timeout": 3})
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        engine.dispose()
    except Exception as exc:
        message = (
            f"PostgreSQL not reachable at {make_url(admin).render_as_string()} ({type(exc).__name__}); set "
            "PREFLIGHT_TEST_POSTGRES_URL"
        )
        if os.environ.get("PREFLIGHT_TEST_REQUIRE_POSTGRES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return admin


@pytest.fixture(scope="session")
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh, migrated database for this test session; dropped at the end."""
    with scratch_database(postgres_server, "preflight_test") as url:
        upgrade(url)
        yield url


def truncate_all(url: str) -> None:
    """Empty every table of the models (the list follows the schema, never a copy of it)."""
    from service.store.models import Base

    tables = [t.name for t in reversed(Base.metadata.sorted_tables)]  # children first
    engine = make_engine(url, poolclass=NullPool)
    with engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            connection.execute(text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE"))
        else:
            for table in tables:
                connection.execute(text(f"DELETE FROM {table}"))
    engine.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'preflight.db'}"
    upgrade(url)
    return url


@pytest.fixture
def pg_url(postgres_url: str) -> str:
    """The session's PostgreSQL database, emptied for this test."""
    truncate_all(postgres_url)
    return postgres_url


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """Each test using this runs once on SQLite and once on PostgreSQL."""
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(name))


@pytest.fixture
def sessions(db_url: str) -> Iterator[object]:
    engine = make_engine(db_url)
    yield make_sessionmaker(engine)
    engine.dispose()


@pytest.fixture
def make_settings() -> Callable[..., Settings]:
    """``make_settings(url, **overrides)``: settings with fast leases for the tests."""

    def make(url: str, **overrides: Any) -> Settings:
        return Settings(database_url=url, **{**FAST_QUEUE, **overrides})

    return make


@pytest.fixture
def sample_report() -> ConditioningReport:
    """A complete typed report (``nas.testing.sample_report``), as the engine returns it."""
    return nas_sample_report()

"""Alembic environment: runs migrations against the URL handed over by
``service.store.migrations.alembic_config`` (or the PREFLIGHT_DATABASE_URL setting)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, pool

from service.settings import Settings
from service.store.db import make_engine
from service.store.models import Base

config = context.config
url = config.attributes.get("database_url") or Settings().database_url


def run_offline() -> None:
    context.configure(url=url, target_metadata=Base.metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    engine = make_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            _sqlite_foreign_keys(connection, on=False)
        context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
            if sqlite:
                _check_sqlite_foreign_keys(connection)
    engine.dispose()


def _sqlite_foreign_keys(connection: Connection, *, on: bool) -> None:
    """SQLite's batch migrations copy a table, drop it and rename the copy: with foreign keys on,
    dropping ``candidates`` deleted every row that references it (ON DELETE CASCADE). The pragma
    only takes effect outside a transaction, so it goes to the driver before the first BEGIN."""
    dbapi = connection.connection.dbapi_connection
    assert dbapi is not None
    dbapi.execute(f"PRAGMA foreign_keys={'ON' if on else 'OFF'}")


def _check_sqlite_foreign_keys(connection: Connection) -> None:
    """With the keys off while migrating, a migration that broke a reference would go unseen:
    refuse it, inside its transaction, so it is rolled back."""
    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
    if broken:
        raise RuntimeError(f"the migration left rows whose references are broken: {broken[:5]}")


if context.is_offline_mode():
    run_offline()
else:
    run_online()

"""Alembic environment: runs migrations against the URL handed over by
``service.store.migrations.alembic_config`` (or the PREFLIGHT_DATABASE_URL setting)."""

from __future__ import annotations

from alembic import context
from alembic.runtime.migration import MigrationInfo
from sqlalchemy import Connection, pool

from service.settings import Settings
from service.store.db import make_engine
from service.store.migrations import MigrationsPending
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
            _sqlite_foreign_keys_off(connection)
        applied: list[str] = []
        context.configure(
            connection=connection,
            target_metadata=Base.metadata,
            render_as_batch=True,
            # the driver runs in autocommit and the store sends BEGIN itself (service.store.db), so
            # SQLite's DDL is transactional: a migration refused below is rolled back whole
            transactional_ddl=True,
            on_version_apply=lambda **kwargs: applied.append(_step_name(kwargs["step"])),
        )
        with context.begin_transaction():
            before = _broken_references(connection) if sqlite and _will_migrate() else set()
            context.run_migrations()
            if sqlite and applied:
                _refuse_broken_references(connection, before, applied)
    engine.dispose()


def _sqlite_foreign_keys_off(connection: Connection) -> None:
    """SQLite's batch migrations copy a table, drop it and rename the copy: with foreign keys on,
    dropping ``candidates`` deleted every row that references it (ON DELETE CASCADE). The pragma
    only takes effect outside a transaction, so it goes to the driver before the first BEGIN; the
    connection is not pooled (NullPool), so no other use sees it off."""
    dbapi = connection.connection.dbapi_connection
    assert dbapi is not None
    dbapi.execute("PRAGMA foreign_keys=OFF")


def _step_name(step: MigrationInfo) -> str:
    return str(step.up_revision_id) if step.is_upgrade else f"{step.up_revision_id} down"


def _will_migrate() -> bool:
    target = context.get_revision_argument()
    target = context.get_head_revision() if target in ("head", "heads") else target
    return bool(context.get_context().get_current_revision() != target)


def _broken_references(connection: Connection) -> set[tuple[str, int, str]]:
    """(table, rowid, referenced table) of every row whose foreign key names no row."""
    return {(row[0], row[1], row[2]) for row in connection.exec_driver_sql("PRAGMA foreign_key_check").all()}


def _refuse_broken_references(connection: Connection, before: set[tuple[str, int, str]], applied: list[str]) -> None:
    """With the keys off while migrating, a migration that broke a reference would go unseen:
    refuse it inside its transaction, so it is rolled back. Rows broken before it (a delete made
    with the keys off, in the sqlite3 shell) are not its doing."""
    broken = sorted(_broken_references(connection) - before)
    if broken:
        table, rowid, parent = broken[0]
        raise MigrationsPending(
            f"the migration ({', '.join(applied)}) was rolled back and the database left as it was: it left "
            f"{len(broken)} row(s) whose foreign key names no row (first: {table} row {rowid}, referencing "
            f"{parent}); this is a bug in the migration, please report it"
        )


if context.is_offline_mode():
    run_offline()
else:
    run_online()

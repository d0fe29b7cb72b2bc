"""Alembic migrations of the SQL store, and the helpers that apply and check them.

``preflight db upgrade`` applies them; the API and workers refuse to start on a database
that is not at the latest revision (``preflight db current`` shows where it is).
"""

from __future__ import annotations

import time
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Engine, make_url
from sqlalchemy.exc import OperationalError

__all__ = [
    "MigrationsPending",
    "UnknownRevision",
    "alembic_config",
    "check_current",
    "checked_revision",
    "current_revision",
    "head_revision",
    "missing_sqlite_file",
    "upgrade",
]

HERE = Path(__file__).resolve().parent
_SQLITE_LOCKED_ATTEMPTS = 10  # two processes migrating one SQLite file: the second waits this many turns


class MigrationsPending(RuntimeError):
    """The database schema is not at the latest migration; run `preflight db upgrade`."""


class UnknownRevision(MigrationsPending):
    """The database is at a revision this release does not know: a newer release migrated it,
    and no upgrade from here can help."""


def alembic_config(url: str) -> Config:
    config = Config(str(HERE / "alembic.ini"))
    config.set_main_option("script_location", str(HERE))
    config.attributes["database_url"] = url  # not set_main_option: '%' in URLs is interpolated
    return config


def head_revision() -> str | None:
    return ScriptDirectory(str(HERE)).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def missing_sqlite_file(url: str) -> str | None:
    """The path of a SQLite database file that does not exist (connecting would create it, empty),
    else None."""
    from service.store.db import sqlite_file

    path = sqlite_file(url)
    return path if path is not None and not Path(path).exists() else None


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database to ``revision``. Refuses a database a newer release migrated
    (:class:`UnknownRevision`); on SQLite, a second process migrating the same file at once is
    waited for (SQLite answers "database is locked" at once when two transactions both write)."""
    from service.store.db import make_engine

    engine = make_engine(url)
    try:
        checked_revision(engine)
    finally:
        engine.dispose()
    sqlite = make_url(url).get_backend_name() == "sqlite"
    for attempt in range(_SQLITE_LOCKED_ATTEMPTS):
        try:
            command.upgrade(alembic_config(url), revision)
            return
        except OperationalError as exc:
            if not (sqlite and "database is locked" in str(exc)) or attempt == _SQLITE_LOCKED_ATTEMPTS - 1:
                raise
            time.sleep(0.2 * (attempt + 1))


def checked_revision(engine: Engine) -> str | None:
    """The database's revision; raises UnknownRevision when this release does not know it."""
    current = current_revision(engine)
    if current is None:
        return None
    try:
        ScriptDirectory(str(HERE)).get_revision(current)
    except CommandError:
        raise UnknownRevision(
            f"database is at revision {current}, which this release (head {head_revision()}) does not know: a "
            "newer Preflight migrated it; run that release, or restore a backup taken before the upgrade "
            f"(database {engine.url.render_as_string(hide_password=True)})"
        ) from None
    return current


def check_current(engine: Engine) -> None:
    """Raise MigrationsPending unless the database is at the head revision (UnknownRevision when a
    newer release migrated it)."""
    current, head = checked_revision(engine), head_revision()
    if current != head:
        raise MigrationsPending(
            f"database is at revision {current or 'none (empty)'}, the code needs {head}; "
            f"run `preflight db upgrade` (database {engine.url.render_as_string(hide_password=True)})"
        )

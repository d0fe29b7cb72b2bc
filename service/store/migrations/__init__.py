"""Alembic migrations of the SQL store, and the helpers that apply and check them.

``preflight db upgrade`` applies them; the API and workers refuse to start on a database
that is not at the latest revision (``preflight db current`` shows where it is).
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

__all__ = ["MigrationsPending", "alembic_config", "check_current", "current_revision", "head_revision", "upgrade"]

HERE = Path(__file__).resolve().parent


class MigrationsPending(RuntimeError):
    """The database schema is not at the latest migration; run `preflight db upgrade`."""


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


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def check_current(engine: Engine) -> None:
    """Raise MigrationsPending unless the database is at the head revision."""
    current, head = current_revision(engine), head_revision()
    if current != head:
        raise MigrationsPending(
            f"database is at revision {current or 'none (empty)'}, the code needs {head}; "
            f"run `preflight db upgrade` (database {engine.url.render_as_string(hide_password=True)})"
        )

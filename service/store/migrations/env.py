"""Alembic environment: runs migrations against the URL handed over by
``service.store.migrations.alembic_config`` (or the PREFLIGHT_DATABASE_URL setting)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import pool

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
        context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()

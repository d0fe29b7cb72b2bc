"""The Alembic migrations on SQLite and PostgreSQL: they build exactly the models' schema, and
0003 (tenancy) gives what was stored before it to the anonymous owner, with fresh opaque ids,
and goes back down cleanly; 0004 (engine revisions) leaves the jobs queued before it claimable;
0005 (one active token per name) renames the duplicates older versions allowed, keeping every token;
0006 widens study names to Optuna's 512 characters and cuts them back to 200 going down; 0007
indexes a token's data batches."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.pool import NullPool

from service.store import jobs
from service.store.db import make_engine, make_sessionmaker, session_scope
from service.store.migrations import alembic_config, current_revision, head_revision, upgrade
from service.store.models import Base
from service.testing import scratch_database


def test_the_migrations_build_exactly_the_models_schema(db_url: str) -> None:
    engine = make_engine(db_url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            assert current_revision(engine) == head_revision() == "0007"
            assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with no schema at all, on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'old.db'}"
        return
    server = str(request.getfixturevalue("postgres_server"))
    with scratch_database(server, "preflight_migration") as url:
        yield url


def _candidate(connection: object, key: str, status: str, finished: datetime | None) -> None:
    connection.execute(  # type: ignore[attr-defined]
        text(
            "INSERT INTO candidates (cache_key, spec_hash, spec, options, study, trial, device, priority, status, "
            "attempts, max_attempts, created_at, finished_at) VALUES (:key, :key, '{}', '{}', 'old', 4, 'any', 3, "
            ":status, 0, 3, :created, :finished)"
        ),
        {"key": key, "status": status, "created": datetime(2026, 1, 1), "finished": finished},
    )


def test_upgrading_to_tenancy_gives_what_existed_to_the_anonymous_owner_and_downgrades(empty_url: str) -> None:
    upgrade(empty_url, "0002")
    engine = make_engine(empty_url, poolclass=NullPool)
    cancelled_at = datetime(2026, 1, 2)
    with engine.begin() as connection:
        _candidate(connection, "a" * 64, "done", datetime(2026, 1, 3))
        _candidate(connection, "b" * 64, "cancelled", cancelled_at)
        connection.execute(
            text(
                "INSERT INTO submissions (candidate_id, study, trial, created_at) "
                "SELECT id, 'old', 4, created_at FROM candidates"
            )
        )
        connection.execute(
            text("INSERT INTO data_batches (id, shape, x, y, created_at) VALUES (:id, '{}', '{}', NULL, :at)"),
            {"id": "c" * 64, "at": datetime(2026, 1, 1)},
        )
        connection.execute(
            text("INSERT INTO api_tokens (name, token_hash, prefix, created_at) VALUES ('t', :hash, 'pf_', :at)"),
            {"hash": "d" * 64, "at": datetime(2026, 1, 1)},
        )
    upgrade(empty_url)
    with engine.connect() as connection:
        owned = connection.execute(
            text(
                "SELECT o.public_id, o.owner_id, o.study, o.trial, o.priority, o.cancelled_at, c.status "
                "FROM owned_candidates o JOIN candidates c ON c.id = o.candidate_id ORDER BY c.id"
            )
        ).all()
        assert [(r.owner_id, r.study, r.trial, r.priority, r.status) for r in owned] == [
            (0, "old", 4, 3, "done"),
            (0, "old", 4, 3, "cancelled"),
        ]
        assert owned[0].cancelled_at is None  # a raw read: SQLite answers text, PostgreSQL a datetime
        assert str(owned[1].cancelled_at).startswith(str(cancelled_at))
        assert all(re.fullmatch(r"[0-9a-f]{32}", r.public_id) for r in owned)
        assert owned[0].public_id != owned[1].public_id
        assert connection.execute(text("SELECT DISTINCT owner_id FROM submissions")).scalars().all() == [0]
        assert connection.execute(text("SELECT batch_id, owner_id FROM data_batch_owners")).all() == [("c" * 64, 0)]
        assert connection.execute(text("SELECT admin FROM api_tokens")).scalars().all() == [False]
    command.downgrade(alembic_config(empty_url), "0002")
    assert current_revision(engine) == "0002"
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM candidates")).scalar_one() == 2
    upgrade(empty_url)
    assert current_revision(engine) == "0007"
    engine.dispose()


def test_jobs_queued_before_engine_revisions_stay_claimable_by_any_worker(empty_url: str) -> None:
    """0004 records the engine revision a job is keyed under; a job queued before it has none,
    so any worker takes it (nothing queued waits forever), and going down drops only the column."""
    upgrade(empty_url, "0003")
    engine = make_engine(empty_url, poolclass=NullPool)
    with engine.begin() as connection:
        _candidate(connection, "a" * 64, "queued", None)
    upgrade(empty_url)
    sessions = make_sessionmaker(engine)
    with session_scope(sessions, write=True) as session:
        assert jobs.backlog(session, "f" * 16) == jobs.Backlog(claimable=1, running=0, foreign=0)
        job = jobs.claim(session, worker="w", device_kind="cpu", lease_seconds=30.0, engine="f" * 16)
        assert job is not None and job.spec == {}
    command.downgrade(alembic_config(empty_url), "0003")
    with engine.connect() as connection:
        assert connection.execute(text("SELECT status FROM candidates")).scalars().all() == ["running"]
    engine.dispose()


def _token(connection: object, name: str, digest: str, revoked: datetime | None = None) -> None:
    connection.execute(  # type: ignore[attr-defined]
        text(
            "INSERT INTO api_tokens (name, token_hash, prefix, admin, created_at, revoked_at) "
            "VALUES (:name, :hash, 'pf_', false, :at, :revoked)"
        ),
        {"name": name, "hash": digest * 64, "at": datetime(2026, 1, 1), "revoked": revoked},
    )


def test_one_active_token_per_name_renames_the_duplicates_older_versions_allowed(empty_url: str) -> None:
    """Before 0005 two creations racing past the name check could leave two active `ci`. The
    oldest keeps the name (revoking `ci` still means it), the others become `ci #ID`, revoked
    tokens keep theirs, every token still authenticates, and a name at the column's length is cut
    to fit its suffix. Going down drops only the index."""
    from sqlalchemy.exc import IntegrityError

    upgrade(empty_url, "0004")
    engine = make_engine(empty_url, poolclass=NullPool)
    long_name = "x" * 200
    with engine.begin() as connection:
        _token(connection, "ci", "a")
        _token(connection, "ci", "b", revoked=datetime(2026, 1, 2))
        _token(connection, "ci", "c")
        _token(connection, "ops", "d")
        _token(connection, "ci", "e")
        _token(connection, long_name, "f")
        _token(connection, long_name, "0")
    upgrade(empty_url)
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT id, name, token_hash, revoked_at FROM api_tokens ORDER BY id")).all()
    assert [(row.name, row.token_hash[0], row.revoked_at is None) for row in rows] == [
        ("ci", "a", True),
        ("ci", "b", False),
        (f"ci #{rows[2].id}", "c", True),
        ("ops", "d", True),
        (f"ci #{rows[4].id}", "e", True),
        (long_name, "f", True),
        ("x" * (200 - len(f" #{rows[6].id}")) + f" #{rows[6].id}", "0", True),
    ]
    with pytest.raises(IntegrityError), engine.begin() as connection:
        _token(connection, "ops", "9")
    with engine.begin() as connection:
        _token(connection, "ops", "8", revoked=datetime(2026, 1, 3))  # revoked: may share the name
    command.downgrade(alembic_config(empty_url), "0004")
    with engine.begin() as connection:
        _token(connection, "ops", "7")  # no index below 0005
        assert connection.execute(text("SELECT count(*) FROM api_tokens WHERE name = 'ops'")).scalar_one() == 3
    engine.dispose()


def test_study_names_widen_to_optunas_length_and_are_cut_back_going_down(empty_url: str) -> None:
    """Optuna names a study in up to 512 characters; the columns held 200, so a gate on such a
    study failed every check. PostgreSQL enforces the length: a 512-character name is refused
    below 0006 and stored from it; going down keeps each row, its name cut to 200."""
    from sqlalchemy.exc import DataError

    upgrade(empty_url, "0005")
    engine = make_engine(empty_url, poolclass=NullPool)
    long_study = "s" * 512
    with engine.begin() as connection:
        _candidate(connection, "a" * 64, "queued", None)
        connection.execute(
            text(
                "INSERT INTO submissions (candidate_id, study, trial, created_at) "
                "SELECT id, 'old', 1, created_at FROM candidates"
            )
        )
        connection.execute(
            text(
                "INSERT INTO owned_candidates (public_id, candidate_id, owner_id, study, trial, priority, created_at) "
                "SELECT 'p', id, 0, 'old', 1, 0, created_at FROM candidates"
            )
        )
    if engine.dialect.name == "postgresql":
        with pytest.raises(DataError), engine.begin() as connection:
            connection.execute(text("UPDATE submissions SET study = :s"), {"s": long_study})
    upgrade(empty_url)
    with engine.begin() as connection:
        for table in ("candidates", "owned_candidates", "submissions"):
            connection.execute(text(f"UPDATE {table} SET study = :s"), {"s": long_study})  # noqa: S608
    with engine.connect() as connection:
        assert connection.execute(text("SELECT study FROM submissions")).scalar_one() == long_study
    command.downgrade(alembic_config(empty_url), "0005")
    with engine.connect() as connection:
        for table in ("candidates", "owned_candidates", "submissions"):
            assert connection.execute(text(f"SELECT study FROM {table}")).scalars().all() == ["s" * 200]  # noqa: S608
    engine.dispose()


def _orphan_submission(connection: object) -> None:
    connection.execute(  # type: ignore[attr-defined]
        text("INSERT INTO submissions (candidate_id, study, trial, created_at) VALUES (999, 'x', 0, :at)"),
        {"at": datetime(2026, 1, 1)},
    )


def test_a_sqlite_migration_that_breaks_a_reference_is_rolled_back_whole(tmp_path: Path) -> None:
    """Foreign keys are off while SQLite migrates (a batch copy of candidates would cascade);
    a migration that leaves a row referencing nothing is refused, and the whole upgrade undone."""
    import shutil

    from service.store.migrations import HERE, MigrationsPending

    scripts = tmp_path / "migrations"
    shutil.copytree(HERE, scripts, ignore=shutil.ignore_patterns("__pycache__"))
    (scripts / "versions" / "0099_orphan.py").write_text(
        'from alembic import op\nimport sqlalchemy as sa\nrevision = "0099"\ndown_revision = "0007"\n'
        "branch_labels = None\ndepends_on = None\n\n\ndef upgrade() -> None:\n"
        '    op.execute(sa.text("INSERT INTO submissions (candidate_id, study, trial, created_at) '
        "VALUES (999, 'x', 0, '2026-01-01')\"))\n\n\ndef downgrade() -> None:\n    pass\n"
    )
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(url, "0005")
    config = alembic_config(url)
    config.set_main_option("script_location", str(scripts))
    with pytest.raises(MigrationsPending, match=r"\(0006, 0007, 0099\) was rolled back .* submissions row"):
        command.upgrade(config, "head")
    engine = make_engine(url, poolclass=NullPool)
    try:
        assert current_revision(engine) == "0005"  # 0006 too was undone
        with engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM submissions")).scalar_one() == 0
    finally:
        engine.dispose()


def test_rows_broken_before_a_sqlite_migration_do_not_block_it(tmp_path: Path) -> None:
    """A delete made with the keys off (the sqlite3 shell's default) leaves an orphan; the
    migration is not its cause, and every later start would have failed on it."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(url, "0005")
    engine = make_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            connection.connection.dbapi_connection.execute("PRAGMA foreign_keys=OFF")  # type: ignore[union-attr]
            with connection.begin():
                _orphan_submission(connection)
        upgrade(url)
        upgrade(url)  # at head: nothing to migrate, nothing checked
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()

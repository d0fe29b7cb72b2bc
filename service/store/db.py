"""Engine and sessions. SQLite runs in WAL mode with a busy timeout so that the API and
workers in other processes can share one file; PostgreSQL connections are replaced after a
server restart (the pool is dropped on the first disconnect error)."""

from __future__ import annotations

import contextlib
import datetime as _datetime
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote, urlsplit

from sqlalchemy import URL, Connection, Engine, create_engine, event, make_url, text
from sqlalchemy.orm import Session, sessionmaker

__all__ = [
    "WRITE_OPTION",
    "db_now",
    "insert_ignoring_duplicates",
    "make_engine",
    "make_sessionmaker",
    "ping",
    "read_connection",
    "session_scope",
    "sqlite_file",
    "utcnow",
]

SQLITE_BUSY_TIMEOUT_MS = 30_000
WRITE_OPTION = "preflight_write"


def utcnow() -> datetime:
    """Naive UTC: what every timestamp column holds (portable across SQLite and PostgreSQL)."""
    return datetime.now(UTC).replace(tzinfo=None)


def db_now(session: Session) -> datetime:
    """The database's current time, naive UTC: what leases and heartbeats are measured against, so
    that a worker whose own clock is off neither steals a healthy worker's job (reaping a lease that
    has not expired) nor writes leases that are already expired. PostgreSQL: the server's clock
    (``now()``, the transaction's start). SQLite lives in the processes that open the file, all on
    one host, so its clock is that host's (``strftime('now')``, millisecond resolution)."""
    if session.get_bind().dialect.name == "postgresql":
        value = session.execute(text("SELECT timezone('UTC', now())")).scalar_one()
        return value.replace(tzinfo=None) if value.tzinfo else value
    raw = session.execute(text("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')")).scalar_one()
    return _datetime.datetime.fromisoformat(raw)


def insert_ignoring_duplicates(session: Session, model: Any, keys: Sequence[str]) -> Any:
    """INSERT ... ON CONFLICT (keys) DO NOTHING on either database: one cached statement that
    runs with many parameter sets (SQLAlchemy batches them into multi-row INSERTs, with
    RETURNING when asked), and never fails on a row a concurrent transaction inserted first."""
    if session.get_bind().dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as postgresql_insert

        return postgresql_insert(model).on_conflict_do_nothing(index_elements=list(keys))
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(model).on_conflict_do_nothing(index_elements=list(keys))


def sqlite_file(url: str | URL) -> str | None:
    """The file a SQLite URL names, as sqlite opens it: the path of a URI filename
    (``sqlite:///file:/path/p.db?mode=ro&uri=true``), else the URL's database. None for an
    in-memory database (``sqlite://``, ``:memory:``, ``mode=memory``), which names no file, and
    for every other backend."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.query.get("mode") == "memory":
        return None
    path = parsed.database or ""
    if parsed.query.get("uri"):
        path = unquote(urlsplit(path).path) if path.startswith("file:") else path  # sqlite decodes %HH too
    return None if path in ("", ":memory:") else path


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url`` set up for concurrent use by API and workers."""
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
            **kwargs,
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        # pysqlite's own transaction handling is switched off; we emit BEGIN ourselves so
        # that a writing transaction takes the write lock up front (BEGIN IMMEDIATE) and
        # never fails to upgrade a read snapshot mid-transaction.
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    if "poolclass" not in kwargs:
        kwargs.setdefault("pool_size", 10)
        kwargs.setdefault("max_overflow", 20)
    # No pre-ping (a round trip per request): after a server restart, the first use of each
    # stale connection fails, SQLAlchemy drops the pool, the API answers that request 503
    # (clients retry) and workers retry it; later requests get fresh connections.
    return create_engine(url, pool_recycle=1800, **kwargs)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # autocommit at the driver; we send BEGIN
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_begin(connection: Any) -> None:
    immediate = connection.get_execution_options().get(WRITE_OPTION, False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def ping(engine: Engine) -> None:
    """Run ``SELECT 1``; raises the driver's error when the database is unreachable."""
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))


@contextmanager
def read_connection(engine: Engine) -> Iterator[Connection]:
    """A connection for one SELECT on the hot read paths. On PostgreSQL it runs in
    autocommit, which saves the BEGIN and COMMIT round trips (one statement is its own
    snapshot anyway); no ORM session is made."""
    bind = _autocommit(engine) if engine.dialect.name == "postgresql" else engine
    with bind.connect() as connection:
        yield connection


@contextmanager
def session_scope(factory: sessionmaker[Session], *, write: bool = False) -> Iterator[Session]:
    """A session whose transaction commits on success and rolls back on error.

    ``write=True`` starts the transaction with BEGIN IMMEDIATE on SQLite (no effect on
    PostgreSQL): use it for every transaction that may write.
    """
    bind = factory.kw.get("bind")
    if not write or bind is None:
        with factory() as session, session.begin():
            yield session
        return
    # SQLite has one writer at a time; threads of this process queue on a lock rather than
    # in SQLite's busy handler, whose sleeps make long latency tails.
    lock = _sqlite_write_lock(bind) if bind.dialect.name == "sqlite" else contextlib.nullcontext()
    with lock, factory(bind=_writer(bind)) as session, session.begin():
        yield session


_SQLITE_LOCKS: dict[str, threading.Lock] = {}


def _sqlite_write_lock(engine: Engine) -> threading.Lock:
    return _SQLITE_LOCKS.setdefault(engine.url.render_as_string(), threading.Lock())


_WRITERS: weakref.WeakKeyDictionary[Engine, Engine] = weakref.WeakKeyDictionary()
_AUTOCOMMIT: weakref.WeakKeyDictionary[Engine, Engine] = weakref.WeakKeyDictionary()


def _autocommit(engine: Engine) -> Engine:
    reader = _AUTOCOMMIT.get(engine)
    if reader is None:
        reader = _AUTOCOMMIT[engine] = engine.execution_options(isolation_level="AUTOCOMMIT")
    return reader


def _writer(engine: Engine) -> Engine:
    """The engine with the write option set: a session bound to it starts its transaction
    with BEGIN IMMEDIATE at its first statement (not earlier: validation before the first
    statement holds no lock)."""
    writer = _WRITERS.get(engine)
    if writer is None:
        writer = _WRITERS[engine] = engine.execution_options(**{WRITE_OPTION: True})
    return writer

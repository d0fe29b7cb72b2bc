"""`preflight serve`, `preflight worker`, `preflight db` and `preflight token`: running the
service and looking after its store."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import make_url

from service.cli.output import silence_stdout
from service.cli.usage import UsageError, settings_reason
from service.cli.version import version

__all__ = ["register"]

log = logging.getLogger("preflight")


LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def positive_integer(text: str) -> int:
    """An argparse type: an integer of at least 1 (argparse names it in its error)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


_WORKER_NAME_MAX = 180  # the jobs' worker column holds 200 characters, with ":cuda:NN" appended


def _check_worker_name(name: str | None) -> None:
    """``--name``: printable, not empty, short enough for the jobs' column (PostgreSQL refused a
    longer one at the first claim, with a traceback; SQLite stored it unchecked)."""
    if name is None:
        return
    if not name.strip() or not name.isprintable():
        raise UsageError(f"--name must be printable and not empty, got {name!r}")
    if len(name) > _WORKER_NAME_MAX:
        raise UsageError(f"--name must be at most {_WORKER_NAME_MAX} characters, got {len(name)}")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = subparsers.add_parser("serve", help="run the REST API (optionally with a worker)")
    serve.add_argument("--host", help="listen address (default 127.0.0.1; beyond localhost tokens are required)")
    serve.add_argument("--port", type=int, help="port (default 8000)")
    serve.add_argument(
        "--root-path", help="the path prefix a reverse proxy serves the API under and strips (/preflight)"
    )
    serve.add_argument(
        "--embedded-worker",
        action="store_true",
        help="also run a job runner in this process (off by default; one machine with no separate worker needs it)",
    )
    serve.add_argument(
        "--device", default="auto", help="device of the embedded worker (default auto; only with --embedded-worker)"
    )
    serve.add_argument(
        "--migrate",
        action="store_true",
        help="apply pending migrations first (always done on SQLite, which is created on first start)",
    )
    serve.add_argument("--workers", type=positive_integer, default=1, help="API processes (default 1)")
    serve.add_argument("--log-level", default="info", type=str.lower, choices=LOG_LEVELS)
    serve.set_defaults(handler=_serve)

    worker = subparsers.add_parser("worker", help="claim and condition queued candidates")
    where = worker.add_mutually_exclusive_group()
    where.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default auto)")
    where.add_argument(
        "--devices", choices=["all"], help="one child process per visible GPU (one CPU worker when there is none)"
    )
    worker.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    worker.add_argument("--max-jobs", type=positive_integer, help="exit after this many jobs")
    worker.add_argument("--name", help="worker name stored with its jobs, then ':DEVICE' (default host:pid)")
    worker.add_argument("--log-level", default="info", type=str.lower, choices=LOG_LEVELS)
    worker.set_defaults(handler=_worker)

    db = subparsers.add_parser("db", help="database migrations")
    db_commands = db.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    db_commands.add_parser("upgrade", help="apply pending migrations").set_defaults(handler=_db_upgrade)
    db_commands.add_parser("current", help="show the revision of the database").set_defaults(handler=_db_current)

    token = subparsers.add_parser("token", help="API bearer tokens")
    token_commands = token.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    create = token_commands.add_parser("create", help="create a token and print it (once)")
    create.add_argument("name", help="who or what uses it")
    create.add_argument(
        "--admin",
        action="store_true",
        help="an admin token: sees every token's candidates, batches and studies, and its priority is not capped",
    )
    create.set_defaults(handler=_token_create)
    revoke = token_commands.add_parser("revoke", help="revoke a token by id or name")
    revoke.add_argument("token", help="token id (a number) or name")
    revoke.add_argument(
        "--keep-jobs",
        action="store_true",
        help="leave its queued and running candidates to run (by default they are cancelled: only an admin "
        "token could read their reports)",
    )
    revoke.set_defaults(handler=_token_revoke)
    token_commands.add_parser("list", help="list tokens").set_defaults(handler=_token_list)


# the command-line options that set a field of the settings, for naming what the user typed
_OPTION_OF_FIELD = {"host": "--host", "port": "--port", "root_path": "--root-path"}


def _settings(**overrides: Any) -> Any:
    """The settings, with the options given on the command line over ``PREFLIGHT_*``. A value an
    option gave is refused under the option's name (``--port``), not the variable it overrides."""
    from pydantic import ValidationError

    from service.settings import Settings

    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        settings = Settings(**given)
    except ValidationError as error:
        faults = error.errors()
        if not any(fault["loc"] and fault["loc"][0] in given for fault in faults):
            raise  # the environment's alone: the CLI names each PREFLIGHT_* variable
        raise UsageError("invalid settings: " + "; ".join(_named_fault(fault, given) for fault in faults[:5])) from None
    _check_database_url(settings.database_url)
    return settings


def _spec_limits() -> None:
    """Read ``PREFLIGHT_SPEC_*`` now: the app reads them at start-up and the engine at every build,
    where a bad value was uvicorn's traceback ("Application startup failed") or the worker's failed
    warm-up and every job failed; the CLI names the variable instead."""
    from nas.validate import SpecLimits

    SpecLimits()


def _named_fault(fault: Any, given: dict[str, Any]) -> str:
    field = str(fault["loc"][0]) if fault["loc"] else ""
    source = _OPTION_OF_FIELD[field] if field in given else f"PREFLIGHT_{field.upper()}" if field else "$"
    return f"{source}: {settings_reason(fault)}"


def _check_database_url(url: str) -> None:
    """Refuse, as a usage error, a store no command can share: an in-memory SQLite database (each
    connection has its own, so `db upgrade` migrated one that vanished), a SQLite file in a folder
    that does not exist or that is a folder ("unable to open database file"), a URL that is none.
    A SQLite URI filename (``file:/path?uri=true``) is checked as the file it names."""
    from sqlalchemy.exc import ArgumentError

    from service.store.db import sqlite_file

    try:
        parsed = make_url(url)
        backend = parsed.get_backend_name()
        if backend in ("sqlite", "postgresql"):
            dialect = parsed.get_dialect()  # a driver SQLAlchemy has no plugin for: "Can't load plugin" at first use
    except (ArgumentError, ValueError):  # ValueError: a port that is no number (int() of "abc")
        shown = f" {url!r}" if "@" not in url else ""  # a password stays off the terminal
        raise UsageError(
            f"PREFLIGHT_DATABASE_URL{shown} is not a database URL: give sqlite:///path/to/preflight.db "
            "or postgresql+psycopg://user@host/db"
        ) from None
    if backend not in ("sqlite", "postgresql"):  # mysql asked to install mysqlclient; http, a dialect plugin
        hint = " (PostgreSQL's URLs start postgresql+psycopg://)" if backend == "postgres" else ""
        raise UsageError(
            f"PREFLIGHT_DATABASE_URL names a {backend} database{hint}; Preflight stores in SQLite (sqlite:///path) "
            "or PostgreSQL (postgresql+psycopg://user@host/db)"
        )
    if backend != "sqlite":
        return
    try:
        dialect().create_connect_args(parsed)  # its query's options, read as the first connection reads them
    except (TypeError, ValueError) as error:
        query = url.partition("?")[2]
        raise UsageError(f"PREFLIGHT_DATABASE_URL: an option of its query (?{query}) is invalid: {error}") from None
    file = sqlite_file(parsed)
    if file is None:
        raise UsageError(
            "PREFLIGHT_DATABASE_URL names an in-memory SQLite database, which lives and dies with one connection: "
            "nothing stored would reach a worker or the next command; give a file, e.g. sqlite:///./preflight.db"
        )
    if file.startswith("~"):
        raise UsageError(f"PREFLIGHT_DATABASE_URL: {file} starts with ~, which is not expanded; give the full path")
    path = Path(file)
    if path.is_dir():
        raise UsageError(
            f"PREFLIGHT_DATABASE_URL names the folder {path}; give a file in it, e.g. {path / 'preflight.db'}"
        )
    if not path.parent.is_dir():
        raise UsageError(
            f"PREFLIGHT_DATABASE_URL: the folder {path.parent} of the SQLite file does not exist; create it first"
        )


def _logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)


def _check_device(device: str) -> None:
    """Refuse, as a usage error, a device a worker cannot run on (``worker.engine.device.resolve_device``'s
    rule). Checked before the worker starts: its engine process would otherwise fail on it and be
    restarted with backoff, forever."""
    from worker.engine.device import resolve_device

    try:
        resolve_device(device)
    except ValueError as exc:  # DeviceUnavailable is one too
        raise UsageError(f"--device {device!r}: {' '.join(str(exc).split())[:300]}") from None


def _check_schema(settings: Any) -> None:
    """Raise MigrationsPending (exit 5) unless the database is at the latest migration; skipped
    with ``PREFLIGHT_CHECK_MIGRATIONS=false``. A SQLite file that does not exist is not created."""
    from service.store.db import make_engine
    from service.store.migrations import MigrationsPending, check_current, missing_sqlite_file

    if not settings.check_migrations:
        return
    missing = missing_sqlite_file(settings.database_url)
    if missing is not None:
        raise MigrationsPending(f"no database file at {missing}; run `preflight db upgrade` (or `preflight serve`)")
    engine = make_engine(settings.database_url)
    try:
        check_current(engine)
    finally:
        engine.dispose()


def _check_listen(host: str, port: int, host_source: str) -> None:
    """Refuse, in one line, an address the server could not listen on (uvicorn's own failure is a
    multi-line log and exit 3, the status of an unreachable service); an empty host would listen
    on every interface."""
    import socket

    if not host.strip():
        raise UsageError(f"{host_source} is empty; give 127.0.0.1, or 0.0.0.0 for every interface")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise UsageError(f"{host_source} {host!r} is not an address this machine can listen on ({exc})") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn sets it
        try:
            probe.bind(address)
        except OSError as exc:
            raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from service.api.app import create_app

    if args.workers > 1 and args.embedded_worker:  # before the database is touched or a line logged
        raise UsageError("--embedded-worker runs in one process; drop --workers")
    settings = _settings(host=args.host, port=args.port, root_path=args.root_path)
    _spec_limits()
    _check_listen(settings.host, settings.port, "--host" if args.host is not None else "PREFLIGHT_HOST")
    _logging(args.log_level)
    if args.embedded_worker:
        _check_device(args.device)
    sqlite = make_url(settings.database_url).get_backend_name() == "sqlite"
    if args.migrate or sqlite:  # an embedded SQLite file is created and migrated on first start
        from service.store.migrations import upgrade

        upgrade(settings.database_url)
    _check_schema(settings)
    log.info(
        "preflight %s: database %s; auth %s; %s",
        version(),
        make_url(settings.database_url).render_as_string(hide_password=True),
        "required (bearer tokens)" if settings.auth_required else "off (listening on localhost only)",
        f"an embedded worker on device {args.device}" if args.embedded_worker else "no worker in this process",
    )
    if settings.auth_required and not _any_token(settings):
        print(
            "preflight: bearer tokens are required here and none exists yet; "
            "create one with `preflight token create NAME`",
            file=sys.stderr,
        )
    if args.workers > 1:
        os.environ["PREFLIGHT_HOST"] = settings.host
        os.environ["PREFLIGHT_PORT"] = str(settings.port)
        os.environ["PREFLIGHT_ROOT_PATH"] = settings.root_path  # each process reads its settings again
        with _sigterm_is_a_clean_exit():
            uvicorn.run(
                "service.main:app",
                host=settings.host,
                port=settings.port,
                workers=args.workers,
                log_level=args.log_level,
                root_path=settings.root_path,
            )
        return 0
    background = None
    if args.embedded_worker:
        from service.embedded import embedded_runner

        background = embedded_runner(settings, device=args.device)
    app = create_app(settings, background=background)
    with _sigterm_is_a_clean_exit():
        uvicorn.run(app, host=settings.host, port=settings.port, log_level=args.log_level, root_path=settings.root_path)
    return 0


@contextlib.contextmanager
def _sigterm_is_a_clean_exit() -> Iterator[None]:
    """uvicorn shuts down on SIGTERM, then raises the signal again under the handler it found, so
    the process died by it (status 143, which Docker and systemd record as a failure). Under this
    handler the raised signal is a no-op, and ``serve`` exits 0, as the docs say."""
    previous = signal.signal(signal.SIGTERM, lambda _signum, _frame: None)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _any_token(settings: Any) -> bool:
    from service.store.db import make_engine, make_sessionmaker
    from service.store.tokens import any_active

    engine = make_engine(settings.database_url)
    try:
        with make_sessionmaker(engine)() as session:
            return any_active(session)
    finally:
        engine.dispose()


def _worker(args: argparse.Namespace) -> int:
    _check_worker_name(args.name)
    settings = _settings()
    _spec_limits()
    _logging(args.log_level)
    if args.devices != "all":
        _check_device(args.device)
    _check_schema(settings)
    if args.devices == "all":
        from worker.jobs.supervisor import Supervisor

        return Supervisor(settings, burst=args.burst, max_jobs=args.max_jobs, name=args.name).run()
    from worker.jobs.runner import Runner

    runner = Runner(settings, device=args.device, name=args.name, burst=args.burst, max_jobs=args.max_jobs)
    runner.install_signal_handlers()
    runner.run()
    return 0


def _db_upgrade(args: argparse.Namespace) -> int:
    from service.store.migrations import head_revision, upgrade

    settings = _settings()
    upgrade(settings.database_url)
    print(f"database at revision {head_revision()}")
    return 0


def _db_current(args: argparse.Namespace) -> int:
    from service.store.db import make_engine
    from service.store.migrations import checked_revision, head_revision, missing_sqlite_file

    database_url = _settings().database_url
    missing = missing_sqlite_file(database_url)
    if missing is not None:  # connecting would create the file: a check must not
        print(f"empty: no database file at {missing} (run `preflight db upgrade` or `preflight serve`)")
        return 1
    engine = make_engine(database_url)
    try:
        current = checked_revision(engine)  # a newer release's revision: exit 5, naming it
    finally:
        engine.dispose()
    head = head_revision()
    state = "up to date" if current == head else f"behind: run `preflight db upgrade` (head {head})"
    print(f"{current or 'empty'} ({state})")
    return 0 if current == head else 1


def _with_session(work: Any) -> Any:
    """Run ``work`` in one transaction on a database at the latest migration (a missing SQLite file
    is not created, a newer release's schema is not written to)."""
    from service.store.db import make_engine, make_sessionmaker, session_scope

    settings = _settings()
    _check_schema(settings)
    engine = make_engine(settings.database_url)
    try:
        with session_scope(make_sessionmaker(engine), write=True) as session:
            return work(session)
    finally:
        engine.dispose()


class _TokenNotShown(Exception):
    """The new token could not be written to standard output: its transaction rolls back."""


def _token_create(args: argparse.Namespace) -> int:
    from service.store.tokens import create_token

    if sys.stdout is None:  # started with standard output closed (`>&-`): print() would drop the token
        print(
            "preflight token create: standard output is closed, so the token could not be shown; nothing was created",
            file=sys.stderr,
        )
        return 1
    shown = False

    def create_and_show(session: Any) -> Any:
        created = create_token(session, name=args.name, admin=args.admin)
        nonlocal shown
        try:  # shown before the commit: a token nobody saw must not stay active, nor its name taken
            print(created.token)
            sys.stdout.flush()
            shown = True
        except OSError as exc:  # a full disk, a reader gone (`| head -c0`)
            silence_stdout()
            raise _TokenNotShown(exc.strerror or str(exc)) from None
        return created

    try:
        created = _with_session(create_and_show)
    except ValueError as exc:  # the name: empty, too long, control characters, digits only, taken
        print(f"preflight token create: {exc}", file=sys.stderr)
        return 2
    except _TokenNotShown as exc:
        print(
            f"preflight token create: could not write the token to standard output ({exc}); nothing was created",
            file=sys.stderr,
        )
        return 1
    except Exception:
        if shown:  # the commit failed after the print: that token opens nothing
            print("preflight token create: the token printed above was not stored and is void", file=sys.stderr)
        raise
    kind = "admin token" if created.admin else "token"
    print(f"{kind} {created.id} ({created.name}) created; it is shown only this once", file=sys.stderr)
    return 0


def _token_revoke(args: argparse.Namespace) -> int:
    from service.store.reports import cancel_all_owned
    from service.store.tokens import revoke_token, was_revoked

    if not args.token.strip():  # `token revoke "$UNSET"` answered "revoked 0 token(s)"
        raise UsageError("the token argument is empty: give a token's id or name (preflight token list)")
    # ASCII digits only: str.isdecimal took '٣' for token 3; beyond a 64-bit id it names no token
    # (SQLite cannot take it, and int() refuses more than 4,300 digits)
    by_id = re.fullmatch(r"[0-9]+", args.token) is not None
    token_id = int(args.token) if by_id and len(args.token) <= 19 and int(args.token) < 2**63 else None

    def revoke(session: Any) -> tuple[int, bool, int]:
        if by_id:
            revoked = [] if token_id is None else revoke_token(session, token_id=token_id)
        else:
            revoked = revoke_token(session, name=args.token)
        # by id, a token revoked before: its work queued since (within an API process's token cache
        # window) is cancelled now; by name that could be another, active token's
        again = not revoked and token_id is not None and was_revoked(session, token_id=token_id)
        owners = revoked or ([token_id] if again and token_id is not None else [])
        # in the revoke's transaction: a token is never revoked with its work left half cancelled
        cancelled = 0 if args.keep_jobs else cancel_all_owned(session, owner_ids=owners)
        return len(revoked), again, cancelled

    count, again, cancelled = _with_session(revoke)
    cancelled_its = f"; cancelled {cancelled} of its queued or running candidate(s)" if cancelled else ""
    if again:
        print(f"token {token_id} was revoked already{cancelled_its}")
        return 0
    if not count:  # "revoked 0 token(s)" read as a success that changed nothing, not as a miss
        shown = args.token if len(args.token) <= 40 else f"{args.token[:40]}... ({len(args.token)} characters)"
        which = f"with id {shown}" if by_id else f"named {args.token!r}"
        print(f"preflight token revoke: no active token {which}; preflight token list shows them", file=sys.stderr)
        return 1
    print(f"revoked {count} token(s){cancelled_its}")
    return 0


def _token_list(args: argparse.Namespace) -> int:
    from service.store.tokens import list_tokens

    for token in _with_session(list_tokens):
        state = f"revoked {token.revoked_at:%Y-%m-%d %H:%M}" if token.revoked_at else "active"
        role = "admin" if token.admin else "tenant"
        created = f"created {token.created_at:%Y-%m-%d %H:%M}"
        print(f"{token.id}\t{token.name}\t{token.prefix}...\t{role}\t{created}\t{state}")
    return 0

"""The `preflight` command. Each command group lives in its own module with a
``register(subparsers)`` function; this module only wires them together."""

from __future__ import annotations

import argparse
import errno
import importlib
import sys
from collections.abc import Sequence

from service.cli.output import silence_stdout
from service.cli.usage import UsageError, settings_reason
from service.cli.version import version
from service.revision import engine_revision

__all__ = ["main"]

# Modules under service.cli that add commands, in the order `preflight --help` lists them.
_COMMAND_MODULES = (
    "spec_commands",
    "server_commands",
    "condition_commands",
    "demo_commands",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="preflight",
        description="Condition and score NAS candidate architectures before training.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {version()} (engine revision {engine_revision()})"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMAND_MODULES:
        importlib.import_module(f"service.cli.{name}").register(subparsers)
    return parser


# Exit statuses of the failures a user can fix, each with one line on stderr (2 is argparse's usage error).
EXIT_USAGE = 2  # bad input: an argument, a file, a setting (argparse's own status)
EXIT_SERVICE = 3  # the service could not be reached, or answered with an error
EXIT_AUTH = 4  # the service refused the token
EXIT_DATABASE = 5  # the database could not be reached or is not migrated
EXIT_MISSING_EXTRA = 6  # an optional dependency is not installed
EXIT_MISSING_DATA = 7  # a dataset a command reads is not on this machine


# The extra that installs a module a command needs (the core install has the spec, the builder,
# the client and the local engine; pyproject.toml's extras add the rest).
_EXTRAS = {
    "matplotlib": "demo",
    "sklearn": "demo",
    "psycopg": "postgres",
    "fastapi": "service",
    "fastapi_offline": "service",
    "uvicorn": "service",
    "prometheus_client": "service",
    "sqlalchemy": "service",
    "alembic": "service",
}


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:500]


# what a path the user chose can do wrong (a missing folder, no permission, a file where a folder goes);
# other OS errors keep their traceback, since they are this program's faults more often than the user's
# the settings models and the prefix of the environment variables that set their fields
_SETTINGS = {"Settings": "PREFLIGHT_", "SpecLimits": "PREFLIGHT_SPEC_"}
_PATH_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)


# what a write to a full or failing disk raises (standard output redirected to a file: `> /dev/full`, and
# every print goes straight out under PYTHONUNBUFFERED=1, as the Dockerfile sets)
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)

# Modules whose package on PyPI has another name (a database URL can name their drivers).
_DISTRIBUTIONS = {"MySQLdb": "mysqlclient", "psycopg2": "psycopg2-binary", "pymysql": "PyMySQL"}


def _failure(error: Exception) -> tuple[int, str] | None:
    """(exit status, one-line message with the fix) for the failures a user can act on."""
    from nas.errors import AuthenticationError, ClientSettingError, PreflightConnectionError, PreflightError

    if isinstance(error, AuthenticationError):
        fix = "set PREFLIGHT_API_TOKEN to a valid token (preflight token create NAME)"
        return EXIT_AUTH, f"the service refused the token ({_one_line(error)}); {fix}"
    if isinstance(error, PreflightConnectionError):
        message = _one_line(error)
        if error.url is not None:  # the client's own error asks whether the service runs at the URL it tried
            return EXIT_SERVICE, message
        return EXIT_SERVICE, f"{message}; is `preflight serve` running at that URL (PREFLIGHT_URL)?"
    if isinstance(error, PreflightError):
        return EXIT_SERVICE, _one_line(error)
    if isinstance(error, UsageError | ClientSettingError):  # a URL or token the client cannot use is a setting
        return EXIT_USAGE, _one_line(error)
    from nas.fashion_mnist import FashionMNISTMissing

    if isinstance(error, FashionMNISTMissing):
        return EXIT_MISSING_DATA, _one_line(error)  # the message says how to get the files
    if isinstance(error, _PATH_ERRORS) and error.filename is not None:  # a path the user gave, or its folder
        return EXIT_USAGE, f"{error.strerror or _one_line(error)}: {error.filename}"
    if isinstance(error, OSError) and error.errno in _FULL and error.filename is None:  # a print to a full disk
        silence_stdout()
        return 1, f"could not write its output ({error.strerror or _one_line(error)})"
    if isinstance(error, OSError) and error.errno == errno.ENAMETOOLONG and error.filename is not None:
        name = str(error.filename)
        return EXIT_USAGE, f"{error.strerror}: {name[:80]}... ({len(name)} characters)"
    from pydantic import ValidationError

    if isinstance(error, ValidationError) and error.title in _SETTINGS:  # PREFLIGHT_* or the options that set them
        prefix = _SETTINGS[error.title]
        fields = "; ".join(
            f"{prefix + '_'.join(map(str, e['loc'])).upper() if e['loc'] else '$'}: {settings_reason(e)}"
            for e in error.errors()[:5]
        )
        return EXIT_USAGE, f"invalid settings (PREFLIGHT_* or the options that set them): {fields}"
    if isinstance(error, ModuleNotFoundError) and error.name:
        module = error.name.split(".")[0]
        extra = _EXTRAS.get(module)
        # from the clone: the package is not on PyPI
        fix = f'pip install ".[{extra}]" in the clone' if extra else f"pip install {_DISTRIBUTIONS.get(module, module)}"
        if module == "psycopg2":  # a URL naming psycopg 2's driver: the one installed is psycopg 3's
            fix += ", or name the driver Preflight installs: postgresql+psycopg://"
        return EXIT_MISSING_EXTRA, f"this command needs {module!r}, which is not installed: {fix}"
    try:
        from sqlalchemy.exc import ArgumentError, DatabaseError, OperationalError, ProgrammingError
    except ModuleNotFoundError:
        return None
    if isinstance(error, ArgumentError):  # a URL that is none is a setting to correct (docs/configuration.md)
        return EXIT_USAGE, f"PREFLIGHT_DATABASE_URL is not a database URL ({_one_line(error)})"
    from service.store.migrations import MigrationsPending

    if isinstance(error, MigrationsPending):  # not migrated, or migrated by a newer release
        return EXIT_DATABASE, _one_line(error)
    # DatabaseError itself: SQLite's "file is not a database"; its other subclasses (an integrity
    # error) are bugs, and keep their traceback
    if isinstance(error, OperationalError | ProgrammingError) or type(error) is DatabaseError:
        reason = _one_line(error.orig or error)
        if "no such table" in reason or ("relation" in reason and "does not exist" in reason):
            return EXIT_DATABASE, f"the database is not migrated ({reason}); run `preflight db upgrade`"
        return EXIT_DATABASE, f"the database is unavailable: {reason}; check PREFLIGHT_DATABASE_URL"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status. A failure the user can fix
    (service down, token refused, database unavailable, extra missing) is one line on stderr and
    its own exit status, not a traceback."""
    try:
        # numpy first: torch's C start-up imports it and swallows a Ctrl-C that lands there, so one
        # pressed in the first fraction of a second was lost and the command ran on
        import numpy  # noqa: F401

        args = build_parser().parse_args(argv)  # imports torch and SQLAlchemy: seconds a Ctrl-C can land in
        _warn_misspelt_settings()
    except KeyboardInterrupt:
        return 130
    try:
        status = int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`preflight describe spec.json | head`): not an error
        silence_stdout()
        return 0
    except Exception as error:
        failure = _failure(error)
        if failure is None:
            raise
        status, message = failure
        print(f"preflight {args.command}: {message}", file=sys.stderr)
        return status
    return _flushed(status, args.command)


# what reads PREFLIGHT_* besides the settings models: the client (nas.client) and the dataset's folder
_OTHER_VARIABLES = ("PREFLIGHT_URL", "PREFLIGHT_API_TOKEN", "PREFLIGHT_FASHION_MNIST_DIR")


def _warn_misspelt_settings() -> None:
    """A line on stderr for each PREFLIGHT_* variable that no setting reads but that is one typo
    from one that does: pydantic-settings ignores it, so PREFLIGHT_DATABASE_ULR left the default
    database in use with no word. Names far from every setting (CI's, compose's) say nothing."""
    import difflib
    import os

    given = sorted(name for name in os.environ if name.upper().startswith("PREFLIGHT_"))  # read in any case
    if not given:
        return  # the common case: no settings model is loaded for nothing
    from nas.validate import SpecLimits
    from service.settings import Settings

    known = sorted(
        {
            f"{model.model_config['env_prefix']}{name.upper()}"
            for model in (Settings, SpecLimits)
            for name in model.model_fields
        }
        | set(_OTHER_VARIABLES)
    )
    for name in given:
        if name.upper() not in known and (close := difflib.get_close_matches(name, known, n=1, cutoff=0.85)):
            print(f"preflight: {name} is no setting and is ignored; did you mean {close[0]}?", file=sys.stderr)


def _flushed(status: int, command: str) -> int:
    """``status`` once standard output is written out: a reader gone or a full disk shows at this
    flush, where it is answered, not at exit ("Exception ignored", status 120)."""
    if sys.stdout is None:
        return status
    try:
        sys.stdout.flush()
    except OSError as error:
        silence_stdout()
        if isinstance(error, BrokenPipeError):  # the reader went away: the command's own answer stands
            return status
        print(f"preflight {command}: could not write standard output ({error.strerror or error})", file=sys.stderr)
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())

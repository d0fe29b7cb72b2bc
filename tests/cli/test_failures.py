"""A failure the user can fix is one line on stderr with its own exit status, never a traceback."""

from __future__ import annotations

import argparse
import errno
from pathlib import Path

import pytest

import service.cli as cli
from nas.errors import AuthenticationError, ClientSettingError, PreflightConnectionError, ServerError


@pytest.mark.parametrize(
    ("error", "status", "words"),
    [
        (PreflightConnectionError("could not reach http://127.0.0.1:9"), cli.EXIT_SERVICE, "PREFLIGHT_URL"),
        (ClientSettingError("url 'notaurl' is not an http(s) URL with a host"), cli.EXIT_USAGE, "url 'notaurl'"),
        (AuthenticationError(401, {"title": "Unauthorized", "detail": "bad token"}), cli.EXIT_AUTH, "token create"),
        (ServerError(503, {"title": "Service Unavailable"}), cli.EXIT_SERVICE, "HTTP 503"),
        (ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib"), cli.EXIT_MISSING_EXTRA, "[demo]"),
        (
            ModuleNotFoundError("No module named 'psycopg2'", name="psycopg2"),
            cli.EXIT_MISSING_EXTRA,
            "postgresql+psycopg://",
        ),
        (PermissionError(13, "Permission denied", "/root/out"), cli.EXIT_USAGE, "Permission denied: /root/out"),
        # a path past the system's limit (Path.is_dir() raises it), a print to a full disk: tracebacks before
        (OSError(errno.ENAMETOOLONG, "File name too long", "z" * 5000), cli.EXIT_USAGE, "(5000 characters)"),
        (OSError(errno.ENOSPC, "No space left on device"), 1, "could not write its output (No space left"),
    ],
)
def test_each_fixable_failure_has_its_exit_status_and_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], error: Exception, status: int, words: str
) -> None:
    def fail(_args: argparse.Namespace) -> int:
        raise error

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    args = parser.parse_args(["schema"])
    monkeypatch.setattr(parser, "parse_args", lambda _argv=None: argparse.Namespace(**{**vars(args), "handler": fail}))
    assert cli.main(["schema"]) == status
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and words in err and err.startswith("preflight schema: ")


def _integrity_error() -> Exception:
    from sqlalchemy.exc import IntegrityError

    return IntegrityError("INSERT INTO api_tokens ...", {}, Exception("UNIQUE constraint failed"))


@pytest.mark.parametrize(
    "bug",
    [ZeroDivisionError("a bug"), OSError(5, "Input/output error", "/usr/lib/libx.so"), _integrity_error()],
    ids=["zero-division", "os-error", "integrity-error"],  # the last is no "database unavailable"
)
def test_a_bug_still_raises_with_its_traceback(monkeypatch: pytest.MonkeyPatch, bug: Exception) -> None:
    def fail(_args: argparse.Namespace) -> int:
        raise bug

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    args = parser.parse_args(["schema"])
    monkeypatch.setattr(parser, "parse_args", lambda _argv=None: argparse.Namespace(**{**vars(args), "handler": fail}))
    with pytest.raises(type(bug)):
        cli.main(["schema"])


def test_an_unreachable_service_is_asked_after_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The client asks "is the service running at URL?" and the command asked again, naming
    PREFLIGHT_URL, which `demo --url` never reads."""
    argv = [
        "demo",
        "--url",
        "http://127.0.0.1:1",
        "--trials",
        "1",
        "--no-plots",
        "--no-progress",
        "--out",
        str(tmp_path),
    ]
    assert cli.main(argv) == cli.EXIT_SERVICE
    err = capsys.readouterr().err
    assert err.count("running at") == 1 and "is the service running at http://127.0.0.1:1?" in err
    assert "PREFLIGHT_URL" not in err


@pytest.mark.parametrize(
    ("argv", "env", "words"),
    [
        (["--url", "notaurl"], {}, "url 'notaurl' is not an http(s) URL with a host"),
        (
            ["--url", "http://127.0.0.1:1"],
            {"PREFLIGHT_API_TOKEN": "bad token"},
            "PREFLIGHT_API_TOKEN holds a character",
        ),
    ],
    ids=["url", "token"],
)
def test_a_url_or_token_the_client_cannot_use_is_a_usage_error_not_a_traceback(
    argv: list[str],
    env: dict[str, str],
    words: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert cli.main(["demo", *argv, "--trials", "1", "--no-plots", "--no-progress", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and words in err


_INTERRUPTED_AT_NUMPY = """
import builtins, sys
real, fired = builtins.__import__, []
def interrupted(name, *args, **kwargs):
    if name == "numpy" and not fired:
        fired.append(True)
        raise KeyboardInterrupt  # as a Ctrl-C landing while numpy is first imported
    return real(name, *args, **kwargs)
import service.cli as cli
assert "numpy" not in sys.modules and "torch" not in sys.modules
builtins.__import__ = interrupted
status = cli.main(["schema"])
builtins.__import__ = real
sys.stdout.flush()
print("status", status, "fired", bool(fired), file=sys.stderr)
"""


def test_a_ctrl_c_while_torch_starts_ends_the_command_with_status_130() -> None:
    """torch's C start-up imports numpy and swallows a KeyboardInterrupt raised inside it: a Ctrl-C
    in the first fraction of a second was lost and `worker` or `condition` ran on (here `schema`
    printed and exited 0). numpy is now imported first, where the interrupt is answered."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _INTERRUPTED_AT_NUMPY], capture_output=True, text=True, timeout=600)
    assert done.stderr.strip().splitlines()[-1] == "status 130 fired True", done.stderr[-2000:]
    assert done.stdout == ""


def test_a_setting_misspelt_by_one_typo_is_named_with_the_one_meant_and_others_say_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """pydantic-settings ignores an unknown PREFLIGHT_* variable: PREFLIGHT_DATABASE_ULR left the
    default database in use with no word. A name far from every setting (CI's) stays silent."""
    monkeypatch.setenv("PREFLIGHT_DATABASE_ULR", "sqlite:////tmp/meant.db")
    monkeypatch.setenv("PREFLIGHT_LEASE_SECOND", "30")
    monkeypatch.setenv("PREFLIGHT_REQUIRE_CHROMIUM", "1")
    monkeypatch.setenv("PREFLIGHT_HOSt", "127.0.0.1")  # read as PREFLIGHT_HOST: names are taken in any case
    assert cli.main(["schema"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "preflight: PREFLIGHT_DATABASE_ULR is no setting and is ignored; did you mean PREFLIGHT_DATABASE_URL?",
        "preflight: PREFLIGHT_LEASE_SECOND is no setting and is ignored; did you mean PREFLIGHT_LEASE_SECONDS?",
    ]

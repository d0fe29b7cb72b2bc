"""`preflight db`, `preflight token`, `preflight worker` and `preflight serve --embedded-worker`,
run as a user runs them."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

import service.cli as cli
from service.revision import engine_revision
from service.testing import free_port, queue_candidates

TINY = {"steps": 1, "n_vectors": 1, "batch_size": 8, "diagnostics": False, "hessian_iterations": 0}


def preflight(db: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PREFLIGHT_DATABASE_URL": f"sqlite:///{db}", **env},
    )


def serve(env: dict[str, str], port: int, *args: str, output: bool = True) -> subprocess.Popen[str]:
    """``preflight serve`` on ``port`` in its own process; its log (stdout and stderr together)
    is readable from ``communicate()`` unless ``output`` is False."""
    return subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", *args, "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE if output else subprocess.DEVNULL,
        stderr=subprocess.STDOUT if output else subprocess.DEVNULL,
        text=True,
    )


def wait_until_ready(url: str, server: subprocess.Popen[str], seconds: float = 300.0) -> None:
    """Until ``/readyz`` answers 200: readiness, not speed, with a bound generous enough for a
    loaded machine; fails at once if the server exits."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if httpx.get(url + "/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline and server.poll() is None, "server did not start"
        time.sleep(0.2)


@pytest.mark.slow
def test_db_current_and_upgrade(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    empty = preflight(db, "db", "current")
    assert empty.returncode == 1 and "empty" in empty.stdout and "preflight db upgrade" in empty.stdout
    assert not db.exists()  # the check made an empty database file
    assert preflight(db, "db", "upgrade").returncode == 0
    current = preflight(db, "db", "current")
    assert current.returncode == 0 and "up to date" in current.stdout


@pytest.mark.slow
def test_worker_refuses_a_database_without_migrations(tmp_path: Path) -> None:
    """Exit 5 (the database), with the command's prefix; a missing SQLite file is not created."""
    db = tmp_path / "p.db"
    result = preflight(db, "worker", "--burst", "--device", "cpu")
    assert result.returncode == cli.EXIT_DATABASE and "preflight db upgrade" in result.stderr
    assert result.stderr.startswith("preflight worker: no database file at") and not db.exists()
    sqlite3.connect(db).close()  # an empty file: no tables
    result = preflight(db, "worker", "--burst", "--device", "cpu")
    assert result.returncode == cli.EXIT_DATABASE and "revision none (empty)" in result.stderr, result.stderr


@pytest.mark.slow
def test_a_database_migrated_by_a_newer_release_is_named_so_by_every_command(tmp_path: Path) -> None:
    """db current said "behind: run db upgrade", and db upgrade and serve died with alembic's
    traceback ("Can't locate revision")."""
    db = tmp_path / "p.db"
    assert preflight(db, "db", "upgrade").returncode == 0
    with sqlite3.connect(db) as connection:
        connection.execute("update alembic_version set version_num = '0099_future'")
    for args in (
        ["db", "current"],
        ["db", "upgrade"],
        ["worker", "--burst", "--device", "cpu"],
        ["serve", "--port", "0"],
    ):
        result = preflight(db, *args)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == cli.EXIT_DATABASE and len(lines) == 1, (args, result.stderr)
        assert "0099_future, which this release" in lines[0] and "newer Preflight" in lines[0], lines


@pytest.mark.slow
def test_two_migrations_of_one_new_sqlite_file_at_once_both_succeed(tmp_path: Path) -> None:
    """SQLite answers "database is locked" at once when two transactions both write: one of two
    `preflight db upgrade` (or two `serve`s) on a new file failed about one time in three."""
    for round_ in range(4):
        env = {**os.environ, "PREFLIGHT_DATABASE_URL": f"sqlite:///{tmp_path / f'race-{round_}.db'}"}
        both = [
            subprocess.Popen(
                [sys.executable, "-m", "service.cli", "db", "upgrade"], env=env, stderr=subprocess.PIPE, text=True
            )
            for _ in range(2)
        ]
        for process in both:
            _, error = process.communicate(timeout=120)
            assert process.returncode == 0, error


@pytest.mark.slow
def test_tokens_are_created_once_listed_and_revoked(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    preflight(db, "db", "upgrade")
    created = preflight(db, "token", "create", "optuna-box")
    token = created.stdout.strip()
    assert created.returncode == 0 and token.startswith("pf_") and len(token) > 40
    listed = preflight(db, "token", "list").stdout
    assert "optuna-box" in listed and "active" in listed and token not in listed
    assert preflight(db, "token", "revoke", "optuna-box").returncode == 0
    assert "revoked" in preflight(db, "token", "list").stdout
    assert preflight(db, "token", "revoke", "optuna-box").returncode == 1


@pytest.mark.slow
def test_a_token_name_that_revoke_could_misread_or_list_could_not_show_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    preflight(db, "db", "upgrade")
    assert preflight(db, "token", "create", "alice").returncode == 0
    for name, words in [
        ("1", "must not be a number"),  # `token revoke 1` revoked token id 1, alice, not this one
        ("alice", "named 'alice' already"),  # revoking by name revoked both
        ("   ", "must not be empty"),
        ("a\tb\nc", "printable"),  # broke the tab-separated list
        ("x" * 201, "at most 200 characters"),
        ("alice ", "must not begin or end with spaces"),  # listed as alice beside alice, revoked apart
        ("\udcff", "printable"),  # a byte that is not UTF-8
    ]:
        result = preflight(db, "token", "create", name)
        assert result.returncode == 2 and words in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert preflight(db, "token", "list").stdout.count("\n") == 1  # alice alone
    decomposed, composed = "jos\u0065\u0301", "jos\u00e9"  # one name as two terminals may type it
    assert preflight(db, "token", "create", decomposed).returncode == 0
    result = preflight(db, "token", "create", composed)
    assert result.returncode == 2 and "already" in result.stderr, result.stderr
    assert preflight(db, "token", "revoke", decomposed).stdout == "revoked 1 token(s)\n"
    result = preflight(db, "token", "revoke", "\udcff")  # was a UnicodeEncodeError traceback from SQLite
    assert result.returncode == 1 and result.stdout == "" and "no active token named" in result.stderr, result
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (
            ["token", "list"],
            {"PREFLIGHT_DATABASE_URL": "bogus"},
            "PREFLIGHT_DATABASE_URL 'bogus' is not a database URL",
        ),
        (["token", "list"], {}, "run `preflight db upgrade`"),  # a new SQLite file: no tables yet
        (["serve", "--port", "70000"], {}, "invalid settings: --port: Input should be less than or equal to 65535"),
        (["serve"], {"PREFLIGHT_PORT": "70000"}, "PREFLIGHT_PORT: Input should be less than or equal to 65535"),
        (
            ["serve", "--port", "70000"],
            {"PREFLIGHT_LEASE_SECONDS": "0"},
            "--port: Input should be less than or equal to 65535 (got 70000); PREFLIGHT_LEASE_SECONDS: Input should be "
            "greater than 0 (got '0')",
        ),
        (["worker", "--device", "bogus", "--burst"], {}, "--device 'bogus'"),  # retried the engine forever
        (["worker", "--device", "mps", "--burst"], {}, "device must be auto, cpu, cuda or cuda:N"),  # torch parses it
        (["describe", "--seed", "-1"], {}, "must be in [0, 2**64), got -1"),  # torch read it as 2**64 - 1
        (["worker", "--device", "cuda", "--burst"], {"CUDA_VISIBLE_DEVICES": ""}, "CUDA is not available"),
        (["demo", "--out", "/proc/forbidden", "--no-progress"], {}, "/proc/forbidden"),
        (["describe"], {"PREFLIGHT_SPEC_MAX_BLOCKS": "abc"}, "PREFLIGHT_SPEC_MAX_BLOCKS: Input should be"),
        (["describe", ""], {}, "the spec file argument is empty"),  # described the example network
        (["worker", "--name", "n" * 250, "--burst"], {}, "at most 180 characters"),  # PostgreSQL's column: traceback
        (["worker", "--name", "a\tb", "--burst"], {}, "must be printable"),
        (["serve", "--host", ""], {}, "is empty"),  # listened on every interface
        (
            ["serve", "--host", "no-such-host.invalid"],
            {},
            "--host 'no-such-host.invalid' is not an address this machine can listen on",
        ),
        (
            ["serve"],
            {"PREFLIGHT_HOST": "no-such-host.invalid"},
            "PREFLIGHT_HOST 'no-such-host.invalid' is not an address",
        ),
        (
            ["serve", "--embedded-worker", "--workers", "2"],
            {},
            "--embedded-worker runs in one process",
        ),  # migrated first
        (["token", "revoke", " "], {}, "the token argument is empty"),  # "revoked 0 token(s)"
        (
            ["serve"],
            {"PREFLIGHT_MAX_BATCH": "25O"},
            "PREFLIGHT_MAX_BATCH: Input should be a valid integer, unable to parse string as an integer (got '25O')",
        ),  # the value was not shown: a typo hides in a long one
        (["serve"], {"PREFLIGHT_SPEC_MAX_LAYERS": "x"}, "PREFLIGHT_SPEC_MAX_LAYERS: Input should be a valid integer"),
        (["worker", "--burst"], {"PREFLIGHT_SPEC_MAX_LAYERS": "x"}, "PREFLIGHT_SPEC_MAX_LAYERS: Input should be"),
    ],
    ids=[
        "bad-url",
        "not-migrated",
        "port-option",
        "port-variable",
        "port-option-and-another-variable",
        "device-bogus",
        "device-mps",
        "describe-seed",
        "device-cuda",
        "out",
        "spec-limit-setting",
        "describe-empty",
        "worker-name-long",
        "worker-name-tab",
        "serve-empty-host",
        "serve-unknown-host-option",
        "serve-unknown-host-variable",
        "serve-embedded-workers",
        "revoke-empty",
        "setting-value-shown",
        "serve-spec-limit",  # uvicorn's start-up traceback
        "worker-spec-limit",  # a failed warm-up, and every job failed
    ],
)
def test_a_setting_or_argument_that_cannot_work_is_one_line_and_a_non_zero_status(
    tmp_path: Path, args: list[str], env: dict[str, str], words: str
) -> None:
    result = preflight(tmp_path / "p.db", *args, **env)
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1 and words in lines[0], result.stderr
    assert lines[0].startswith(f"preflight {args[0]}: "), lines  # a --device was refused as "preflight: ..."
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "p.db").exists()  # refused before the database was created or migrated


def test_serve_on_a_port_in_use_is_one_line_and_a_usage_error(tmp_path: Path) -> None:
    """uvicorn's own failure was a multi-line log and exit 3, the status of an unreachable service."""

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = preflight(tmp_path / "p.db", "serve", "--port", str(port))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == cli.EXIT_USAGE and len(lines) == 1, result.stderr
    assert lines[0] == f"preflight serve: cannot listen on 127.0.0.1:{port}: Address already in use"


def _queue_for(db: Path, owner_ids: list[int], first_width: int = 2) -> list[int]:
    """One queued candidate per owner id (a token's id), as the API's submission stores it: linear
    layers of widths from ``first_width`` on."""
    return [
        queue_candidates(
            f"sqlite:///{db}",
            [{"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": width}]}]}],
            TINY,
            owner_id=owner_id,
        )[0]
        for width, owner_id in enumerate(owner_ids, start=first_width)
    ]


def _statuses(db: Path, ids: list[int]) -> list[str]:
    with sqlite3.connect(db) as connection:
        found = dict(connection.execute("SELECT id, status FROM candidates").fetchall())
    return [found[id_] for id_ in ids]


@pytest.mark.slow
def test_revoking_a_token_cancels_its_queued_work_unless_told_to_keep_it(tmp_path: Path) -> None:
    """A revoked token's queued jobs went on to take the workers, for reports that only an admin
    could read; another token's stay queued, and --keep-jobs leaves them."""
    db = tmp_path / "p.db"
    preflight(db, "db", "upgrade")
    for name in ("leaked", "other", "rotated"):
        assert preflight(db, "token", "create", name).returncode == 0
    leaked_a, leaked_b, other, rotated = _queue_for(db, [1, 1, 2, 3])
    result = preflight(db, "token", "revoke", "leaked")
    assert result.returncode == 0, result
    assert result.stdout == "revoked 1 token(s); cancelled 2 of its queued or running candidate(s)\n"
    result = preflight(db, "token", "revoke", "3", "--keep-jobs")
    assert result.returncode == 0 and result.stdout == "revoked 1 token(s)\n", result
    assert _statuses(db, [leaked_a, leaked_b, other, rotated]) == ["cancelled", "cancelled", "queued", "queued"]
    # an API process that checked the token just before the revoke takes its submissions for
    # PREFLIGHT_TOKEN_CACHE_SECONDS more: revoking it again by id cancels those (it cancelled nothing)
    (late,) = _queue_for(db, [1], first_width=10)
    result = preflight(db, "token", "revoke", "1")
    assert result.returncode == 0, result
    assert result.stdout == "token 1 was revoked already; cancelled 1 of its queued or running candidate(s)\n"
    assert _statuses(db, [late, other]) == ["cancelled", "queued"]


def test_a_file_that_is_no_database_and_a_token_id_beyond_64_bits_are_one_line(tmp_path: Path) -> None:
    """Both were tracebacks: sqlite's "file is not a database", and SQLite's OverflowError for the id."""
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database, " * 512)
    result = preflight(garbage, "token", "list")
    assert result.returncode == cli.EXIT_DATABASE and "Traceback" not in result.stderr, result.stderr
    assert "file is not a database" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    db = tmp_path / "p.db"
    assert preflight(db, "db", "upgrade").returncode == 0
    assert preflight(db, "token", "create", "third").returncode == 0  # token 1
    result = preflight(db, "token", "revoke", "\u0661")  # ARABIC-INDIC DIGIT ONE: revoked token 1
    assert result.returncode == 1 and "no active token named" in result.stderr, result
    assert "third" in preflight(db, "token", "list").stdout
    result = preflight(db, "token", "revoke", "9" * 5000)  # int() refuses 4,300 digits: a traceback
    assert result.returncode == 1 and "Traceback" not in result.stderr and "(5000 characters)" in result.stderr
    result = preflight(db, "token", "revoke", "9" * 25)
    assert result.returncode == 1 and result.stdout == "", result
    assert (
        result.stderr
        == f"preflight token revoke: no active token with id {'9' * 25}; preflight token list shows them\n"
    )


def test_an_unreachable_database_is_one_line_naming_the_setting_and_its_own_exit_status(tmp_path: Path) -> None:
    closed = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nothing?connect_timeout=5"
    result = preflight(tmp_path / "unused.db", "token", "list", PREFLIGHT_DATABASE_URL=closed)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 5 and len(lines) == 1, result.stderr
    assert lines[0].startswith("preflight token: the database is unavailable") and "PREFLIGHT_DATABASE_URL" in lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_serve_with_embedded_worker_end_to_end(tmp_path: Path) -> None:
    db, port = tmp_path / "p.db", free_port()
    preflight(db, "db", "upgrade")
    token = preflight(db, "token", "create", "e2e").stdout.strip()
    env = {
        **os.environ,
        "PREFLIGHT_DATABASE_URL": f"sqlite:///{db}",
        "PREFLIGHT_REQUIRE_AUTH": "true",
        "PREFLIGHT_POLL_SECONDS": "0.05",
    }
    server = serve(env, port, "--embedded-worker", "--device", "cpu")
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_ready(url, server)
        spec = {"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": 4}, {"type": "tanh"}]}]}
        assert httpx.post(url + "/v1/candidates", json={"spec": spec}).status_code == 401
        auth = {"authorization": f"Bearer {token}"}
        submitted = httpx.post(url + "/v1/candidates", json={"spec": spec, "options": TINY}, headers=auth).json()
        done = httpx.get(
            f"{url}/v1/candidates/{submitted['id']}/wait", params={"timeout": 60}, headers=auth, timeout=90
        ).json()
        assert done["status"] == "done" and done["report"]["scales"]
    finally:
        server.send_signal(signal.SIGTERM)
        output = server.communicate(timeout=60)[0]
    # uvicorn raises the signal again once shut down: the process died by it (143), where a process
    # manager expects a clean stop to exit 0 (docs/configuration.md)
    assert server.returncode == 0 and "Application shutdown complete" in output, output
    assert "stopped after 1 job(s)" in output


def test_version_is_printed() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stdout.startswith("preflight ")
    assert result.stdout.split()[2:] == ["(engine", "revision", f"{engine_revision()})"]


@pytest.mark.slow
def test_serve_creates_and_migrates_a_new_sqlite_database_and_says_what_it_runs(tmp_path: Path) -> None:
    db, port = tmp_path / "fresh" / "p.db", free_port()
    db.parent.mkdir()
    env = {**os.environ, "PREFLIGHT_DATABASE_URL": f"sqlite:///{db}"}
    server = serve(env, port)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_ready(url, server)
        assert httpx.get(url + "/healthz").status_code == 200
    finally:
        server.send_signal(signal.SIGTERM)
        output = server.communicate(timeout=60)[0]
    assert preflight(db, "db", "current").returncode == 0  # at the head revision
    assert f"database sqlite:///{db}" in output and "auth off" in output and "no worker in this process" in output
    assert '"GET /healthz HTTP/1.1" 200' in output, output  # access log on


@pytest.mark.slow
def test_healthz_stays_under_100_ms_while_a_4_mb_spec_is_refused(tmp_path: Path) -> None:
    """The issue's spec of 161,304 layers (4 MB), posted five times to a served process while
    another client polls ``/healthz``: every refusal is a 422 naming the layer limit, ``/healthz``
    answers while each is in flight, and the longest it waits during a refusal (the median of five
    refusals) is far from the seconds that validating the spec on the event loop took before the
    layer count: under half a second, or five times the body's decode (``json.loads``, which holds
    the interpreter wherever it runs), timed in this process just before, on a machine loaded
    enough to stretch it. A wall-clock bound any tighter is the machine's, not the server's: the
    longest waits were 41 to 76 ms on one 2-core machine and 96 to 120 ms on a slower one (docs/service.md).
    Counting all the layers before refusing once held the loop two to three times as long as the
    decode; that regression is pinned without timing by ``count_layers`` stopping one layer past
    the limit (``tests/nas/test_spec_v11.py``)."""
    port = free_port()
    env = {**os.environ, "PREFLIGHT_DATABASE_URL": f"sqlite:///{tmp_path / 'p.db'}"}
    server = serve(env, port, output=False)
    spec = {"input_shape": [4], "blocks": [{"layers": [{"type": "relu"}] * 161_304}]}
    compact = json.dumps({"spec": spec}).encode()  # encoded once, before any timing
    body = compact + b" " * (4 * 2**20 - len(compact))  # padded to the body limit: 4 MiB, still legal
    decode = statistics.median(_seconds(lambda: json.loads(body)) for _ in range(3))
    longest_waits = []
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_ready(url, server)
        with httpx.Client(base_url=url, timeout=60) as poster, httpx.Client(base_url=url, timeout=60) as poller:
            for _ in range(5):
                answered = threading.Event()
                refusal: list[httpx.Response] = []

                def post(answered: threading.Event = answered, refusal: list[httpx.Response] = refusal) -> None:
                    headers = {"content-type": "application/json"}
                    refusal.append(poster.post("/v1/candidates", content=body, headers=headers))
                    answered.set()

                thread = threading.Thread(target=post)
                thread.start()
                waits = []
                while not answered.is_set():
                    start = time.perf_counter()
                    assert poller.get("/healthz").status_code == 200
                    waits.append(time.perf_counter() - start)
                thread.join()
                assert refusal[0].status_code == 422 and "PREFLIGHT_SPEC_MAX_LAYERS" in refusal[0].json()["detail"]
                longest_waits.append(max(waits))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    bound = max(0.5, 5 * decode)
    assert statistics.median(longest_waits) < bound, ([f"{w * 1000:.0f} ms" for w in longest_waits], bound)


def _seconds(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("sqlite://", "an in-memory SQLite database"),  # db upgrade migrated a database that vanished with it
        ("sqlite:///:memory:", "an in-memory SQLite database"),
        ("sqlite:///file:x?mode=memory&uri=true", "an in-memory SQLite database"),
        ("sqlite:///file::memory:?uri=true", "an in-memory SQLite database"),
        ("sqlite:///{tmp}/no/such/folder/p.db", "the folder {tmp}/no/such/folder of the SQLite file does not exist"),
        (
            "sqlite:///file:{tmp}/no/such/folder/p.db?uri=true",  # a URI filename was not checked at all
            "the folder {tmp}/no/such/folder of the SQLite file does not exist",
        ),
        ("sqlite:///{tmp}", "names the folder {tmp}; give a file in it"),  # "unable to open database file"
        ("sqlite:///~/p.db", "~/p.db starts with ~, which is not expanded"),
        ("user:secret@localhost/db", "is not a database URL"),
        (
            "mysql://user:secret@localhost/db",
            "names a mysql database; Preflight stores in SQLite",
        ),  # "pip install mysqlclient"
        ("postgres://user@localhost/db", "(PostgreSQL's URLs start postgresql+psycopg://)"),
        ("postgresql+psycopg://user:secret@localhost:abc/db", "is not a database URL"),  # int() traceback
        ("postgresql+nodriver://user:secret@localhost/db", "is not a database URL"),  # exit 5, "Can't load plugin"
        ("sqlite:///{tmp}/p.db?timeout=abc", "an option of its query (?timeout=abc) is invalid"),  # was a traceback
    ],
    ids=[
        "memory",
        "memory-named",
        "memory-uri",
        "memory-uri-named",
        "no-folder",
        "no-folder-uri",
        "a-folder",
        "tilde",
        "no-url",
        "mysql",
        "postgres",
        "port-not-a-number",
        "unknown-driver",
        "sqlite-option",
    ],
)
def test_a_database_url_no_command_can_use_is_a_usage_error_for_every_command(
    tmp_path: Path, url: str, words: str
) -> None:
    for args in (["db", "upgrade"], ["db", "current"], ["token", "list"], ["worker", "--burst", "--device", "cpu"]):
        result = preflight(tmp_path / "unused.db", *args, PREFLIGHT_DATABASE_URL=url.format(tmp=tmp_path))
        lines = result.stderr.strip().splitlines()
        assert result.returncode == cli.EXIT_USAGE and len(lines) == 1, (args, result.stderr)
        assert words.format(tmp=tmp_path) in lines[0] and "secret" not in lines[0], lines


def buffered_preflight(stdout: Any, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``preflight ARGS`` writing to ``stdout`` through a buffer (no PYTHONUNBUFFERED), as into a
    file or a pipe: a failed write shows only when the buffer is flushed."""
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"} | env
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
        timeout=120,
        preexec_fn=(lambda: os.close(1)) if stdout is None else None,  # None: started with stdout closed
    )


@contextmanager
def reader_gone() -> Iterator[int]:
    """The write end of a pipe whose reader has gone (`| head -c0`)."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        yield writer
    finally:
        os.close(writer)


@pytest.mark.slow
def test_a_token_that_cannot_be_shown_is_not_created(tmp_path: Path) -> None:
    """A token printed to a full disk, a closed stdout or a reader gone stayed active, its secret
    seen by nobody and its name taken; `token list` on a missing file created an empty one."""
    db = tmp_path / "p.db"
    assert preflight(db, "token", "list").returncode == cli.EXIT_DATABASE and not db.exists()
    assert preflight(db, "db", "upgrade").returncode == 0
    url = f"sqlite:///{db}"
    with open("/dev/full", "w") as full:
        result = buffered_preflight(full, "token", "create", "full", PREFLIGHT_DATABASE_URL=url)
    assert result.returncode == 1 and "No space left on device); nothing was created" in result.stderr, result.stderr
    closed = buffered_preflight(None, "token", "create", "closed", PREFLIGHT_DATABASE_URL=url)
    assert closed.returncode == 1 and "standard output is closed" in closed.stderr, closed.stderr
    with reader_gone() as writer:
        gone = buffered_preflight(writer, "token", "create", "gone", PREFLIGHT_DATABASE_URL=url)
    assert gone.returncode == 1 and "Broken pipe); nothing was created" in gone.stderr, gone.stderr
    assert "Exception ignored" not in gone.stderr
    assert preflight(db, "token", "list").stdout == ""  # none of the three is active, or stored
    shown = preflight(db, "token", "create", "full")  # and each name is free
    assert shown.returncode == 0 and shown.stdout.startswith("pf_")


def test_output_to_a_reader_that_went_away_is_not_an_error(tmp_path: Path) -> None:
    """The flush at exit raised BrokenPipeError outside the handler: "Exception ignored" and exit 120."""
    with reader_gone() as writer:
        result = buffered_preflight(writer, "example", "mlp")
    assert result.returncode == 0 and result.stderr == "", result.stderr


def test_a_sqlite_uri_filename_is_read_as_the_file_it_names(tmp_path: Path) -> None:
    """``sqlite:///file:/path?uri=true`` names /path: the schema check took "file:/path" for a path
    that did not exist."""
    url = f"sqlite:///file:{tmp_path}/p.db?uri=true"
    assert (
        preflight(tmp_path / "unused.db", "token", "list", PREFLIGHT_DATABASE_URL=url).returncode == cli.EXIT_DATABASE
    )
    assert not (tmp_path / "p.db").exists()
    assert preflight(tmp_path / "unused.db", "db", "upgrade", PREFLIGHT_DATABASE_URL=url).returncode == 0
    result = preflight(tmp_path / "unused.db", "token", "list", PREFLIGHT_DATABASE_URL=url)
    assert result.returncode == 0 and result.stderr == "", result.stderr


def test_output_to_a_full_disk_is_one_line_and_status_1_and_a_reader_gone_keeps_the_status(tmp_path: Path) -> None:
    """At exit the flush failed outside any handler: a traceback, "Exception ignored" and status 120."""
    with open("/dev/full", "w") as full:
        result = buffered_preflight(full, "example", "mlp")
    assert result.returncode == 1, result.stderr
    assert result.stderr == "preflight example: could not write standard output (No space left on device)\n"
    with reader_gone() as writer:  # db current's own answer, 1 ("empty"), not 0 for the pipe
        empty = buffered_preflight(writer, "db", "current", PREFLIGHT_DATABASE_URL=f"sqlite:///{tmp_path / 'p.db'}")
    assert empty.returncode == 1 and empty.stderr == "", empty.stderr


def _own_network_address() -> str | None:
    """This machine's address on its default route (no packet is sent), or None without one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


@pytest.mark.slow
def test_the_app_served_by_uvicorn_on_every_interface_asks_a_token_of_requests_from_elsewhere(tmp_path: Path) -> None:
    """`uvicorn service.main:app --host 0.0.0.0` (a documented way to run it) with PREFLIGHT_HOST
    at its loopback default served every tenant's candidates to anyone, with auth off: the settings
    decided, not the address the request came in on. A request from this machine still needs none;
    one a proxy relayed (X-Forwarded-For) does."""
    address = _own_network_address()
    if address is None:
        pytest.skip("this machine has no network address besides loopback")
    db, port = tmp_path / "p.db", free_port()
    preflight(db, "db", "upgrade")
    env = {k: v for k, v in os.environ.items() if k not in ("PREFLIGHT_HOST", "PREFLIGHT_REQUIRE_AUTH")}
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "service.main:app", "--host", "0.0.0.0", "--port", str(port)],
        env={**env, "PREFLIGHT_DATABASE_URL": f"sqlite:///{db}"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    direct = httpx.Client(trust_env=False)  # straight to this machine, whatever HTTP(S)_PROXY says
    try:
        wait_until_ready(f"http://127.0.0.1:{port}", cast(Any, server))
        assert direct.get(f"http://127.0.0.1:{port}/v1/candidates").status_code == 200  # this machine
        remote = direct.get(f"http://{address}:{port}/v1/candidates")
        assert remote.status_code == 401 and remote.headers["www-authenticate"].startswith("Bearer"), remote.text
        relayed = direct.get(f"http://127.0.0.1:{port}/v1/candidates", headers={"x-forwarded-for": "203.0.113.9"})
        assert relayed.status_code == 401
        posted = direct.post(f"http://{address}:{port}/v1/candidates", json={"spec": {}})
        assert posted.status_code == 401  # refused before the body is read, as with auth on
    finally:
        direct.close()
        server.terminate()
        server.wait(60)

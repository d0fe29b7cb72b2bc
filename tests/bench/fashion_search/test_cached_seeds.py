"""A report of cached seeds reads them whatever engine ran them, and says which engine that was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.fashion_search.report import _engine_line
from bench.fashion_search.run import config, seed_path, seed_results
from bench.fashion_search.searches import SEARCHES
from bench.pipeline.run import engine_version, write_json


def _seed(out: Path, seed: int, engine: str) -> None:
    write_json(
        seed_path(out, seed),
        {"config": config(30, 4) | {"engine": engine}, "seed": seed, "searches": dict.fromkeys(SEARCHES, [])},
    )


def test_a_run_reruns_seeds_of_an_older_engine_and_a_report_reads_them(tmp_path: Path) -> None:
    _seed(tmp_path, 0, "an-older-engine")
    _seed(tmp_path, 1, engine_version())
    assert sorted(seed_results(tmp_path, [0, 1], 30, 4)) == [1]
    assert sorted(seed_results(tmp_path, [0, 1], 30, 4, any_engine=True)) == [0, 1]
    # another configuration is never read, whatever the engine
    assert seed_results(tmp_path, [0, 1], 10, 4, any_engine=True) == {}


def test_the_report_names_the_engine_that_ran_the_seeds(tmp_path: Path) -> None:
    _seed(tmp_path, 0, "an-older-engine")
    old = _engine_line(seed_results(tmp_path, [0], 30, 4, any_engine=True))
    assert "`an-older-engine` ran seeds 0" in old[0] and engine_version() in old[0] and "reruns" in old[0]
    _seed(tmp_path, 1, engine_version())  # a seed run since: both engines named, each with its seeds
    mixed = _engine_line(seed_results(tmp_path, [0, 1], 30, 4, any_engine=True))[0]
    assert "`an-older-engine` ran seeds 0" in mixed and f"`{engine_version()}` (this checkout's) ran seeds 1" in mixed
    _seed(tmp_path, 0, engine_version())
    assert _engine_line(seed_results(tmp_path, [0], 30, 4)) == [f"Engine: `{engine_version()}` (this checkout's).", ""]


def test_keeping_older_engines_runs_only_the_missing_seeds(tmp_path: Path, monkeypatch) -> None:
    import bench.fashion_search.run as runner

    ran: list[int] = []
    monkeypatch.setattr(runner, "_one_seed", lambda task: ran.append(task[1]) or task[1])  # type: ignore[func-returns-value]
    _seed(tmp_path, 0, "an-older-engine")
    runner.run(tmp_path, [0, 1], 30, 4, jobs=1, any_engine=True)
    assert ran == [1]
    runner.run(tmp_path, [0, 1], 30, 4, jobs=1)  # without it, the older engine's seed reruns too
    assert ran == [1, 0, 1]


def test_a_search_added_later_runs_alone_on_the_seeds_that_have_the_others(tmp_path: Path, monkeypatch) -> None:
    import bench.fashion_search.run as runner

    tasks: list[tuple] = []
    monkeypatch.setattr(runner, "_one_seed", lambda task: tasks.append(task) or task[1])  # type: ignore[func-returns-value]
    older: dict[str, list[Any]] = dict.fromkeys([n for n in SEARCHES if n != "lsuv, no gate"], [])
    write_json(
        seed_path(tmp_path, 0),
        {"config": config(30, 4) | {"engine": "an-older-engine"}, "seed": 0, "searches": older},
    )
    runner.run(tmp_path, [0], 30, 4, jobs=1, any_engine=True)
    assert [t[4] for t in tasks] == [["lsuv, no gate"]]
    runner.run(tmp_path, [0], 30, 4, jobs=1)  # without keeping older engines: the whole seed again
    assert tasks[-1][4] is None


def test_an_added_search_joins_its_seed_and_is_named_with_its_engine(tmp_path: Path, monkeypatch) -> None:
    import bench.fashion_search.evaluate as evaluate
    import bench.fashion_search.searches as searches
    from bench.fashion_search.run import _one_seed
    from bench.pipeline.run import read_json

    older: dict[str, list[Any]] = dict.fromkeys([n for n in SEARCHES if n != "lsuv, no gate"], [{"number": 0}])
    write_json(seed_path(tmp_path, 0), {"config": config(30, 4), "seed": 0, "wall_seconds": 9.0, "searches": older})
    monkeypatch.setattr(evaluate, "Evaluator", lambda out: None)
    monkeypatch.setattr(searches, "run_seed", lambda *a, names, **k: dict.fromkeys(names, [{"number": 1}]))
    _one_seed((tmp_path, 0, 30, 4, ["lsuv, no gate"]))
    seed = read_json(seed_path(tmp_path, 0))
    assert seed["searches"] == older | {"lsuv, no gate": [{"number": 1}]}
    assert seed["added"]["lsuv, no gate"]["engine"] == engine_version() and seed["wall_seconds"] == 9.0
    assert sorted(seed_results(tmp_path, [0], 30, 4)) == [0]  # complete again

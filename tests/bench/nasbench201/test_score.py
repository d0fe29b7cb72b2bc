"""The NAS-Bench-201 scoring run, small: a stratified sample, one batch for every method, cached
per cell, and a report with intervals."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.nasbench201.score import cell_batch, expressivity_part, plot, report, run, sample_cells, scored


def test_the_sample_is_stratified_by_accuracy_and_the_dev_sample_is_disjoint(table: dict) -> None:
    cells = sample_cells(table, 20, seed=0)
    assert len(cells) == len(set(cells)) == 20
    ranked = sorted(table, key=lambda c: (table[c], c))
    decile = {c: 10 * i // len(ranked) for i, c in enumerate(ranked)}
    assert sorted(decile[c] for c in cells) == [d for d in range(10) for _ in range(2)]
    dev = sample_cells(table, 20, seed=1, exclude=cells)
    assert not set(dev) & set(cells)


def test_the_gaussian_batch_has_the_benchmarks_shape() -> None:
    x, y = cell_batch("gaussian")
    assert x.shape == (64, 3, 32, 32) and y.shape == (64,)
    with pytest.raises(ValueError):
        cell_batch("cifar")


@pytest.mark.slow  # a subprocess or a real worker loop: several seconds
def test_a_small_run_scores_every_cell_with_every_method_and_caches_each_part(table: dict, tmp_path: Path) -> None:
    cells = sample_cells(table, 3, seed=0)
    results = run(cells, table, "gaussian", tmp_path, channels=2, cells_per_stage=1)
    assert [r["ops"] for r in results] == [list(c) for c in cells]
    for r in results:
        assert r["accuracy"] == table[tuple(r["ops"])] and r["preflight"]["counted_cost"] > 0
        assert {"naswot", "synflow", "params"} <= set(r["proxies"])
    files = sorted((tmp_path / "gaussian").glob("*/*.json"))
    assert len(files) == 9  # the proxies, the expressivity terms and Preflight, apart
    assert all(r["expressivity"] and r["expressivity"]["meco"] is not None for r in results)
    stamp = [f.stat().st_mtime_ns for f in files]
    run(cells, table, "gaussian", tmp_path, channels=2, cells_per_stage=1)  # resumed, not recomputed
    assert [f.stat().st_mtime_ns for f in sorted((tmp_path / "gaussian").glob("*/*.json"))] == stamp
    for path in (tmp_path / "gaussian" / "preflight").glob("*.json"):  # as after an engine change
        path.write_text(path.read_text().replace('"fingerprint": "', '"fingerprint": "stale'))
    proxies = sorted((tmp_path / "gaussian" / "proxies").glob("*.json"))
    proxy_stamps = [f.stat().st_mtime_ns for f in proxies]
    assert scored(cells, table, "gaussian", tmp_path, channels=2, cells_per_stage=1) == []
    assert len(run(cells, table, "gaussian", tmp_path, channels=2, cells_per_stage=1)) == 3
    assert [f.stat().st_mtime_ns for f in proxies] == proxy_stamps  # the proxies were not recomputed
    text = report(results, "gaussian", figure="nasbench201/score_vs_accuracy_gaussian.png")
    assert "| preflight |" in text and "Gaussian" in text and "proxy:naswot" in text
    assert "](nasbench201/score_vs_accuracy_gaussian.png)" in text
    figure = plot(results, tmp_path / "figure.png")
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow  # the whole report, bootstrap intervals included: over ten seconds
def test_flagging_prunes_the_lowest_scores_first() -> None:
    """Five dead cells (10 %) scored lowest by Preflight and highest by every proxy: Preflight
    flags them at precision 1, the proxies at the base rate or worse (this once read the sign
    backwards)."""
    from bench.pipeline.proxies import PROXIES

    results = []
    for i in range(25):
        dead = i < 5
        results.append(
            {
                "accuracy": 10.0 if dead else 80.0 + i * 0.1,
                "preflight": {"score": -100.0 + i if dead else float(i), "seconds": 1.0, "counted_cost": 15.0},
                "proxies": {name: {"score": 1000.0 + i if dead else float(i), "seconds": 0.1} for name in PROXIES},
            }
        )
    rows = {
        line.split("|")[1].strip(): line.split("|")
        for line in report(results, "fashion").splitlines()
        if line.startswith("| ")
    }
    assert rows["preflight"][6].strip() == "1.00"
    assert float(rows["proxy:naswot"][6]) < 0.3


def _two_cells_scored_by_an_older_engine(table: dict, out: Path) -> list[tuple[str, ...]]:
    """Two cells run at 2 channels and 1 cell per stage, their Preflight parts then restamped as if
    an engine named ``older`` had scored them."""
    import json

    from bench.nasbench201.score import _fingerprint

    cells = sample_cells(table, 2, seed=0)
    run(cells, table, "gaussian", out, channels=2, cells_per_stage=1)
    for path in (out / "gaussian" / "preflight").glob("*.json"):
        data = json.loads(path.read_text())
        data |= {"engine": "older", "fingerprint": _fingerprint("preflight", "gaussian", 2, 1, "older")}
        path.write_text(json.dumps(data))
    return cells


def test_a_report_of_cached_cells_reads_an_older_engines_scores_and_names_it(table: dict, tmp_path: Path) -> None:
    from bench.nasbench201.__main__ import _engines

    cells = _two_cells_scored_by_an_older_engine(table, tmp_path)
    assert scored(cells, table, "gaussian", tmp_path, channels=2, cells_per_stage=1) == []
    cached = scored(cells, table, "gaussian", tmp_path, channels=2, cells_per_stage=1, any_engine=True)
    assert [r["engine"] for r in cached] == ["older", "older"]
    assert "`older` 2" in _engines(cached) and "rescores" in _engines(cached)
    # other settings are never read, whatever the engine
    assert scored(cells, table, "gaussian", tmp_path, channels=4, cells_per_stage=1, any_engine=True) == []


def test_a_cell_kept_from_an_older_calibration_is_reported_on_the_shipped_scale(table: dict, tmp_path: Path) -> None:
    """An older engine's score was weighted by its own calibration: the report rescores it from
    the stored components with the shipped one, keeping the stored score beside it."""
    import json

    from nas.options import Thresholds
    from worker.engine.score import score

    cells = _two_cells_scored_by_an_older_engine(table, tmp_path)
    for path in (tmp_path / "gaussian" / "preflight").glob("*.json"):  # another calibration's score
        data = json.loads(path.read_text())
        data["preflight"]["score"] = 3.0 * data["preflight"]["score"] - 1.0
        path.write_text(json.dumps(data))
    for result in scored(cells, table, "gaussian", tmp_path, channels=2, cells_per_stage=1, any_engine=True):
        part = result["preflight"]
        assert part["score"] == score(part["components"], Thresholds()).score
        assert part["cached_score"] == pytest.approx(3.0 * part["score"] - 1.0)


def test_the_expressivity_part_is_what_condition_reports_with_the_option_on() -> None:
    """The part is measured apart (so cached cells need not be conditioned again): it must be
    the same network, draw and batch as the engine's own measurement."""
    from nas.space import nasbench201_spec
    from worker.engine import condition

    spec = nasbench201_spec(
        ("nor_conv_3x3", "skip_connect", "none", "nor_conv_1x1", "avg_pool_3x3", "nor_conv_3x3"),
        channels=4,
        cells_per_stage=1,
    )
    x, y = cell_batch("gaussian", 16)
    report = condition(spec, data={"x": x, "y": y}, options={"seed": 0, "expressivity": True, "probe_steps": 0})
    assert report.expressivity is not None
    assert expressivity_part(spec, x) == {"naswot": report.expressivity.naswot, "meco": report.expressivity.meco}


def test_keeping_older_engines_scores_only_the_missing_parts(table: dict, tmp_path: Path) -> None:
    cells = _two_cells_scored_by_an_older_engine(table, tmp_path)
    for path in (tmp_path / "gaussian" / "expressivity").glob("*.json"):  # as before the part existed
        path.unlink()
    kept = run(cells, table, "gaussian", tmp_path, channels=2, cells_per_stage=1, keep_older_engines=True)
    assert [r["engine"] for r in kept] == ["older", "older"]  # Preflight's parts were not rescored
    assert all(r["expressivity"] is not None for r in kept)  # the missing part was computed


def test_a_revised_proxy_reruns_alone_on_cells_stored_before_the_revision(table: dict, tmp_path: Path) -> None:
    import json

    from bench.nasbench201.score import _fingerprint
    from bench.pipeline.proxies import revisions

    cells = _two_cells_scored_by_an_older_engine(table, tmp_path)
    for path in (tmp_path / "gaussian" / "proxies").glob("*.json"):  # as stored before proxies had versions
        data = json.loads(path.read_text())
        data["proxies"] = {name: {"score": -123.0, "seconds": 7.0} for name in data["proxies"]}
        data["fingerprint"] = _fingerprint("proxies", "gaussian", 2, 1, proxy_revisions={})
        del data["proxy_revisions"]
        path.write_text(json.dumps(data))
    assert revisions()
    assert scored(cells, table, "gaussian", tmp_path, channels=2, cells_per_stage=1, any_engine=True) == []
    kept = run(cells, table, "gaussian", tmp_path, channels=2, cells_per_stage=1, keep_older_engines=True)
    for result in kept:
        rerun = {name for name, r in result["proxies"].items() if r["score"] != -123.0}
        assert rerun == set(revisions())
        assert result["proxy_seconds"] == pytest.approx(7.0 * (len(result["proxies"]) - len(rerun)), abs=5.0)

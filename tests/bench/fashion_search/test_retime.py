"""Retiming two searches' networks on one machine tells the init's cost from the machine's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.fashion_search.report import _retimed
from bench.fashion_search.retime import paired_networks, read_retime, retime, summarize


def _trial(number: int, name: str, lr: float, steps: int = 376, state: str = "complete") -> dict[str, Any]:
    return {
        "number": number,
        "name": name,
        "lr": lr,
        "state": state,
        "train_steps": steps,
        "train_seconds": steps * 0.02,
    }


def test_only_networks_both_searches_trained_alike_are_paired():
    searches = {
        "no gate": [
            _trial(0, "a", 0.01),
            _trial(1, "b", 0.01),
            _trial(2, "c", 0.01, steps=40),  # diverged early under one init only
            _trial(3, "d", 0.01),
            _trial(4, "e", 0.01, state="pruned"),
            _trial(12, "f", 0.01),  # not a start-up trial: TPE proposed it from each search's own history
        ],
        "lsuv, no gate": [
            _trial(0, "a", 0.01),
            _trial(1, "b", 0.02),
            _trial(2, "c", 0.01),
            _trial(3, "d", 0.01),
            _trial(4, "e", 0.01),
            _trial(12, "f", 0.01),
        ],
    }
    assert paired_networks(searches, per_seed=5) == [0, 3]
    assert paired_networks(searches, per_seed=1) == [0]
    assert paired_networks({"no gate": searches["no gate"]}, per_seed=5) == []  # the LSUV search not run yet


def _row(spec_cached: float, spec_fresh: float, lsuv_cached: float, lsuv_fresh: float) -> dict[str, Any]:
    return {
        "spec": {"cached": spec_cached, "fresh": spec_fresh, "diverged": False},
        "lsuv": {"cached": lsuv_cached, "fresh": lsuv_fresh, "diverged": False},
    }


def test_a_slower_first_machine_is_told_from_a_slower_init():
    # the LSUV search first timed on a machine 2.5x slower; on one machine both inits train alike
    machine = [_row(0.02 * k, 0.05 * k, 0.05 * k, 0.05 * k * (1 + 0.01 * (k % 3 - 1))) for k in range(1, 13)]
    figures = summarize(machine)
    assert figures["lsuv_over_spec"].point == pytest.approx(1.0, abs=0.011)
    assert figures["spec_cached_over_fresh"].point == pytest.approx(0.4)
    assert figures["lsuv_cached_over_fresh"].point == pytest.approx(1.0)
    assert figures["machines"].point == pytest.approx(2.5, abs=0.03)
    text = _retimed(machine)[0]
    assert "no difference between the two inits' speeds can be told" in text
    assert "the machine that first timed the LSUV search ran at 0.40 of the speed" in text
    # the same first machine, but LSUV's init twice as slow to train: the init, not the machine
    init = [_row(0.05 * k, 0.05 * k, 0.1 * k, 0.1 * k * (1 + 0.01 * (k % 3 - 1))) for k in range(1, 13)]
    text = _retimed(init)[0]
    assert "LSUV's init trains at 2.00 of the spec's seconds per step" in text
    assert "are not told apart" in text
    # a handful of networks, however clear each looks, gives no reading
    assert _retimed(machine[:4])[0].endswith("Too few networks to tell.")


def test_a_diverged_retraining_is_left_out_and_no_rows_say_nothing():
    rows = [_row(0.02, 0.05, 0.05, 0.05) for _ in range(3)]
    rows[0]["lsuv"]["diverged"] = True
    assert summarize(rows)["spec_cached_over_fresh"].n == 2
    assert summarize([]) == {} and _retimed([]) == []


def test_retime_trains_each_paired_network_from_both_inits_and_resumes(
    tmp_path: Path, fashion_mnist_dir: Path, residual_params: dict[str, Any], monkeypatch: pytest.MonkeyPatch
):
    from bench.fashion_search.run import seed_path
    from bench.pipeline.run import write_json

    monkeypatch.setenv("PREFLIGHT_FASHION_MNIST_DIR", str(fashion_mnist_dir))
    params = residual_params | {"lr": 0.01}
    trial = _trial(0, "res-2x8", 0.01) | {"params": params}
    write_json(seed_path(tmp_path, 0), {"searches": {"no gate": [trial], "lsuv, no gate": [trial]}})
    rows = retime(tmp_path, [0], per_seed=2)
    assert len(rows) == 1 and read_retime(tmp_path) == rows
    for init in ("spec", "lsuv"):
        assert rows[0][init]["cached"] == pytest.approx(0.02)
        assert rows[0][init]["fresh"] > 0 and rows[0][init]["diverged"] is False
    assert retime(tmp_path, [0], per_seed=2) == rows  # resumed: nothing trained again
    assert retime(tmp_path, [0, 1], per_seed=2) == rows  # seed 1 has not run: nothing to retime
    # the seed rerun, its trial trained anew: the row is of another training, so it is retimed
    rerun = trial | {"train_seconds": 376 * 0.03}
    write_json(seed_path(tmp_path, 0), {"searches": {"no gate": [rerun], "lsuv, no gate": [rerun]}})
    again = retime(tmp_path, [0], per_seed=2)
    assert len(again) == 1 and again[0]["spec"]["cached"] == pytest.approx(0.03)
    assert again[0]["spec"]["fresh"] != rows[0]["spec"]["fresh"] and read_retime(tmp_path) == again

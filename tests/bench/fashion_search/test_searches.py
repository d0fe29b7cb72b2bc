"""The searches of one seed, on real Fashion-MNIST: the gate skips before training, the
ungated searches are not charged for the verdicts the report shows, and searches share trainings."""

from __future__ import annotations

import pytest

from bench.fashion_search.evaluate import Evaluator
from bench.fashion_search.searches import FIXED_RATE, SEARCHES, run_seed

pytestmark = pytest.mark.slow


def test_one_seed_runs_every_search_and_charges_what_each_one_spent(fashion_mnist_dir, tmp_path):
    import torch

    torch.set_num_threads(1)
    evaluator = Evaluator(tmp_path, fashion_mnist_dir)
    searches = run_seed(evaluator, seed=0, trials=2, epochs=1, log=lambda _line: None)
    assert list(searches) == list(SEARCHES)
    for name, trials in searches.items():
        assert len(trials) == 2, name
        conditioned, gated = SEARCHES[name].conditioned, SEARCHES[name].skips
        for trial in trials:
            assert trial["verdict"] in ("keep", "prune")  # the ungated searches see it too
            # conditioned searches pay for the conditioning, the LSUV search for LSUV's forward passes
            charged = conditioned or SEARCHES[name].init is not None
            assert (trial["condition_seconds"] > 0) == charged, (name, trial)
            assert (trial["condition_steps"] > 0) == charged, (name, trial)
            if trial["state"] == "pruned-before":
                assert gated and trial["train_seconds"] == 0.0 and trial["verdict"] == "prune"
            else:
                assert trial["train_seconds"] > 0 and trial["epochs"] == 1
    # TPE's first trials are the same networks in every search: one training, the same charge
    plain = [
        s[0]
        for name, s in searches.items()
        if not SEARCHES[name].conditioned and not SEARCHES[name].fixed_lr and not SEARCHES[name].init
    ]
    assert len({(t["name"], t["train_seconds"], t["test"]) for t in plain}) == 1
    # the tuned search trains at the report's recommended rate, not the sampled one
    tuned, ungated = searches["tuned, no gate"][0], searches["no gate"][0]
    assert tuned["params"] == ungated["params"] and tuned["lr"] != ungated["lr"]
    assert all(t["lr"] == FIXED_RATE for t in searches["no gate, rate 0.03"])
    # the LSUV search trains the same proposal at the sampled rate from LSUV's init, another training
    lsuv = searches["lsuv, no gate"][0]
    assert lsuv["params"] == ungated["params"] and lsuv["lr"] == ungated["lr"]
    assert len(list((tmp_path / "init_cost").glob("*.json"))) == 2  # one LSUV per proposed network
    # a second run reads everything from the cache: the same records
    assert run_seed(Evaluator(tmp_path, fashion_mnist_dir), 0, 2, 1, log=lambda _line: None) == searches

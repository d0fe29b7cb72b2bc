"""The fitted combination: fitted on development cells only, it recovers which features carry the
accuracy and with which sign, and a cell the engine could not measure ranks as the worst seen."""

from __future__ import annotations

import numpy as np
import pytest

from bench.nasbench201.combine import fit, report_lines
from bench.pipeline.metrics import spearman


def _cells(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    size, probe, noise = rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)
    accuracy = 60 + 10 * size - 5 * probe  # bigger is better, a higher probe loss is worse
    return [
        {
            "accuracy": float(a),
            "proxies": {"params": {"score": float((5 + s) * np.log(10))}},  # the proxy: ln of the count
            "preflight": {"components": {"probe_loss": float(p), "kernel_log_range": float(z), "jacobian_log": 0.0}},
        }
        for a, s, p, z in zip(accuracy, size, probe, noise, strict=True)
    ]


def test_the_fit_weights_size_up_and_the_probe_loss_down_and_ranks_new_cells():
    dev, reported = _cells(200, 0), _cells(300, 1)
    combination = fit(dev, ["probe_loss", "kernel_log_range", "log_params"])
    weights = dict(zip(combination.names, combination.weights, strict=True))
    # features oriented higher-is-better: -probe_loss and log_params both help, the noise does not
    assert weights["log_params"] > 1.5 * weights["probe_loss"] > 0.2
    assert abs(weights["kernel_log_range"]) < 0.1
    accuracy = np.array([c["accuracy"] for c in reported])
    assert spearman(combination.score(reported), accuracy) > 0.95
    size_alone = fit(dev, ["log_params"]).score(reported)
    assert spearman(combination.score(reported), accuracy) > spearman(size_alone, accuracy) + 0.05


def test_a_component_the_engine_could_not_measure_counts_as_the_worst_development_value():
    dev = _cells(100, 0)
    combination = fit(dev, ["probe_loss"])
    worst = max(c["preflight"]["components"]["probe_loss"] for c in dev)
    missing = {"accuracy": 0.0, "proxies": {"params": {"score": 2.0}}, "preflight": {"components": {}}}
    at_worst = {**missing, "preflight": {"components": {"probe_loss": worst}}}
    assert combination.score([missing])[0] == combination.score([at_worst])[0] == combination.score(dev).min()


@pytest.mark.slow  # the whole report, bootstrap intervals included: over ten seconds
def test_the_report_says_so_when_too_few_development_cells_are_scored():
    lines = report_lines(_cells(10, 0), _cells(50, 1), "synflow")
    assert any("Not run: 10 development cells" in line for line in lines)
    lines = report_lines(_cells(60, 0), _cells(50, 1), "params")
    assert any(line.startswith("| log_params |") for line in lines)


def _expressive_cells(n: int, seed: int) -> list[dict]:
    """Cells whose accuracy follows the engine's MeCo term; the proxies see it through noise, and
    one proxy could not be computed on some cells (-inf)."""
    rng = np.random.default_rng(seed)
    meco, naswot, noise = rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)
    accuracy = 60 + 10 * meco
    return [
        {
            "accuracy": float(a),
            "expressivity": {"meco": float(m), "naswot": float(w)},
            "proxies": {
                "params": {"score": 11.5},
                "meco": {"score": float(m + e)},
                "naswot": {"score": -np.inf if i % 7 == 0 else float(w)},
            },
            "preflight": {"components": {"probe_loss": 1.0}},
        }
        for i, (a, m, w, e) in enumerate(zip(accuracy, meco, naswot, noise, strict=True))
    ]


def test_the_engines_expressivity_terms_are_read_from_their_part_and_weighted_by_the_fit():
    dev, reported = _expressive_cells(200, 0), _expressive_cells(300, 1)
    combination = fit(dev, ["meco", "naswot", "probe_loss"])
    weights = dict(zip(combination.names, combination.weights, strict=True))
    assert weights["meco"] > 0.8 and abs(weights["naswot"]) < 0.1
    accuracy = np.array([c["accuracy"] for c in reported])
    assert spearman(combination.score(reported), accuracy) > 0.99
    ensemble = fit(dev, ["proxy:meco", "proxy:naswot"]).score(reported)
    assert 0.5 < spearman(ensemble, accuracy) < 0.9  # the proxy sees the signal through noise
    assert np.isfinite(ensemble).all()
    # a proxy's -inf counts as the development sample's worst value of that proxy, +inf as its best
    only_naswot = fit(dev, ["proxy:naswot"])
    finite = [c["proxies"]["naswot"]["score"] for c in dev if np.isfinite(c["proxies"]["naswot"]["score"])]
    at = {"accuracy": 0.0, "proxies": {"naswot": {"score": min(finite)}}}
    dead = {"accuracy": 0.0, "proxies": {"naswot": {"score": -np.inf}}}
    assert only_naswot.score([dead])[0] == only_naswot.score([at])[0]
    top = {"accuracy": 0.0, "proxies": {"naswot": {"score": max(finite)}}}
    assert only_naswot.score([{**top, "proxies": {"naswot": {"score": np.inf}}}])[0] == only_naswot.score([top])[0]


@pytest.mark.slow  # the whole report, bootstrap intervals included: over ten seconds
def test_the_report_pairs_the_combination_with_every_proxy_and_with_their_ensemble():
    lines = report_lines(_expressive_cells(60, 0), _expressive_cells(80, 1), "meco")
    text = "\n".join(lines)
    assert "minus the proxies' ensemble (every proxy, 3," in text
    assert "- minus meco's (the best proxy):" in text and "- minus naswot's:" in text
    assert "- minus params's (the size alone):" in text
    assert any(line.startswith("| meco |") for line in lines)  # its contribution, refitted without it


def test_the_reports_fitted_rows_exist_only_with_enough_development_cells():
    from bench.nasbench201.combine import ENSEMBLE, FITTED, fitted_columns

    reported = _expressive_cells(80, 1)
    assert fitted_columns(_expressive_cells(10, 0), reported) == {}
    columns = fitted_columns(_expressive_cells(60, 0), reported)
    assert set(columns) == {FITTED, ENSEMBLE} and all(len(v) == 80 and np.isfinite(v).all() for v in columns.values())


def test_no_combination_is_fitted_while_a_cell_lacks_its_expressivity_part():
    from bench.nasbench201.combine import fitted_columns

    dev, reported = _expressive_cells(60, 0), _expressive_cells(80, 1)
    reported[3]["expressivity"] = None  # scored before the part existed
    assert fitted_columns(dev, reported) == {}
    assert any("Not run: 1 cells lack the expressivity part" in line for line in report_lines(dev, reported, "meco"))


def test_the_choice_of_terms_is_judged_by_cross_validation_on_the_development_cells_alone():
    from bench.nasbench201.combine import cross_validated

    dev = _expressive_cells(120, 0)
    assert cross_validated(dev, ["meco"], repeats=2) > 0.95  # the accuracy follows the term
    assert abs(cross_validated(dev, ["naswot"], repeats=2)) < 0.3  # unrelated to it

"""The probe's reference and a class-prior rule, on the development set's cached Preflight stages.

``python -m bench.ablations.probe_reference`` asks two questions of the verdict without rerunning
anything (both are functions of the cached probe figure and of the batch's labels; benchmark v2's
``dev_set``, never the frozen test set; ground truth B under protocol S, seed 0, as the shipped
calibration):

- **entropy**: the probe's loss divided by the batch's label entropy (the best constant
  prediction's loss) instead of ``ln C`` (the uniform one's), i.e. the cached figure times
  ``1 / label_balance``. Within a dataset the two rank alike (one batch per dataset); pooled, they
  differ. Reported: the best precision of flagging at several recalls over the whole set, and the
  shipped calibration refitted on the rescaled figures (training half) flagging the held-out half.
- **prior rule**: also flag any probe that ends not below the class prior's loss (the figure at
  or above ``label_balance``): "learned the class frequencies and nothing else".

docs/conditioning.md, section 8, quotes it; neither was adopted.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from bench.pipeline import calibrate as v1
from bench.pipeline.metrics import precision_at_recall
from bench.v2 import calibrate as v2
from bench.v2.stages import BATCH, dataset
from nas.targets import label_balance

__all__ = ["main", "prior_levels", "report"]

GROUPS = ("fashion_mnist", "digits", "breast_cancer")  # each group's dataset has its name
RECALLS = (0.5, 0.7, 0.8)


def prior_levels() -> dict[str, float]:
    """Per dataset group, the class prior's loss over ``ln C`` on the 64-sample batch every stage
    conditions on (``nas.targets.label_balance`` with ``C`` the dataset's classes)."""
    levels = {}
    for group in GROUPS:
        data = dataset(group)
        _, y = data.batch(BATCH)
        levels[group] = label_balance(y.tolist(), data.classes)
    return levels


def _probe(row: dict[str, Any]) -> float:
    value = row["components"].get("probe_loss")
    return 2.0 if value is None else float(value)


def _flags(flagged: np.ndarray, bad: np.ndarray) -> str:
    hits = int((flagged & bad).sum())
    precision = hits / max(int(flagged.sum()), 1)
    recall = hits / max(int(bad.sum()), 1)
    return f"{int(flagged.sum())} flagged at {precision:.2f} / {recall:.2f}"


def report() -> str:
    """The figures docs/conditioning.md quotes, from the committed development-set caches."""
    rows = v2.dev_rows()
    levels = prior_levels()
    lines = ["class prior over ln C: " + ", ".join(f"{g} {v:.4f}" for g, v in levels.items())]
    bad = np.array([r["tuned_untrainable"] for r in rows])
    rescaled = copy.deepcopy(rows)
    for r in rescaled:
        if (p := _probe(r)) < 2.0:
            r["components"]["probe_loss"] = min(p / levels[r["group"]], 2.0)
    fits = {}
    for name, which in (("ln C (shipped)", rows), ("label entropy", rescaled)):
        score = np.array([-_probe(r) for r in which])
        best = ", ".join(f"{precision_at_recall(score, bad, q):.2f} at recall {q}" for q in RECALLS)
        fit = fits[name] = v1.fit_rows(
            which, v1.SHIPPED_TRUTH, names=v2.SCORED, cut_rule=v2.CUT_RULE, recall_target=v2.CUT_RECALL
        )
        held = set(v1.split_rows(which)[1])
        members = [i for i, r in enumerate(which) if r["id"] in held]
        cut = np.array([v1.score_row(fit, which[i]) < fit["prune_below"] for i in members])
        lines.append(f"{name}: best precision {best}; refitted cut, held-out half: {_flags(cut, bad[members])}")
    shipped = fits["ln C (shipped)"]  # the shipped calibration's fit, on the figures as cached
    cut = np.array([v1.score_row(shipped, r) < shipped["prune_below"] for r in rows])
    prior = np.array([_probe(r) >= levels[r["group"]] for r in rows])
    fashion = np.array([r["group"] == "fashion_mnist" for r in rows])
    for name, flagged in (("the cut", cut), ("the cut or the prior rule", cut | prior)):
        on_fashion = _flags(flagged[fashion], bad[fashion])
        lines.append(f"{name}, whole set: {_flags(flagged, bad)}; Fashion-MNIST: {on_fashion}")
    return "\n".join(lines)


def main() -> int:
    import argparse

    argparse.ArgumentParser(
        prog="python -m bench.ablations.probe_reference", description=__doc__.split("\n\n")[0]
    ).parse_args()  # no options: --help says what it does, where it ran at once
    print(report())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A Fashion-MNIST architecture search where pruning can pay: Optuna's TPE over CNNs and residual
CNNs (depths up to 30, with and without batch norm, activation, init scheme and gain, width,
learning rate), run ten ways with the same sampler seed.

- ``no gate``: every trial trains from the spec's initialization at the sampled rate;
- ``no gate, rate 0.03``: the same at a fixed rate, the best fixed one on benchmark v2's development set;
- ``median`` and ``hyperband``: the same, with Optuna's MedianPruner or HyperbandPruner stopping
  trainings at epoch boundaries;
- ``preflight gate``: every trial is conditioned first (``worker.engine.condition``, on 64 labelled
  training images); a ``prune`` verdict skips it before training, the others train from the tuned
  initialization at the report's ``recommended_lr``;
- ``gate + median`` and ``gate + hyperband``: both, through ``nas.pruners.ConditioningPruner``;
- ``tuned, no gate``: every trial conditioned (and charged) and trained from the tuned init at the
  recommended rate, none skipped: what the gate's skipping adds beyond the init and rate.

The gate and the pruner are the product's own (``nas.gate.ConditioningGate``,
``nas.pruners.ConditioningPruner``); the engine runs in this process (``searches._Engine``), so
the service's HTTP and queue are left out of the compute (their overhead is in ``docs/service.md``).
Compute is seconds: training epochs (validation included) plus the engine's conditioning. Each
training and conditioning is measured once and cached (``evaluate``), so searches that propose
the same network share it and are charged the same seconds. ``analysis`` turns the trials into
the issue's figures: compute to reach the ungated best, best accuracy at equal compute, the bound
of a perfect free flagging gate, with bootstrap intervals over seeds; ``report`` writes
``docs/fashion-search.md``. Run it with ``python -m bench.fashion_search``.
"""

"""Benchmarks that produce the figures in ``docs/``: ``python -m bench`` (``make bench``).

Four kinds, one subpackage each: ``bench.pipeline``, the trainability benchmark (issue 6) that
``python -m bench`` runs end to end (candidates, real data, zero-cost proxies, initialization
peers, the training protocol, the cached stages, the figures, the calibration of the engine's
score and the report ``docs/benchmarks.md``); ``bench.papers``, the figures that reproduce the
papers' tables (``docs/scaling-hessian-bnp.md``, the LIBSVM table of the report);
``bench.ablations``, the engine's choices varied on the benchmark's cache (``--extra``, sections
of the report); ``bench.perf``, the cost of conditioning and the service under load
(``docs/conditioning.md``, ``docs/service.md``).
"""

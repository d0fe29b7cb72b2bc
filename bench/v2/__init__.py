"""Benchmark v2 (``make bench``): Fashion-MNIST, digits and breast cancer; a development set and a
frozen test set of candidates; ground truth under two training protocols with three seeds;
equal-cost short-training baselines, LSUV + probe, zero-cost proxies, init peers and Optuna's
pruners replayed; bootstrap intervals on every headline figure (docs/benchmarks.md)."""

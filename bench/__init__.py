"""Benchmarks that produce the figures in ``docs/``: ``python -m bench`` (``make bench``).

The trainability benchmark (issue 6): candidates from ``bench.candidates``, real data from
``bench.datasets``, zero-cost proxies from ``bench.proxies``, initialization peers from
``bench.inits``, the training protocol of ``bench.protocol``, figures from ``bench.metrics``
and ``bench.analysis``, the calibration of ``bench.calibrate``, the report of
``bench.report``.
"""

"""The trainability benchmark (issue 6), run end to end by ``python -m bench``: candidates
(``candidates``) on real data (``datasets``), scored by zero-cost proxies (``proxies``) and by
Preflight, trained by a fixed protocol (``protocol``) from the spec's initialization, the tuned
one and the initialization peers (``inits``), stage by stage with a cache (``run``); the cached
rows (``rows``) become the figures (``analysis``, ``metrics``, ``median_reference``, the
end-to-end gated search ``e2e``), the calibration of the engine's score weights
(``calibrate``, ``python -m bench.pipeline.calibrate``), the issue's targets (``targets``) and
the report ``docs/benchmarks.md`` (``report``).
"""

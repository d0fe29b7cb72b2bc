"""Performance figures, printed as tables rather than written into the report: the cost of
conditioning against the cost of training (``python -m bench.perf.tuning_cost``,
``docs/conditioning.md``) and the REST API's throughput and latency under load
(``python -m bench.perf.service_load``, ``docs/service.md``).
"""

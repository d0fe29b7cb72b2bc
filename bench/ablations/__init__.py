"""Ablations of the engine's choices on the trainability benchmark's cache, each a section of
``docs/benchmarks.md`` (``python -m bench --extra NAME``, or ``python -m bench.ablations.NAME``):
the trainability probe's length and rates (``probe_length``), the head's output std target
(``output_std``) and the service's default path without data, a Gaussian batch and random
labels (``gaussian_path``).
"""

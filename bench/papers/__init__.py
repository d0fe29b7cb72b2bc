"""Figures that reproduce the papers' own tables with the engine: the scaling-calculus paper's
LIBSVM table on scikit-learn's real datasets (``scaling_table``, a section of
``docs/benchmarks.md``) and every measured number of ``docs/scaling-hessian-bnp.md``
(``python -m bench.papers.scaling_hessian_bnp``).
"""

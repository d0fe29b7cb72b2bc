"""Which engine computed a result: hashes of the conditioning engine's source.

A report depends on the engine's code, on what sets its defaults and builds its weights, and,
for its score and verdict, on the calibrated weights. The service keys its cache on
:func:`engine_revision`, so an upgraded engine never serves a report the old one computed, and a
worker claims only the jobs keyed under its own revision. The benchmarks key their caches on
:func:`engine_source_hash`, which leaves the weights out (their reports rescore the cached
components, so a refit needs no rerun). Neither imports torch."""

from __future__ import annotations

import hashlib
from functools import cache
from importlib.util import find_spec
from pathlib import Path

__all__ = ["engine_revision", "engine_source_hash"]


def _package_folder(name: str) -> Path:
    """A package's folder, found and not imported (the service's store may not import the
    worker, docs/architecture.md; hashing its files needs no import)."""
    spec = find_spec(name)
    assert spec is not None and spec.origin is not None, f"the {name} package is installed with the service"
    return Path(spec.origin).parent


def _hex16(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def _engine_folder() -> Path:
    return _package_folder("worker") / "engine"


def _source_files() -> list[Path]:
    nas_folder = _package_folder("nas")
    return [*sorted(_engine_folder().glob("*.py")), nas_folder / "options.py", nas_folder / "build.py"]


@cache
def engine_source_hash() -> str:
    """16 hex digits of SHA-256 over ``worker/engine/*.py`` (in name order), then ``nas/options.py``
    and ``nas/build.py``, each as its file name followed by its bytes."""
    return _hex16(_source_files())


@cache
def engine_revision() -> str:
    """16 hex digits of SHA-256 over the same files as :func:`engine_source_hash` and the score's
    calibrated weights (``worker/engine/score_weights.json``): everything a stored report's
    figures, score and verdict depend on besides the spec and the options."""
    return _hex16([*_source_files(), _engine_folder() / "score_weights.json"])

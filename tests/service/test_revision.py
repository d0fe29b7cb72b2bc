"""The engine's revision: what it hashes, and that a change to any of it is a new revision."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import nas
import worker
from service.revision import engine_revision, engine_source_hash


def _documented_hash(files: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def _engine_files() -> list[Path]:
    engine = Path(worker.__file__).parent / "engine"
    return [
        *sorted(engine.glob("*.py")),
        Path(nas.__file__).parent / "options.py",
        Path(nas.__file__).parent / "build.py",
    ]


def test_the_revision_hashes_the_engine_its_defaults_and_builder_and_the_score_weights() -> None:
    files = _engine_files()
    weights = Path(worker.__file__).parent / "engine" / "score_weights.json"
    assert engine_source_hash() == _documented_hash(files)
    assert engine_revision() == _documented_hash([*files, weights])
    assert engine_revision() != engine_source_hash()


def test_editing_an_engine_file_in_a_copy_gives_another_revision(tmp_path: Path) -> None:
    """Run in a copy of the packages, so the edit reaches only the copy: a changed score weight
    moves the revision and not the source hash; a changed engine module moves both."""
    root = Path(worker.__file__).parent.parent
    for package in ("nas", "worker"):
        shutil.copytree(root / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    probe = "from service.revision import engine_revision as r, engine_source_hash as s; print(r(), s())"

    def hashes() -> list[str]:
        out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True)
        return out.stdout.split()

    assert hashes() == [engine_revision(), engine_source_hash()]
    weights = tmp_path / "worker" / "engine" / "score_weights.json"
    weights.write_text(weights.read_text() + "\n")
    revision, source = hashes()
    assert revision != engine_revision() and source == engine_source_hash()
    scaling = tmp_path / "worker" / "engine" / "scaling.py"
    scaling.write_text(scaling.read_text() + "\n# an edit\n")
    assert hashes()[1] != engine_source_hash()


def test_the_benchmarks_key_on_the_same_source_hash() -> None:
    from bench.pipeline.run import engine_version

    assert engine_version() == engine_source_hash()

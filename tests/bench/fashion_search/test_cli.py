"""``python -m bench.fashion_search`` without the data: one line saying how to get it, no traceback."""

from __future__ import annotations

from bench.fashion_search.__main__ import main


def test_a_missing_dataset_is_one_line_saying_how_to_get_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PREFLIGHT_FASHION_MNIST_DIR", str(tmp_path))
    assert main(["--report-only", "--out", str(tmp_path / "out"), "--docs", str(tmp_path / "r.md")]) == 7
    error = capsys.readouterr().err
    assert "dataset-fashion-mnist" in error and "Traceback" not in error
    assert not (tmp_path / "r.md").exists()

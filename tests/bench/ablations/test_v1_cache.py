from pathlib import Path

import pytest

from bench.ablations import v1_cache


def test_a_missing_v1_cache_is_a_usage_error_naming_make_bench_v1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        v1_cache([str(tmp_path)], "python -m bench.ablations.gaussian_path", "")
    assert exit_.value.code == 2
    assert "make bench-v1" in capsys.readouterr().err


def test_a_v1_cache_with_preflight_stages_is_returned(tmp_path: Path) -> None:
    (tmp_path / "preflight").mkdir()
    (tmp_path / "preflight" / "mlp-000.json").write_text("{}")
    assert v1_cache([str(tmp_path)], "prog", "") == tmp_path


def test_help_is_help_not_an_output_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        v1_cache(["--help"], "prog", "")
    assert exit_.value.code == 0
    assert not (tmp_path / "--help").exists()

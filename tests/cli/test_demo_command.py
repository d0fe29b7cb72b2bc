"""`preflight demo`, tiny: the embedded service, the three searches, the table, the figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.cli import build_parser, main


@pytest.mark.slow
def test_the_demo_runs_four_searches_and_writes_its_table_and_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--trials", "3", "--epochs", "1", "--steps", "2", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    for row in ("no gate", "median pruner", "preflight gate", "gate + median pruner", "pruned before training"):
        assert row in printed
    assert "What happened:" in printed and "- Finding: the gate" in printed and "false prune(s)" in printed
    assert {p.name for p in out.iterdir()} == {
        "apjn_per_block.png",
        "score_vs_accuracy.png",
        "accuracy_vs_compute.png",
        "results.json",
    }
    results = json.loads((out / "results.json").read_text())
    assert [s["name"] for s in results["searches"]] == [
        "no gate",
        "median pruner",
        "preflight gate",
        "gate + median pruner",
    ]
    gated = results["searches"][2]["trials"] + results["searches"][3]["trials"]
    assert all(t["candidate_id"] is not None and t["verdict"] in ("keep", "prune") for t in gated)
    assert all(t["state"] == "pruned-before" for t in gated if t["verdict"] == "prune")


@pytest.mark.parametrize("argv", [["--trials", "0"], ["--epochs", "0"], ["--steps", "-1"]])
def test_bad_demo_arguments_are_refused(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", *argv, "--out", str(tmp_path)]) == 2
    assert "must be at least" in capsys.readouterr().err


def test_make_demo_runs_the_demo() -> None:
    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    assert "\t$(BIN)/preflight demo\n" in makefile
    assert build_parser().parse_args(["demo"]).out == "preflight-demo-output"

"""`preflight demo`, tiny: the embedded service, the three searches, the table, the figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

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
    assert results["args"]["train_device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert [s["name"] for s in results["searches"]] == [
        "no gate",
        "median pruner",
        "preflight gate",
        "gate + median pruner",
    ]
    gated = results["searches"][2]["trials"] + results["searches"][3]["trials"]
    assert all(t["candidate_id"] is not None and t["verdict"] in ("keep", "prune") for t in gated)
    assert all(t["state"] == "pruned-before" for t in gated if t["verdict"] == "prune")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--trials", "0"], "--trials must be at least 1"),
        (["--epochs", "0"], "--epochs must be at least 1"),
        (["--steps", "-1"], "--steps -1: input should be greater than or equal to 0"),
        (
            ["--steps", "5000"],
            "--steps 5000: input should be less than or equal to 1000",
        ),  # refused after two trainings
        (["--seed", "-1"], "--seed must be in [0, 2**32), but got -1"),  # scikit-learn's traceback once the service ran
        (["--seed", str(2**32)], "--seed must be in [0, 2**32)"),
    ],
)
def test_bad_demo_arguments_are_refused_before_any_work(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", *argv, "--out", str(tmp_path / "demo")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "demo").exists()


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("tpu", "--device: device must be auto, cpu, cuda or cuda:N, but got 'tpu'"),  # torch cannot parse it
        ("mps", "--device: device must be auto, cpu, cuda or cuda:N, but got 'mps'"),  # torch parses it, fails later
        ("meta", "--device: device must be auto, cpu, cuda or cuda:N, but got 'meta'"),
        ("cpu:1", "--device: device must be auto, cpu, cuda or cuda:N, but got 'cpu:1'"),
    ],
)
def test_a_device_torch_cannot_name_is_refused_before_any_work(
    device: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--device", device, "--out", str(tmp_path / "demo")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "demo").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible: --device cuda is available")
def test_a_missing_gpu_is_refused_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--device", "cuda", "--out", str(tmp_path / "demo")]) == 2
    assert "--device: " in (error := capsys.readouterr().err) and "CUDA is not available" in error


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none visible)")
def test_a_gpu_beyond_those_present_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    absent = f"cuda:{torch.cuda.device_count()}"
    assert main(["demo", "--device", absent, "--out", str(tmp_path / "demo")]) == 2
    assert "CUDA device(s)" in capsys.readouterr().err


def test_make_demo_runs_the_demo_on_fashion_mnist_where_it_is_installed() -> None:
    root = Path(__file__).resolve().parents[2]
    makefile = (root / "Makefile").read_text()
    assert "\t$(BIN)/preflight demo --dataset $(DEMO_DATASET)\n" in makefile
    from nas.fashion_mnist import available

    chosen = subprocess.run(
        ["make", "-s", "--no-print-directory", "--eval", "print-demo: ; @echo $(DEMO_DATASET)", "print-demo"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert chosen == ("fashion-mnist" if available() else "digits")
    assert build_parser().parse_args(["demo"]).out == "preflight-demo-output"


@pytest.mark.slow
def test_the_fashion_mnist_demo_searches_cnns_on_its_images_read_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fashion_mnist_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The four IDX files (about 30 MB unpacked) are read once: the check for a damaged file
    before any work is the load the searches use."""
    import nas.fashion_mnist

    read: list[str] = []
    real_read_idx = nas.fashion_mnist.read_idx

    def read_idx(path: Path) -> Any:
        read.append(path.name)
        return real_read_idx(path)

    monkeypatch.setattr(nas.fashion_mnist, "read_idx", read_idx)
    out = tmp_path / "demo"
    argv = ["demo", "--dataset", "fashion-mnist", "--trials", "2", "--epochs", "1", "--steps", "2", "--out", str(out)]
    assert main([*argv, "--no-progress", "--no-plots"]) == 0
    assert len(read) == 4 and len(set(read)) == 4
    assert "What happened:" in capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    assert results["args"]["dataset"] == "fashion-mnist"
    names = [t["name"] for s in results["searches"] for t in s["trials"]]
    assert names and all(name.startswith(("cnn-", "res-")) for name in names)


def test_the_fashion_mnist_demo_without_the_data_says_how_to_get_it_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from service.cli import EXIT_MISSING_DATA

    monkeypatch.setenv("PREFLIGHT_FASHION_MNIST_DIR", str(tmp_path / "nowhere"))
    assert main(["demo", "--dataset", "fashion-mnist", "--out", str(tmp_path / "demo")]) == EXIT_MISSING_DATA
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "apt-get install dataset-fashion-mnist" in err
    assert not (tmp_path / "demo").exists()  # nothing started


@pytest.mark.parametrize(
    ("content", "why"),
    [(b"junk", "is not a whole gzip file"), (b"", "is not an unsigned-byte IDX file")],
    ids=["not-gzip", "empty"],
)
def test_a_damaged_fashion_mnist_file_is_one_line_saying_how_to_mend_it_before_any_work(
    content: bytes, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file there but damaged passed the check for the files and was a BadGzipFile or ValueError
    traceback once the service ran."""
    from nas.fashion_mnist import FILES
    from service.cli import EXIT_MISSING_DATA

    data = tmp_path / "fm"
    data.mkdir()
    for stem in FILES.values():
        (data / (stem + ".gz")).write_bytes(content)
    monkeypatch.setenv("PREFLIGHT_FASHION_MNIST_DIR", str(data))
    assert main(["demo", "--dataset", "fashion-mnist", "--out", str(tmp_path / "demo")]) == EXIT_MISSING_DATA
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"train-images-idx3-ubyte.gz {why}" in err
    assert "apt-get install --reinstall dataset-fashion-mnist" in err and not (tmp_path / "demo").exists()


def test_a_keep_that_failed_only_without_the_gate_is_not_called_a_false_keep() -> None:
    """The ungated search trains at the sampled rate from the spec's init; the gate's survivors
    train from the tuned init at the recommended rate. A kept architecture that diverged without
    the gate and trained with it is reported as such, not as a false keep; one that failed both
    ways (or that a pruner stopped, so its gated accuracy is unknown) still is."""
    from service.cli.demo_commands import SearchResult, TrialRecord, _score_ungated, _what_happened

    def trial(number: int, accuracy: float, state: str = "complete", gated: bool = False) -> TrialRecord:
        extra: dict[str, Any] = {"candidate_id": f"c{number}", "verdict": "keep", "score": 0.0} if gated else {}
        return TrialRecord(number, f"net-{number}", state, 4, accuracy, 1.0, params={"n": number}, **extra)

    plain = SearchResult("no gate", trials=[trial(0, 0.80), trial(1, 0.0), trial(2, 0.10), trial(3, 0.05)])
    gate = SearchResult("preflight gate", trials=[trial(0, 0.81, gated=True), trial(1, 0.79, gated=True)])
    both = SearchResult(
        "gate + median pruner",
        trials=[trial(1, 0.30, "pruned-during", gated=True), trial(2, 0.12, gated=True)]
        + [trial(3, 0.40, "pruned-during", gated=True)],
    )
    searches = [plain, SearchResult("median pruner"), gate, both]
    points = _score_ungated(searches)
    assert [(p["name"], p["gated_accuracy"]) for p in points] == [
        ("net-0", 0.81),
        ("net-1", 0.79),  # the complete training, not the one the pruner stopped
        ("net-2", 0.12),
        ("net-3", None),
    ]
    said = _what_happened({"searches": searches, "score_vs_accuracy": points})
    assert "2 false keep(s)" in said and "1 kept that failed without the gate and trained" in said
    assert "  - trained with the gate: net-1, 0.000 (diverged) without it, 0.790 with it" in said
    assert "  - false keep: net-2" in said and "  - false keep: net-3" in said and "false keep: net-1" not in said


def test_an_out_folder_that_cannot_be_written_is_refused_before_the_searches(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Only "exists and is a file" was checked up front: every search ran, and the demo then failed
    writing results.json. /proc exists and takes no file, even from root."""
    assert main(["demo", "--out", "/proc", "--trials", "1", "--no-progress", "--no-plots"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("preflight demo: cannot write to --out /proc (") and "service at" not in captured.out


@pytest.mark.parametrize(
    ("missing", "argv"),
    [("sklearn", ["--no-plots"]), ("matplotlib", [])],
    ids=["scikit-learn", "matplotlib"],
)
def test_a_missing_demo_extra_is_exit_6_naming_it_before_any_work(
    missing: str, argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without scikit-learn the digits demo was a traceback and exit 1 (a plain ImportError); without
    matplotlib it ran every search, then exited 6 at the figures."""
    from service.cli import EXIT_MISSING_EXTRA

    monkeypatch.setitem(sys.modules, missing, None)  # import of it fails, as if not installed
    for name in [m for m in sys.modules if m.startswith(f"{missing}.")]:
        monkeypatch.delitem(sys.modules, name)
    assert main(["demo", "--dataset", "digits", "--trials", "1", "--out", str(tmp_path / "demo"), *argv]) == (
        EXIT_MISSING_EXTRA
    )
    captured = capsys.readouterr()
    assert captured.err == (
        f'preflight demo: this command needs {missing!r}, which is not installed: pip install ".[demo]" in the clone\n'
    )
    assert "service at" not in captured.out


def test_a_trial_ended_by_ctrl_c_is_logged_in_one_line_without_the_traceback() -> None:
    """Optuna logged the interrupted trial with every frame down to the socket read, then let the
    KeyboardInterrupt through: the demo keeps its one line, and the interrupt still ends the search.
    Read by a handler on the trial loop's own logger (Optuna's handler writes to whichever stderr
    it found first, which a test's capture may not be)."""
    import io
    import logging

    import optuna

    from service.cli.demo_commands import _quiet_interrupted_trials

    def interrupted(trial: optuna.Trial) -> float:
        raise KeyboardInterrupt

    written = io.StringIO()
    handler = logging.StreamHandler(written)
    trial_loop = logging.getLogger("optuna.study._optimize")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    trial_loop.addHandler(handler)
    try:
        _quiet_interrupted_trials()
        _quiet_interrupted_trials()  # installed once
        with pytest.raises(KeyboardInterrupt):
            optuna.create_study().optimize(interrupted, n_trials=1)
    finally:
        trial_loop.removeHandler(handler)
    logged = written.getvalue()
    assert "because of the following error: KeyboardInterrupt()" in logged and "Traceback" not in logged, logged

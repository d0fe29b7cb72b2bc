"""`preflight condition`: the engine from the command line, report as JSON on stdout."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nas.examples import EXAMPLE_MLP
from service.cli import main


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(EXAMPLE_MLP))
    return path


def test_condition_prints_the_report_as_json(
    spec_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "batch.npz"
    np.savez(data, x=np.random.default_rng(0).standard_normal((20, 64)).astype(np.float32))
    options = '{"diagnostics": false}'
    assert (
        main(
            ["condition", str(spec_file), "--data", str(data), "--steps", "2", "--device", "cpu", "--options", options]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] in ("keep", "prune")
    assert report["environment"]["data"] == "given" and report["environment"]["batch_size"] == 20
    assert report["options"]["steps"] == 2 and report["tuning"]["device"] == "cpu"
    assert report["tuning"]["steps"] <= 2


def test_condition_repeats_the_reports_imbalance_note_on_stderr(
    spec_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    x = np.random.default_rng(0).standard_normal((20, 64)).astype(np.float32)
    options = ["--steps", "1", "--device", "cpu", "--options", '{"diagnostics": false, "probe_steps": 1}']
    skewed, balanced = tmp_path / "skewed.npz", tmp_path / "balanced.npz"
    np.savez(skewed, x=x, y=np.array([0] * 18 + [1] * 2))  # 2 of the network's 10 classes, 90/10
    np.savez(balanced, x=x, y=np.arange(20) % 10)
    assert main(["condition", str(spec_file), "--data", str(skewed), *options]) == 0
    captured = capsys.readouterr()
    assert "note: data 'y': the class labels are imbalanced (their entropy is 0.14 of ln 10)" in captured.err
    assert any("imbalanced" in note for note in json.loads(captured.out)["notes"])
    assert main(["condition", str(spec_file), "--data", str(balanced), *options]) == 0
    assert "imbalanced" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--steps", "-1"], "invalid option steps"),
        (
            ["--device", "tpu"],
            "preflight condition: invalid option device: device must be 'auto', 'cpu', 'cuda' or 'cuda:N', but got",
        ),
        (["--options", "[1]"], "expected a JSON object"),
        (["--options", "{"], "not JSON"),
        (["--options", '{"steps": 1, "steps": 50}'], "$: duplicate key 'steps'"),
        (["--options", '{"data": "abc"}'], "invalid option data: give the batch as a file with --data X.npz"),
        # a value no member of the union takes: one fault at the option, not one per member's tag
        (["--options", '{"output_std": -1}'], "invalid option output_std: Input should be greater than 0, or 'auto'\n"),
        (["--options", '{"probe_lrs": [0.1, "x"]}'], "invalid option probe_lrs[1]: Input should be a valid number"),
        (["--options", '{"probe_rates": [0.1]}'], "invalid option probe_rates: no such option; the options are: "),
        # pydantic's "unable to parse raw data as a unicode string", in the API's words
        (["--options", '{"loss": "\\ud800"}'], "invalid option loss: must be valid Unicode text (it holds a lone"),
    ],
)
def test_bad_options_exit_2_with_a_message(
    spec_file: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["condition", str(spec_file), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("preflight condition: ") and "Value error" not in err


def test_a_refused_rate_is_the_one_fault_not_also_a_list_too_short(
    spec_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pydantic counts the rates left after refusing one, and added "Tuple should have at least 1
    item after validation, not 0" as a second line."""
    assert main(["condition", str(spec_file), "--options", '{"probe_lrs": [0]}']) == 2
    expected = "preflight condition: invalid option probe_lrs[0]: Input should be greater than 0\n"
    assert capsys.readouterr().err == expected


def test_data_of_the_wrong_shape_exits_2(spec_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "bad.npz"
    np.savez(data, x=np.zeros((4, 3), np.float32))
    assert main(["condition", str(spec_file), "--data", str(data), "--options", '{"diagnostics": false}']) == 2
    assert "input_shape" in capsys.readouterr().err


def test_missing_data_file_is_reported_and_exits_2(spec_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["condition", str(spec_file), "--data", "/nonexistent.npz"]) == 2
    assert capsys.readouterr().err == "preflight condition: no such data file: '/nonexistent.npz'\n"


def test_condition_shows_its_stages_on_stderr_as_plain_lines_off_a_terminal(
    spec_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from worker.engine.pipeline import STAGES

    assert main(["condition", str(spec_file), "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)  # the report alone on stdout
    shown = [line.split("] ", 1)[1] for line in captured.err.splitlines() if line.startswith("preflight condition: [")]
    # every stage of the default path, in order (the diagnostics are off by default)
    assert shown == [stage for stage in STAGES if stage != "diagnostics"]


def test_the_progress_display_rewrites_one_line_on_a_terminal() -> None:
    import io

    from service.cli.condition_commands import _Progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    display = _Progress(stream)
    display("balancing")
    display("scoring")
    display.done()
    text = stream.getvalue()
    assert "\n" not in text and text.count("\r") >= 3 and "scoring" in text


def _npy(array: np.ndarray) -> bytes:
    """One array as numpy.save writes it (a .npy file, not an archive)."""
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("write", "message"),
    [
        (lambda path: path.write_text("not an archive"), "not an .npz archive"),
        (lambda path: path.write_bytes(b""), "not an .npz archive"),
        (lambda path: path.write_bytes(b"PK\x03\x04" + b"\x00" * 40), "not an .npz archive"),  # truncated zip
        (lambda path: path.write_bytes(_npy(np.zeros((4, 64)))), "a single array"),
        (lambda path: np.savez(path, x=np.array([{}] * 4, dtype=object)), "allow_pickle"),
        (lambda path: np.savez(path, x=np.array(["a"] * 4)), "x must hold numbers"),
        (lambda path: np.savez(path, labels=np.zeros(4), inputs=np.zeros((4, 64))), "no array named x"),
    ],
    ids=["text", "empty", "truncated", "npy", "object-array", "strings", "no-x"],
)
def test_a_data_file_that_cannot_be_used_is_one_line_naming_why(
    spec_file: Path, tmp_path: Path, write: Any, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """These were tracebacks (EOFError, TypeError, ValueError)."""
    data = tmp_path / "data.npz"
    write(data)
    assert main(["condition", str(spec_file), "--data", str(data)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("preflight condition: ") and message in err and err.count("\n") == 1


def test_a_data_file_of_text_or_one_that_cannot_be_read_is_not_advised_to_allow_pickle(
    spec_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """numpy reads a file that is no archive as a pickle, and its refusal (passed on whole) advised
    loading it "unsafely" with allow_pickle; a file without read permission was called no archive."""
    assert main(["condition", str(spec_file), "--data", str(spec_file)]) == 2
    err = capsys.readouterr().err
    assert "is not an .npz archive numpy can read; save x (and y) with numpy.savez" in err
    assert "pickle" not in err and err.count("\n") == 1
    locked = tmp_path / "locked.npz"
    np.savez(locked, x=np.zeros((4, 64)))
    real_read_bytes = Path.read_bytes

    def read_bytes(path: Path) -> bytes:  # root reads a chmod 000 file, so the refusal is made here
        if path == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    assert main(["condition", str(spec_file), "--data", str(locked)]) == 2
    assert capsys.readouterr().err == f"preflight condition: cannot read {locked}: Permission denied\n"


def test_data_holding_nan_is_refused_by_the_engine_in_one_line_and_no_report(
    spec_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was conditioned and pruned at score -100; the engine's own check now refuses it for every caller."""
    data = tmp_path / "data.npz"
    np.savez(data, x=np.full((4, 64), np.nan))
    assert main(["condition", str(spec_file), "--data", str(data)]) == 2
    captured = capsys.readouterr()
    assert "preflight condition: data 'x' holds NaN or infinite values" in captured.err
    assert captured.out == ""


def test_an_archive_saved_without_naming_x_is_read_with_its_y(tmp_path: Path) -> None:
    from service.cli.condition_commands import _load_data

    data = tmp_path / "positional.npz"
    np.savez(data, np.ones((4, 64)), y=np.arange(4))  # x is stored as arr_0
    loaded = _load_data(str(data))
    assert loaded["x"].shape == (4, 64) and loaded["y"].tolist() == [0, 1, 2, 3]


def test_a_network_without_parameters_exits_2_naming_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before, torch's "element 0 of tensors does not require grad" came out as a traceback."""
    spec = tmp_path / "relu.json"
    spec.write_text(json.dumps({"input_shape": [16], "blocks": [{"layers": [{"type": "relu"}]}]}))
    assert main(["condition", str(spec)]) == 2
    captured = capsys.readouterr()
    assert "preflight condition: blocks: the network has no parameters" in captured.err and captured.out == ""


def test_a_network_whose_output_is_no_vector_is_refused_without_labels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was conditioned, its probe failed inside ("only batches of spatial targets supported")
    and the report said "keep", scored without the probe, with status 0."""
    spec = tmp_path / "conv.json"
    spec.write_text(
        json.dumps({"input_shape": [1, 4, 4], "blocks": [{"layers": [{"type": "conv2d", "out": 2, "kernel": 3}]}]})
    )
    assert main(["condition", str(spec)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(
        "preflight condition: blocks[0]: the network's output has shape"
    )
    assert "[2, 4, 4], not a vector of class scores" in captured.err and len(captured.err.splitlines()) == 1


def test_unsigned_labels_are_read_as_class_labels(tmp_path: Path) -> None:
    """torch has no min or max of uint16 to uint64: the engine's label check died with
    NotImplementedError ("min_all" not implemented for 'UInt16')."""
    from service.cli.condition_commands import _load_data

    data = tmp_path / "uint.npz"
    np.savez(data, x=np.ones((4, 64)), y=np.arange(4, dtype=np.uint16))
    loaded = _load_data(str(data))
    assert loaded["y"].dtype == np.int64 and loaded["y"].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("compressed", [False, True], ids=["stored", "deflated"])
def test_a_damaged_archive_member_is_one_line_naming_it(
    spec_file: Path, tmp_path: Path, compressed: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """A flipped byte in an array was a BadZipFile ("Bad CRC-32") or zlib.error traceback."""
    data = tmp_path / "data.npz"
    (np.savez_compressed if compressed else np.savez)(data, x=np.random.default_rng(0).normal(size=(64, 64)))
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 3] ^= 0xFF  # inside x's bytes, past the archive's headers
    data.write_bytes(bytes(raw))
    assert main(["condition", str(spec_file), "--data", str(data)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"preflight condition: {data}: its array x is damaged (") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--data", "", "--data is empty: give an .npz file, or leave --data out for a Gaussian batch"),
        ("--options", " ", "--options is empty: give a JSON object, or leave --options out"),
    ],
)
def test_an_empty_data_or_options_argument_is_refused_not_ignored(
    spec_file: Path, flag: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--data "$UNSET"` conditioned on a Gaussian batch without a word, as if it were not given."""
    assert main(["condition", str(spec_file), flag, value]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"preflight condition: {message}\n" and captured.out == ""


def test_an_archive_member_in_an_unknown_compression_is_one_line_naming_it(
    spec_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """zipfile raises NotImplementedError for a compression it lacks (and RuntimeError for an
    encrypted member): both were tracebacks."""
    import struct

    data = tmp_path / "data.npz"
    np.savez(data, x=np.ones((4, 64)))
    raw = bytearray(data.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):  # the local and central headers' method
        at = raw.index(signature) + offset
        raw[at : at + 2] = struct.pack("<H", 99)
    data.write_bytes(bytes(raw))
    assert main(["condition", str(spec_file), "--data", str(data)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"preflight condition: {data}: its array x is damaged (") and err.count("\n") == 1

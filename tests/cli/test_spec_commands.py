"""`preflight schema`, `validate` and `describe` through the real console entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nas.examples import EXAMPLE_CNN
from service.cli import main


def test_schema_is_the_published_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["$schema"].endswith("2020-12/schema")
    assert set(schema["required"]) == {"input_shape", "blocks"}
    assert "LinearLayer" in schema["$defs"]


def test_validate_prints_the_canonical_hash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(EXAMPLE_CNN))
    assert main(["validate", str(path)]) == 0
    assert "canonical hash" in capsys.readouterr().out


def test_validate_reports_the_json_path_of_a_bad_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"input_shape": [3, 8, 8], "blocks": [{"layers": [{"type": "linear", "out": 2}]}]}))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("preflight validate: invalid spec: blocks[0].layers[0] (linear): expects a vector input")


def test_a_spec_with_many_issues_shows_the_first_twenty_and_how_many_more(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """50 bad layers were 50 lines."""
    path = tmp_path / "bad.json"
    layers = [{"type": "linear", "out": -1} for _ in range(50)]
    path.write_text(json.dumps({"input_shape": [4], "blocks": [{"layers": layers}]}))
    assert main(["validate", str(path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 21 and all(line.startswith("preflight validate: invalid spec: ") for line in lines[:20])
    assert lines[20] == "preflight validate: and 30 more issues"


def test_describe_runs_as_a_console_script() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "describe", "--json"], capture_output=True, text=True, check=True
    )
    described = json.loads(done.stdout)
    assert described["summary"]["output_shape"] == [10]
    assert len(described["hash"]) == 64


@pytest.mark.parametrize("name", ["mlp", "cnn", "resnet"])
def test_every_example_prints_a_spec_that_builds_and_runs(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from nas import build_model, parse_spec

    assert main(["example", name]) == 0
    spec = parse_spec(capsys.readouterr().out)
    model = build_model(spec, seed=0)
    with torch.no_grad():
        out = model(torch.randn(2, *spec.input_shape))
    assert out.shape[0] == 2 and torch.isfinite(out).all()


def test_an_unknown_example_is_refused_with_the_names_there_are(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["example", "transformer"])
    assert (
        exit_.value.code == 2 and "choose from 'cnn', 'mlp', 'nasbench201', 'resnet', 'vit'" in capsys.readouterr().err
    )


def test_a_spec_file_that_is_not_utf8_or_is_a_folder_is_one_line_naming_it_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2, bad arguments (docs/configuration.md); these exited 1, the status of a negative answer."""
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'\xff\xfe{"input_shape": [4]}')
    assert main(["validate", str(latin)]) == 2
    assert capsys.readouterr().err.endswith("latin.json is not UTF-8 text (byte 0xff at offset 0)\n")
    assert main(["validate", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"preflight validate: {tmp_path} is a folder, not a spec file\n"
    assert main(["describe", str(tmp_path / "absent.json")]) == 2
    assert "preflight describe: no such spec file" in capsys.readouterr().err


def test_a_spec_read_from_a_pipe_is_read_not_reported_missing(tmp_path: Path) -> None:
    """A pipe (`<(preflight example mlp)`) is no regular file: it was reported as missing."""
    import os
    import threading

    from nas.examples import EXAMPLE_MLP
    from service.cli.spec_commands import read_spec_argument

    fifo = tmp_path / "spec.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text(json.dumps(EXAMPLE_MLP)), daemon=True)
    writer.start()
    assert json.loads(read_spec_argument(str(fifo))) == EXAMPLE_MLP
    writer.join(30)


def test_a_spec_argument_past_any_specs_size_is_refused_without_reading_it_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`preflight validate /dev/zero` (or `yes | preflight validate -`) read until memory ran out."""
    import io
    import sys

    from service.cli.spec_commands import MAX_SPEC_BYTES

    assert main(["validate", "/dev/zero"]) == 2
    assert (
        capsys.readouterr().err
        == "preflight validate: /dev/zero is over 16 MiB, more than any spec; is it the spec file?\n"
    )
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"y\n" * (MAX_SPEC_BYTES // 2 + 1))))
    assert main(["validate", "-"]) == 2
    assert "standard input is over 16 MiB" in capsys.readouterr().err


def test_a_spec_file_with_a_byte_order_mark_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Windows editors write one; it was refused with json's "Unexpected UTF-8 BOM (decode using utf-8-sig)"."""
    from nas.examples import EXAMPLE_MLP

    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(EXAMPLE_MLP).encode())
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().out.startswith("valid; canonical hash ")

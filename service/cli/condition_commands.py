"""`preflight condition SPEC.json [--data FILE.npz] [--steps N] [--device D]`: run the
conditioning engine locally (no service) and print the report as JSON."""

from __future__ import annotations

import argparse
import io
import json
import sys
import zipfile
import zlib
from pathlib import Path
from typing import Any

from service.cli.usage import UsageError

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = subparsers.add_parser(
        "condition",
        help="condition and score a spec locally; print the report as JSON",
        description="Tune the spec's initialization (balancing + AutoInit), run the diagnostics "
        "and print the conditioning report as JSON.",
    )
    cmd.add_argument("spec", help="spec JSON file, or - for standard input")
    cmd.add_argument(
        "--data", help=".npz file with an array 'x' [N, *input_shape] (and optional 'y'); default: a Gaussian batch"
    )
    cmd.add_argument("--steps", type=int, help="AutoInit steps (default: the engine's)")
    cmd.add_argument("--device", help="auto, cpu, cuda or cuda:N (default auto)")
    cmd.add_argument("--options", help='JSON object of further ConditionOptions, e.g. \'{"loss": "kernel"}\'')
    cmd.set_defaults(handler=_condition)


def _option_faults(error: Any, given: dict[str, Any], names: Any) -> dict[str, list[str]]:
    """Each refused option's path in the given JSON, with its reasons. A value that fits no member
    of a union (``output_std``: a number or "auto") is one fault with one reason a member, where
    pydantic's location holds each member's tag (``output_std.literal['auto']``): a part of the
    location that is no key or index of the given value is such a tag, and is left out."""
    from nas.spec import primary_errors, readable_message

    faults: dict[str, list[str]] = {}
    for fault in primary_errors(error.errors(include_url=False)):
        parts: list[str] = []
        value: Any = given
        for part in fault["loc"]:
            if isinstance(value, dict) and part in value or isinstance(value, list) and isinstance(part, int):
                parts.append(f"[{part}]" if isinstance(part, int) else f".{part}")
                value = value[part] if isinstance(value, dict) else value[part] if part < len(value) else None
        reason = readable_message(fault)  # without pydantic's "Value error, ", a lone surrogate as the API says it
        if fault["type"] == "extra_forbidden" and len(fault["loc"]) == 1:
            reason = f"no such option; the options are: {', '.join(sorted(names))}"
        faults.setdefault("".join(parts).removeprefix(".") or "$", []).append(reason)
    return faults


def _load_data(path: str) -> dict[str, Any]:
    import numpy as np

    file = Path(path)
    if file.is_dir():
        raise UsageError(f"{path} is a folder, not a data file")
    if not file.exists():  # a pipe is no regular file, and is read
        raise UsageError(f"no such data file: {path!r}")
    try:
        content = file.read_bytes()
    except OSError as exc:  # no permission: the file is fine, reading it is not
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        archive = np.load(io.BytesIO(content))  # allow_pickle stays False; no file left open on a fault
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:  # text, empty, truncated
        # numpy reads any file that is no archive as a pickle, and its refusal advises allow_pickle: not here
        why = "" if "pickle" in str(exc) else f" ({exc})"
        raise UsageError(
            f"{path} is not an .npz archive numpy can read{why}; save x (and y) with numpy.savez(path, x=x, y=y)"
        ) from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise UsageError(f"{path} is a single array; save x (and y) with numpy.savez(path, x=x, y=y)")
    with archive:
        names = list(archive.files)
        others = [name for name in names if name != "y"]  # numpy.savez(path, x, y=y) names x arr_0
        x_name = "x" if "x" in names else others[0] if len(others) == 1 else None
        if x_name is None:
            raise UsageError(f"{path} has no array named x (it has {', '.join(names) or 'none'})")
        data = {"x": _member(archive, x_name, path)} | ({"y": _member(archive, "y", path)} if "y" in names else {})
    for name, array in data.items():
        if array.dtype.kind not in "biuf":
            raise UsageError(f"{path}: {name} must hold numbers, not {array.dtype}")
    if "y" in data and data["y"].dtype.kind == "u":  # torch has no min or max of uint16 to uint64
        if data["y"].size and int(data["y"].max()) > np.iinfo(np.int64).max:
            raise UsageError(f"{path}: y holds {data['y'].max()}, beyond a 64-bit signed label")
        data["y"] = data["y"].astype(np.int64)
    return data


def _member(archive: Any, name: str, path: str) -> Any:
    """One array of the archive, read now; a damaged member is the file's fault, said in one line."""
    try:
        return archive[name]
    except ValueError as exc:  # an object array, which would need pickle
        raise UsageError(f"{path}: {exc}") from None
    # a flipped byte: a bad CRC, bad deflate data, an unknown compression (NotImplementedError), encryption
    except (OSError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError) as exc:
        raise UsageError(f"{path}: its array {name} is damaged ({exc})") from None


def _condition(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from nas.shapes import trace_shapes
    from nas.strict_json import StrictJSONError, loads_strict
    from nas.validate import unlabelled_probe_issue
    from service.cli.spec_commands import _parse_or_report, read_spec_argument
    from worker.engine import ConditionOptions, condition

    spec = _parse_or_report(read_spec_argument(args.spec), "condition")
    if spec is None:
        return 2
    if args.data == "":  # `--data "$UNSET"` conditioned on a Gaussian batch without a word
        raise UsageError("--data is empty: give an .npz file, or leave --data out for a Gaussian batch")
    if args.options is not None and not args.options.strip():
        raise UsageError("--options is empty: give a JSON object, or leave --options out")
    try:
        extra = loads_strict(args.options) if args.options is not None else {}
    except StrictJSONError as exc:
        print(f"preflight condition: invalid --options: {exc}", file=sys.stderr)
        return 2
    except json.JSONDecodeError as exc:
        print(f"preflight condition: invalid --options: not JSON ({exc.msg})", file=sys.stderr)
        return 2
    if not isinstance(extra, dict):
        print("preflight condition: invalid --options: expected a JSON object", file=sys.stderr)
        return 2
    if "data" in extra:  # the service's option names an uploaded batch; here the batch is a file
        print("preflight condition: invalid option data: give the batch as a file with --data X.npz", file=sys.stderr)
        return 2
    if args.steps is not None:
        extra["steps"] = args.steps
    if args.device is not None:
        extra["device"] = args.device
    try:
        options = ConditionOptions.model_validate(extra)
    except ValidationError as exc:
        for path, reasons in _option_faults(exc, extra, ConditionOptions.model_fields).items():
            either = ", or ".join([reasons[0], *(reason.removeprefix("Input should be ") for reason in reasons[1:])])
            print(f"preflight condition: invalid option {path}: {either}", file=sys.stderr)
        return 2
    data = _load_data(args.data) if args.data is not None else None
    if (data is None or "y" not in data) and options.probe_steps:
        if no_targets := unlabelled_probe_issue(trace_shapes(spec)):
            print(f"preflight condition: blocks[{len(spec.blocks) - 1}]: {no_targets}", file=sys.stderr)
            return 2
    display = _Progress(sys.stderr)
    try:
        report = condition(spec, data=data, options=options, progress=display)
    except ValueError as exc:
        display.done()
        print(f"preflight condition: {exc}", file=sys.stderr)
        return 2
    display.done()
    for note in report.notes:  # what the report says a reader should know (imbalanced labels, a budget overrun)
        print(f"preflight condition: note: {note}", file=sys.stderr)
    print(report.model_dump_json(indent=2))
    return 0


class _Progress:
    """The engine's stages on stderr as they start (the report goes to stdout): one line rewritten
    in place on a terminal, one plain line per stage otherwise (a log, a pipe)."""

    def __init__(self, stream: Any) -> None:
        from worker.engine.pipeline import STAGES

        self._stream, self._total = stream, len(STAGES)
        self._index = {stage: i + 1 for i, stage in enumerate(STAGES)}
        self._tty = bool(getattr(stream, "isatty", lambda: False)())
        self._width = 0

    def __call__(self, stage: str) -> None:
        line = f"preflight condition: [{self._index.get(stage, 0)}/{self._total}] {stage}"
        if self._tty:
            self._stream.write("\r" + line.ljust(self._width))
            self._width = max(self._width, len(line))
        else:
            self._stream.write(line + "\n")
        self._stream.flush()

    def done(self) -> None:
        if self._tty and self._width:
            self._stream.write("\r" + " " * self._width + "\r")
            self._stream.flush()

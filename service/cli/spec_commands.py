"""`preflight schema`, `validate`, `describe` and `example`: the spec, offline."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from service.cli.usage import UsageError

__all__ = ["register"]

MAX_SPEC_BYTES = 16 * 2**20  # four times the service's default body limit for specs; /dev/zero is read no further
MAX_SHOWN_ISSUES = 20  # a spec with 500 bad layers is not 500 lines of a terminal


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    schema = subparsers.add_parser("schema", help="print the JSON Schema of the architecture spec (format 1.1)")
    schema.set_defaults(handler=_schema)

    validate = subparsers.add_parser("validate", help="check a spec; print its canonical hash")
    validate.add_argument("spec", help="spec JSON file, or - for standard input")
    validate.set_defaults(handler=_validate)

    describe = subparsers.add_parser("describe", help="build a spec and summarize the model")
    describe.add_argument("spec", nargs="?", help="spec JSON file, or - (default: the format's example)")
    describe.add_argument("--json", action="store_true", help="print the summary as JSON")
    describe.add_argument("--seed", type=int, default=0, help="the weights' seed, an integer in [0, 2**64)")
    describe.set_defaults(handler=_describe)

    from nas.examples import EXAMPLES

    example = subparsers.add_parser("example", help="print an example spec (a starting point for your own)")
    example.add_argument("name", choices=sorted(EXAMPLES), help="which example")
    example.set_defaults(handler=_example)


def read_spec_argument(argument: str) -> str:
    """The text of a spec given on the command line as a path or ``-``."""
    if argument == "":  # `preflight describe "$UNSET"` described the example network
        raise UsageError("the spec file argument is empty")
    if argument == "-":
        raw, where = sys.stdin.buffer.read(MAX_SPEC_BYTES + 1), "standard input"
    else:
        path = Path(argument)
        if path.is_dir():
            raise UsageError(f"{argument} is a folder, not a spec file")
        if not path.exists():  # a pipe (`<(preflight example mlp)`) is no regular file, and is read
            raise UsageError(f"no such spec file: {argument!r}")
        try:
            with path.open("rb") as file:
                raw, where = file.read(MAX_SPEC_BYTES + 1), argument
        except OSError as exc:
            raise UsageError(f"cannot read {argument}: {exc.strerror}") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise UsageError(f"{where} is over {MAX_SPEC_BYTES // 2**20} MiB, more than any spec; is it the spec file?")
    try:
        return raw.decode("utf-8-sig")  # a byte order mark, as Windows editors write it, is not the JSON's (RFC 8259)
    except UnicodeDecodeError as exc:
        raise UsageError(f"{where} is not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start})") from None


def _schema(args: argparse.Namespace) -> int:
    from nas.schema import spec_json_schema

    print(json.dumps(spec_json_schema(), indent=2))
    return 0


def _parse_or_report(text: str, command: str) -> Any:
    """The spec, or None after one line on stderr per issue (the first 20), each as every failure
    of the command is: ``preflight COMMAND: ...``."""
    from nas import SpecError, parse_spec

    try:
        return parse_spec(text)
    except SpecError as exc:
        for issue in exc.issues[:MAX_SHOWN_ISSUES]:
            print(f"preflight {command}: invalid spec: {issue}", file=sys.stderr)
        if len(exc.issues) > MAX_SHOWN_ISSUES:
            more = len(exc.issues) - MAX_SHOWN_ISSUES
            print(f"preflight {command}: and {more} more issue{'s' if more > 1 else ''}", file=sys.stderr)
        return None


def _validate(args: argparse.Namespace) -> int:
    from nas import spec_hash

    spec = _parse_or_report(read_spec_argument(args.spec), "validate")
    if spec is None:
        return 2
    print(f"valid; canonical hash {spec_hash(spec)}")
    return 0


def _describe(args: argparse.Namespace) -> int:
    import torch

    from nas import build_model, spec_hash, summarize
    from nas.examples import EXAMPLE_MLP

    text = read_spec_argument(args.spec) if args.spec is not None else json.dumps(EXAMPLE_MLP)
    spec = _parse_or_report(text, "describe")
    if spec is None:
        return 2
    if not 0 <= args.seed < 2**64:  # torch would read -1 as 2**64 - 1, another network
        print(f"preflight describe: --seed must be in [0, 2**64), got {args.seed}", file=sys.stderr)
        return 2
    summary = summarize(spec)
    model = build_model(spec, seed=args.seed)
    with torch.no_grad():
        out = model(torch.randn(2, *spec.input_shape))
    if args.json:
        print(json.dumps({"hash": spec_hash(spec), "summary": summary.model_dump()}, indent=2))
        return 0
    print(summary.to_text())
    print(
        f"canonical hash {spec_hash(spec)}; forward on a batch of 2 gives {list(out.shape)}, "
        f"output std {out.std().item():.3f}"
    )
    return 0


def _example(args: argparse.Namespace) -> int:
    from nas.examples import EXAMPLES

    print(json.dumps(EXAMPLES[args.name], indent=2))
    return 0

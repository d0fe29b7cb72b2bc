"""The `preflight` command. Each command group lives in its own module with a
``register(subparsers)`` function; this module only wires them together."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from service.cli.version import version

__all__ = ["main"]

# Modules under service.cli that add commands, in the order `preflight --help` lists them.
_COMMAND_MODULES = (
    "spec_commands",
    "server_commands",
    "condition_commands",
    "demo_commands",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="preflight",
        description="Condition and score NAS candidate architectures before training.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMAND_MODULES:
        importlib.import_module(f"service.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

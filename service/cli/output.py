"""Standard output once it can no longer be written (a reader gone, a full disk)."""

from __future__ import annotations

import os
import sys

__all__ = ["silence_stdout"]


def silence_stdout() -> None:
    """Point standard output at /dev/null: what is left in its buffer would fail again at the
    interpreter's flush on exit ("Exception ignored", status 120)."""
    try:
        target = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (io.UnsupportedOperation: main() run in a program)
        return
    os.dup2(os.open(os.devnull, os.O_WRONLY), target)

"""A report's opening note survives a rerun without ``--note`` (``make bench``)."""

from __future__ import annotations

from pathlib import Path

from bench.pipeline.run import kept_note


def test_a_given_note_is_kept_and_read_back_when_none_is_given(tmp_path: Path) -> None:
    path = tmp_path / "cache" / "note.md"
    assert kept_note(path, None) == ""  # nothing kept yet
    assert kept_note(path, "  Seeds 0 to 4 ran on engine d199.\n") == "Seeds 0 to 4 ran on engine d199."
    assert kept_note(path, None) == "Seeds 0 to 4 ran on engine d199."
    assert kept_note(path, "Another run.") == "Another run."  # a new note replaces it
    assert kept_note(path, None) == "Another run."
    assert kept_note(path, "") == "" and kept_note(path, None) == ""  # --note "" clears it

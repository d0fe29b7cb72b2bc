"""The file a SQLite URL names, as sqlite opens it (service.store.db.sqlite_file)."""

from __future__ import annotations

import pytest

from service.store.db import sqlite_file


@pytest.mark.parametrize(
    ("url", "file"),
    [
        ("sqlite:////data/p.db", "/data/p.db"),
        ("sqlite:///relative/p.db", "relative/p.db"),
        ("sqlite:///file:/data/p.db?mode=ro&uri=true", "/data/p.db"),
        ("sqlite:///file:/data/my%20db/p.db?uri=true", "/data/my db/p.db"),  # SQLAlchemy decodes the URL once
        ("sqlite:///file:/data/my%2520db/p.db?uri=true", "/data/my db/p.db"),  # and sqlite a URI filename's %HH
        ("sqlite://", None),
        ("sqlite:///:memory:", None),
        ("sqlite:///file::memory:?uri=true", None),
        ("sqlite:///file:x?mode=memory&uri=true", None),
        ("postgresql+psycopg://user@host/db", None),
    ],
)
def test_a_sqlite_url_names_the_file_sqlite_opens(url: str, file: str | None) -> None:
    assert sqlite_file(url) == file

"""Fixtures for the tests that read the SQLite origin's raw bytes."""

from __future__ import annotations

import pytest

import efface


@pytest.fixture
def open_raw(tmp_path):
    """``efface.open`` on ``tmp_path / name`` with the hashing embedder and no background
    compactor (the test drives it); every store it opened is closed at teardown."""
    opened: list[efface.Store] = []

    def _open(name: str = "s", **options) -> efface.Store:
        options.setdefault("background", False)
        s = efface.open(tmp_path / name, embedder="hashing", **options)
        opened.append(s)
        return s

    yield _open
    for s in opened:
        s.close()

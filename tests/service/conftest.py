"""Fixtures for the service tests: ``served`` is a real efface server on a free loopback port
over a fresh SQLite store (hashing embedder, the compactor running), with its key ring."""

from __future__ import annotations

import pytest

from served import Served


@pytest.fixture
def served(tmp_path):
    s = Served(tmp_path / "store", embedder="hashing", access_log=True)
    yield s
    s.close()

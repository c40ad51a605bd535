"""The log's advice when ``shared_buffers`` cannot hold recall's HNSW index
(src/efface/origin/postgres/buffers.py; docs/postgres.md, Recall, "How recall grows")."""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

import efface
from efface.origin.postgres import buffers

from pgserver import PgUnavailable, start_primary, unavailable

MIB = 2**20
TEXT = "Ottoline Brackwater collects copper weathervanes"


def test_the_advice_names_the_sizes_only_when_the_index_does_not_fit():
    assert buffers.advice(100 * MIB, 90 * MIB, 256 * MIB) is None
    assert buffers.advice(256 * MIB, 300 * MIB, 256 * MIB) is None
    hint = buffers.advice(575 * MIB, 586 * MIB, 256 * MIB)
    assert hint is not None
    assert "shared_buffers (256 MiB)" in hint and "HNSW index (575 MiB" in hint and "records 586 MiB" in hint
    assert "Ottoline" not in hint


def _open(url, kek, cache):
    return efface.open(url, embedder="hashing", kek_file=kek, cache_dir=cache, background=False)


def test_a_store_whose_index_fits_opens_quietly(pg_db, kek, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="efface"), _open(pg_db.url, kek, tmp_path / "a") as s:
        s.write("n1", TEXT, tenant="acme", subject="ob", purpose="support")
    assert not [r for r in caplog.records if "shared_buffers" in r.getMessage()]


def test_a_store_whose_index_the_buffers_cannot_hold_is_named_in_the_log_at_open(kek, tmp_path, caplog):
    """A server of its own with the smallest ``shared_buffers`` (128kB): a few hundred records'
    graph is larger."""
    base = Path(tempfile.mkdtemp(prefix="efface-pg-buf-"))
    try:
        server = start_primary(base, settings={"shared_buffers": "128kB", "max_connections": "20"})
    except (PgUnavailable, OSError) as e:
        unavailable(str(e))
    try:
        with server.connect() as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        url = server.url("postgres")
        with _open(url, kek, tmp_path / "a") as s:
            s.write_many(
                [{"key": f"k{i}", "text": f"{TEXT} {i}", "subject": f"s{i % 7}"} for i in range(300)],
                tenant="acme",
                purpose="support",
            )
        with caplog.at_level(logging.WARNING, logger="efface"), _open(url, kek, tmp_path / "b"):
            pass
        hints = [r.getMessage() for r in caplog.records if "shared_buffers" in r.getMessage()]
        assert len(hints) == 1 and "shared_buffers (128 kB)" in hints[0], hints
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)

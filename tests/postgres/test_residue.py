"""What PostgreSQL keeps of a deleted row, measured on a real server (bench/experiments/pg_residue.py);
docs/postgres.md reports these findings, and the PostgreSQL ladder is built on them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pgserver import PgUnavailable, start_primary, unavailable

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "experiments"))
import pg_residue


@pytest.fixture(scope="module")
def measured(pg_base):
    try:
        server = start_primary(pg_base, settings=pg_residue.SETTINGS, name="residue")
    except (PgUnavailable, OSError) as e:
        unavailable(str(e))
    try:
        with server.connect() as conn:
            conn.execute("CREATE DATABASE residue")
        yield pg_residue.measure(server, "residue")
    finally:
        server.remove()


def test_insert_puts_text_in_heap_and_gin_and_vector_in_hnsw(measured):
    base = measured["stages"]["inserted"]["base"]
    for m in ("mid", "last"):
        assert set(base[f"text_{m}"]) == {"docs", "docs_tsv"}
        assert set(base[f"vector_{m}"]) == {"docs", "docs_emb"}


def test_plain_vacuum_leaves_text_in_free_space_and_gin(measured):
    st = measured["stages"]["deleted_vacuumed"]
    # heap_page_items shows no tuple holding the last row's text, but the raw page still does
    assert st["heap"]["last"] == {"tuples_holding": 0, "raw_pages_holding": 1}
    assert "docs" in st["base"]["text_last"]
    # the GIN index keeps both deleted rows' tokens after VACUUM
    assert "docs_tsv" in st["base"]["text_mid"] and "docs_tsv" in st["base"]["text_last"]
    # and the WAL written since the DELETE carries the rows again, as full-page images
    types = {(r["type"], r["relation"]) for r in st["wal_records_since_delete"]}
    assert ("FPI_FOR_HINT", "docs") in types


def test_vacuum_full_and_checkpoint_clear_base_not_wal(measured):
    st = measured["stages"]["vacuum_full_checkpoint"]
    assert all(not hits for hits in st["base"].values())
    assert all(hits for hits in st["wal"].values())


def test_wal_keeps_it_in_recycled_segments_until_reused_and_switched_out(measured):
    rounds = measured["stages"]["switch_checkpoint_rounds"]
    states = [state for r in rounds for hits in r["wal"].values() for state in hits.values()]
    assert any(s.startswith("recycled") for s in states), "a renamed segment kept the bytes"
    assert any(s.startswith("current, tail") for s in states), "the reused segment's unwritten tail kept them"
    assert measured["wal_clean_after_rounds"] is not None
    assert measured["wal_clean_after_rounds"] >= 2

"""The evidence ladder on PostgreSQL (issue #34 item 3; docs/evidence-ladder.md): after a
forget, the maintenance (KEK rotated, touched relations rewritten, checkpoint, WAL switched
past its retention) and a byte scan of the server's files make ``erased`` on a server whose
data directory this process reads; elsewhere each copy says ``shredded`` or
``cannot_verify`` with its reason, and the level stays ``unreadable``. Two stores on one
database share the KEK's rotation, the maintenance's lock and the verification's lock."""

from __future__ import annotations

import secrets
import threading
import warnings

import pytest

import efface
from efface.erasure.verify import SERVER_KINDS
from efface.origin.postgres import maintenance
from efface.origin.postgres.keys import KekFile

T = "acme"
TEXT = "Zebulon Quaxworth keeps a vermilion kettle in the north annex"
OTHER = "Ottoline Brackwater collects copper weathervanes"


@pytest.fixture
def kek(tmp_path):
    path = tmp_path / "store.kek"
    KekFile(path).create(secrets.token_bytes(32))
    return path


def _open(url, kek, cache, **options):
    options.setdefault("background", False)
    return efface.open(url, embedder="hashing", kek_file=kek, cache_dir=cache, **options)


def _scan(store, handle, data_dir):
    """Hits of the erasure's server-side fingerprints in the database's files and the WAL."""
    o = store._origin
    blob = o.evidence(handle)["fingerprints"]
    tally = [0]
    scan = store._verifier._scan_fn(blob, tally)
    with o._pool.connection() as conn:
        dboid = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()[0]
    files, _ = scan(maintenance.db_files(f"{data_dir}/base/{dboid}"), data_dir)
    wal, _ = scan(maintenance.wal_files(data_dir), data_dir)
    return sum(files.values()), sum(wal.values()), tally[0]


def test_a_forget_is_erased_on_a_server_whose_files_this_process_reads(pg_db, kek, tmp_path):
    with _open(pg_db.url, kek, tmp_path / "a") as s:
        s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
        s.write("n2", OTHER, tenant=T, subject="ob", purpose="support")
        receipt = s.forget(tenant=T, subject="zq")
        with pg_db.connect() as conn:
            conn.execute("CHECKPOINT")  # the pages on disk, as the buffers hold them
        before = _scan(s, receipt.handle, str(pg_db.server.datadir))
        assert before[0] > 0 and before[1] > 0, "the dead tuple and the DELETE's WAL record hold the sealed row"
        v = s.verify(receipt.handle)
        assert v.level == "unreadable"
        assert v.copies["postgres.primary.files"].state == "cannot_verify"  # not maintained yet
        st = s.wait(receipt.handle, 60, until="erased")
        assert st.erased
        after = _scan(s, receipt.handle, str(pg_db.server.datadir))
        assert after[:2] == (0, 0)
        v = s.verify(receipt.handle)
        assert v.level == "erased", [c for c in v.checks if c.outcome != "pass"]
        assert {k: c.state for k, c in v.copies.items()} == {
            "cache": "erased",
            "postgres.primary.files": "erased",
            "postgres.primary.wal": "erased",
        }
        assert v.scanned_bytes > after[2] // 2
        with pg_db.connect() as conn:
            states = sorted(r[0] for r in conn.execute("SELECT state FROM efface.keks"))
        assert states == ["current", "retired"], "the KEK was rotated after the data key was destroyed"
        assert s.read("n2", tenant=T, purpose="support").text == OTHER
        again = s.verify(receipt.handle)
        assert again.level == "erased" and again.fingerprints_discarded
        assert again.copies["postgres.primary.files"].state == "erased"
        assert again.to_dict()["copies"]["postgres.primary.wal"]["state"] == "erased"

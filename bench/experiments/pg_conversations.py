#!/usr/bin/env python
"""The conversations set (``bench/bench_conversations.py``, ``--quick`` tenants) on efface over
SQLite and over PostgreSQL, with and without the PostgreSQL origin's vector sample
(:mod:`efface.origin.postgres.sample`): ``efface.recall`` as shipped, MiniLM vectors.

    HF_HUB_OFFLINE=1 PYTHONPATH=src nice -n 10 python bench/experiments/pg_conversations.py > /tmp/pg-conv.json

Prints one JSON document (recall@5/@10, MRR@10 and by kind per system); progress on stderr.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent / "tests"))

import bench_conversations as bc  # noqa: E402
import conversations as cv  # noqa: E402
from bench_quality import embedder, encode, git_commit, log, timed  # noqa: E402

from pgserver import start_primary  # noqa: E402


def run(store, c, dvec) -> dict:
    bc.write_tenants(store, c, dvec)
    store.compact()
    qs = c.questions
    ranked, lat = timed(
        lambda i: [
            int(h.key[1:])
            for h in store.recall(qs[i].text, tenant=bc.tenant_name(qs[i].tenant), purpose=bc.PURPOSE, k=10)
        ],
        len(qs),
    )
    return bc.score(ranked, c, lat)


def main() -> None:
    import efface
    from efface.embed import resolve
    from efface.origin.postgres import sample

    full = cv.build()
    c = full.only(list(range(0, len(full.pairs), 4)))
    emb = embedder("minilm")
    dvec = encode(emb, c.turns, "chitchat")
    query_model = resolve("minilm")
    work = Path(tempfile.mkdtemp(prefix="efface-pgconv-"))
    os.chmod(work, 0o755)  # the server runs as a system user (tests/pgserver.py)
    out: dict = {"bench": "pg-conversations", "commit": git_commit(), "questions": len(c.questions), "systems": {}}
    server = start_primary(work / "pg")
    try:
        out["systems"]["efface_sqlite"] = run(
            efface.open(str(work / "lite"), embedder=query_model, background=False), c, dvec
        )
        log(f"sqlite {bc.brief(out['systems']['efface_sqlite'])}")
        for name, keep in (("efface_postgres", True), ("efface_postgres_no_sample", False)):
            with server.connect() as conn:
                conn.execute(f"CREATE DATABASE {name}")
            saved = sample.PgSample.sample
            if not keep:  # the origin's sample empty: recall judges against the union, as before it
                sample.PgSample.sample = lambda self, *a: sample._EMPTY  # type: ignore[method-assign]
            try:
                store = efface.open(
                    server.url(name),
                    embedder=query_model,
                    kek_file=str(work / "kek"),
                    cache_dir=str(work / f"cache-{name}"),
                    background=False,
                )
                t = time.perf_counter()
                out["systems"][name] = run(store, c, dvec)
                store.close()
            finally:
                sample.PgSample.sample = saved  # type: ignore[method-assign]
            log(f"{name} {bc.brief(out['systems'][name])} ({time.perf_counter() - t:.0f}s)")
    finally:
        server.stop()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Round trips to PostgreSQL per recall, and where a recall's time goes (issue #34 item 6).

    PYTHONPATH=src python bench/pg_roundtrips.py --n 10000 > /tmp/pg-trips.json

Writes ``--n`` records (bench_store.Corpus, the hashing embedder, as bench/pg_speed.py) to a
store on a PostgreSQL started here (bench/pg_local.py, or ``--pg URL``), then runs ``--queries``
recalls with every statement psycopg sends counted: each ``Cursor.execute`` outside a pipeline
is one round trip, and so is each pipeline block (its statements listed; a ``BEGIN; SELECT``
sent as one string is one). Per
recall: round trips (p50, max), each statement kind's count (the SQL's first words, no
values), and the time spent waiting on the database against the recall's whole time.
One JSON document on stdout; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import psycopg  # noqa: E402

import efface  # noqa: E402
import pg_local  # noqa: E402
from efface.embed.hashing import HashingEmbedder  # noqa: E402

from bench_store import PURPOSE, TENANT, Corpus, pct  # noqa: E402

_tally = threading.local()


def _kind(sql: object) -> str:
    text = sql if isinstance(sql, str) else str(sql)
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"[a-z_]+\.(records|claims|quarantine|purposes|changes|epoch_counter|meta|data_keys)", r"\1", text)
    return text[:90]


def _counting(orig):
    def execute(self, query, *args, **kwargs):
        log = getattr(_tally, "log", None)
        if log is None or self.connection._pipeline is not None:  # a pipeline's: counted as the pipeline
            if log is not None:
                _tally.piped.append(_kind(query))
            return orig(self, query, *args, **kwargs)
        t0 = time.perf_counter()
        try:
            return orig(self, query, *args, **kwargs)
        finally:
            log.append((_kind(query), time.perf_counter() - t0))

    return execute


def _piping(orig):
    @contextlib.contextmanager
    def pipeline(self):
        log = getattr(_tally, "log", None)
        if log is None or self._pipeline is not None:
            with orig(self) as p:
                yield p
            return
        _tally.piped = []
        t0 = time.perf_counter()
        try:
            with orig(self) as p:
                yield p
        finally:
            log.append(("pipeline: " + " | ".join(k[:40] for k in _tally.piped), time.perf_counter() - t0))

    return pipeline


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--pg", default="start")
    args = ap.parse_args()
    psycopg.Cursor.execute = _counting(psycopg.Cursor.execute)  # type: ignore[method-assign]
    psycopg.Connection.pipeline = _piping(psycopg.Connection.pipeline)  # type: ignore[method-assign]
    corpus = Corpus(args.n)
    vecs = HashingEmbedder().embed(corpus.texts)
    tmp = Path(tempfile.mkdtemp(prefix="efface-pg-trips-"))
    with (
        pg_local.database(args.pg) as url,
        efface.open(
            url, embedder="hashing", background=False, kek_file=str(tmp / "kek"), cache_dir=str(tmp / "cache")
        ) as store,
    ):
        for start in range(0, corpus.n, args.batch):
            stop = min(start + args.batch, corpus.n)
            items = [corpus.item(i) for i in range(start, stop)]
            store.write_many(items, tenant=TENANT, purpose=PURPOSE, embeddings=vecs[start:stop])
        store.compact()
        pg_local.Cluster.analyze(store)
        queries = [q for _kind_, q in corpus.queries(args.queries)]
        for q in queries[:10]:
            store.recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
        trips, waits, totals = [], [], []
        kinds: collections.Counter[str] = collections.Counter()
        spent: collections.Counter[str] = collections.Counter()
        for q in queries:
            _tally.log = []
            t0 = time.perf_counter()
            store.recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
            totals.append((time.perf_counter() - t0) * 1000)
            log, _tally.log = _tally.log, None
            trips.append(len(log))
            waits.append(sum(d for _k, d in log) * 1000)
            kinds.update(k for k, _d in log)
            for k, d in log:
                spent[k] += d
    out = {
        "bench": "pg_roundtrips",
        "n": args.n,
        "queries": len(queries),
        "round_trips_per_recall": pct([float(t) for t in trips]),
        "recall_ms": pct(totals),
        "waiting_on_database_ms": pct(waits),
        "trips_per_recall": {
            k: {"count": round(c / len(queries), 2), "mean_ms": round(spent[k] * 1000 / c, 3)}
            for k, c in kinds.most_common()
        },
        "note": "trips counted in the recall's own thread (a full-text leg run on a worker thread is not counted);"
        " a pipeline (its statements listed) is one trip",
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

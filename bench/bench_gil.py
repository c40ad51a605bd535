#!/usr/bin/env python
"""What a busy interpreter costs a read: statements and recalls beside threads running Python.

    python bench/bench_gil.py                 # both parts, 1 ms switch interval, one busy thread
    python bench/bench_gil.py --busy 2        # two busy threads
    python bench/bench_gil.py --interval 0.005

apsw gives the GIL up around every step of a statement, i.e. for every row it returns; a
thread that gave it up waits for it to come back while another thread runs Python. Part 1
times one statement over 100 ids of a 1,000-row table returning a row per id, and the same
returning one aggregated row (``json_group_array``; embeddings joined by ``group_concat``).
Part 2 times ``Store.recall`` (hashing embedder, 8 tenants x 250 records of the load test's
texts, queries of 2-5 of their words) alone and beside the busy threads. Prints ONE JSON
document on stdout. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import apsw
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


class Busy:
    """``n`` threads running a pure Python loop while the block runs."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._stop = False
        self._threads: list[threading.Thread] = []

    def _spin(self) -> None:
        x = 0
        while not self._stop:
            x += 1

    def __enter__(self) -> Busy:
        self._threads = [threading.Thread(target=self._spin, daemon=True) for _ in range(self.n)]
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        for t in self._threads:
            t.join()


def timed(fn: Callable[[], object], n: int) -> dict[str, float]:
    fn()
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        lat.append((time.perf_counter() - t0) * 1000)
    return {"p50_ms": round(float(np.percentile(lat, 50)), 3), "p99_ms": round(float(np.percentile(lat, 99)), 3)}


def statements(busy: int, n: int) -> dict[str, dict]:
    c = apsw.Connection(":memory:")
    c.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, e BLOB)")
    c.execute("BEGIN")
    c.executemany("INSERT INTO t VALUES(?,?)", [(i, bytes(1536)) for i in range(1000)])
    c.execute("COMMIT")
    ids = list(range(0, 1000, 7))[:100]
    marks = ",".join("?" * len(ids))
    cases = {
        "ids, a row each": lambda: c.execute(f"SELECT id FROM t WHERE id IN ({marks})", ids).fetchall(),
        "ids, one row": lambda: json.loads(
            c.execute(f"SELECT json_group_array(id) FROM t WHERE id IN ({marks})", ids).fetchone()[0]
        ),
        "embeddings, a row each": lambda: c.execute(f"SELECT id, e FROM t WHERE id IN ({marks})", ids).fetchall(),
        "embeddings, one row": lambda: c.execute(
            "SELECT json_group_array(id), json_group_array(length(e)), CAST(group_concat(e, x'') AS BLOB)"
            f" FROM t WHERE id IN ({marks})",
            ids,
        ).fetchone(),
    }
    out: dict[str, dict] = {}
    for name, fn in cases.items():
        alone = timed(fn, n)
        with Busy(busy):
            beside = timed(fn, n)
        out[name] = {"alone": alone, "beside_busy": beside}
    return out


def recalls(busy: int, n: int) -> dict[str, dict]:
    import efface
    from bench_service import Texts

    rng = random.Random(3)
    texts = Texts("real")
    written: list[str] = []
    with tempfile.TemporaryDirectory() as d, efface.open(d + "/s", embedder="hashing") as store:
        for t in range(8):
            items = [{"key": f"seed:{i}", "text": texts.text(rng), "subject": f"s{i % 50}"} for i in range(250)]
            written += [x["text"] for x in items]
            store.write_many(items, tenant=f"t{t}", purpose="support")
        queries = iter([texts.query(rng, written) for _ in range(4 * n + 2)])

        def one() -> object:
            return store.recall(next(queries), tenant=f"t{rng.randrange(8)}", purpose="support")

        alone = timed(one, n)
        with Busy(busy):
            beside = timed(one, n)
    return {"recall": {"alone": alone, "beside_busy": beside}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--busy", type=int, default=1, help="threads running Python beside the reads")
    ap.add_argument("--interval", type=float, default=0.001, help="the GIL switch interval (s), as efface serve sets")
    ap.add_argument("--n", type=int, default=300, help="timed calls per case")
    args = ap.parse_args()
    sys.setswitchinterval(args.interval)
    result = {
        "busy_threads": args.busy,
        "switch_interval_s": args.interval,
        "statements": statements(args.busy, args.n),
        "recalls": recalls(args.busy, args.n),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

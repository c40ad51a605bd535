#!/usr/bin/env python
"""Read concurrency: recall latency and throughput with 1, 4 and 16 reader threads, idle and
while maintenance runs (issue #9).

    PYTHONPATH=src python bench/bench_concurrency.py --records 100000 --out bench/results/results-concurrency.json
    PYTHONPATH=src python bench/bench_concurrency.py --quick           # 5k records, short cells, ~1 min
    python bench/tables/table_concurrency.py bench/results/results-concurrency.json

Builds a store of N records (bench_store's synthetic memories: subjects 'user-000123' owning
100 records each), then for each condition and each thread count runs the reader threads for
``--duration`` seconds (idle) or ``--maint-duration`` seconds (maintenance). Each reader
loops over recall(k=10) queries (half record words, half random vocabulary, as in
bench_store) and, every fourth query, a read() of a live key.
Conditions, each with one maintenance thread looping meanwhile:

  * idle:        no maintenance;
  * verify:      forget a 100-record subject, wait(until='erased'), then verify(handle);
  * compaction:  forget a 100-record subject, then compact() (which makes the erasure
                 physical: FTS optimize, ANN save, index rebuild, checkpoint);
  * backup:      backup() of the whole store to a file.

Only the maintenance call itself counts: a query is "during verify" (compaction, backup) if
it started while verify() (compact(), backup()) was running, and throughput is the number of
recalls started in those periods over their total length. The forget and wait() of the loop
are not counted. The records a cell forgot are written back after it (not timed), so every
cell runs on ~N records. The store runs with background=False (no compactor
thread of its own): the maintenance is the benchmark's, and nothing else takes the lock.

Public API only: efface.open(dir, embedder='hashing'), write_many, recall, read, forget,
wait, verify, compact, backup. Prints ONE JSON document on stdout (progress on stderr), with
the commit, the machine, the load averages before and after each condition, and the
targets (reported, never asserted):
  * recall p99 during maintenance <= 2x idle p99 (same number of threads);
  * recall throughput with 4 threads >= 1.6x one thread (idle).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from bench_store import (  # noqa: E402  (reused, not copied)
    PURPOSE,
    TENANT,
    Corpus,
    log,
    machine_info,
    pct,
)

CONDITIONS = ("idle", "verify", "compaction", "backup")
TARGETS = {
    "p99_during_maintenance_vs_idle": {
        "threshold": 2.0,
        "op": "<=",
        "what": "recall p99 during maintenance / idle recall p99, same threads",
    },
    "throughput_4_threads_vs_1": {
        "threshold": 1.6,
        "op": ">=",
        "what": "idle recalls/s with 4 threads / with 1 thread",
    },
}


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class Maintenance:
    """One maintenance loop in a thread; ``periods`` holds (start, end) of every timed call."""

    def __init__(self, step: Callable[[Maintenance], None]):
        self.step, self.stop = step, threading.Event()
        self.periods: list[tuple[float, float]] = []
        self.active_since: float | None = None
        self.errors: list[str] = []
        self.ran_out = False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def timed(self, fn: Callable[[], Any]) -> Any:
        self.active_since = t = time.perf_counter()
        try:
            return fn()
        finally:
            self.periods.append((t, time.perf_counter()))
            self.active_since = None

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.step(self)
            except Exception as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                time.sleep(0.05)

    def exhausted(self) -> None:
        """No subject left to forget: the loop ends (the cell's counted time ends with it)."""
        self.ran_out = True
        self.stop.set()

    def active_at(self, t: float) -> bool:
        since = self.active_since
        return since is not None and since <= t


def measure(
    store,
    corpus: Corpus,
    queries: list[str],
    read_keys: list[str],
    threads: int,
    duration: float,
    maint: Maintenance | None,
) -> dict[str, Any]:
    """Run ``threads`` readers for ``duration`` seconds (after a short warm-up) while ``maint``
    loops; return the latency and throughput figures of the queries that count."""
    stop = threading.Event()
    rec: list[list[tuple[float, float, bool]]] = [[] for _ in range(threads)]  # (start, seconds, counted)
    reads: list[list[tuple[float, bool]]] = [[] for _ in range(threads)]
    errors: list[str] = []

    def reader(i: int) -> None:
        rng = random.Random(1000 + i)
        n = 0
        try:
            while not stop.is_set():
                q = queries[rng.randrange(len(queries))]
                t = time.perf_counter()
                counted = maint is None or maint.active_at(t)
                store.recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
                rec[i].append((t, time.perf_counter() - t, counted))
                n += 1
                if n % 4 == 0:
                    key = read_keys[rng.randrange(len(read_keys))]
                    t = time.perf_counter()
                    counted = maint is None or maint.active_at(t)
                    got = store.read(key, tenant=TENANT, purpose=PURPOSE)
                    reads[i].append((time.perf_counter() - t, counted))
                    if got is None:
                        errors.append(f"read {key}: None")
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")

    for q in queries[:20]:  # warm-up, single thread
        store.recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
    if maint is not None:
        maint.thread.start()
        while not maint.periods and maint.active_since is None and maint.thread.is_alive():
            time.sleep(0.01)  # the first timed call has begun
    pool = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(threads)]
    t0 = time.perf_counter()
    for t in pool:
        t.start()
    time.sleep(duration)
    stop.set()
    for t in pool:
        t.join()
    t1 = time.perf_counter()
    if maint is not None:
        maint.stop.set()
        maint.thread.join()
    lat = [s * 1000 for r in rec for (_t, s, c) in r if c]
    rd = [s * 1000 for r in reads for (s, c) in r if c]
    if maint is None:
        active_s = t1 - t0
        periods: list[tuple[float, float]] = []
    else:
        # the timed calls' overlap with the readers' window
        periods = [(max(a, t0), min(b, t1)) for a, b in maint.periods if b > t0 and a < t1]
        active_s = sum(b - a for a, b in periods)
    started = sum(1 for r in rec for (t, _s, c) in r if c and t0 <= t <= t1)
    out: dict[str, Any] = {
        "threads": threads,
        "window_s": round(t1 - t0, 2),
        "counted_s": round(active_s, 2),
        "recall_ms": pct(lat, (50, 90, 99)) if lat else None,
        "recall_ms_whole_window": pct([s * 1000 for r in rec for (_t, s, _c) in r], (50, 90, 99)) if any(rec) else None,
        "read_ms": pct(rd, (50, 90, 99)) if rd else None,
        "recalls_per_s": round(started / active_s, 1) if active_s > 0 else None,
        "recalls_all": sum(len(r) for r in rec),
        "recalls_counted": len(lat),
    }
    if maint is not None:
        durations = [b - a for a, b in maint.periods]
        out["maintenance"] = {
            "calls": len(durations),
            "call_s": pct(durations, (50, 90)) if durations else None,
            "errors": maint.errors[:5],
            "ran_out_of_subjects": maint.ran_out,
        }
    if errors:
        out["reader_errors"] = errors[:5]
    return out


class Bench:
    def __init__(self, args):
        import efface

        self.args = args
        self.corpus = Corpus(args.records, seed=args.seed)
        n_subjects = self.corpus.n_subjects
        rng = random.Random(args.seed + 1)
        order = list(range(n_subjects))
        rng.shuffle(order)
        # up to 200 subjects (at most half) are read and never forgotten; the others feed the forgets
        n_read = min(200, n_subjects // 2)
        self.read_subjects, self.forget_subjects = order[:n_read], order[n_read:]
        self.read_keys = [self.corpus.key(i) for s in self.read_subjects for i in range(s, self.corpus.n, n_subjects)][
            :2000
        ]
        self.queries = [q for _kind, q in self.corpus.queries(400, seed=args.seed + 2)]
        self.next_forget = 0
        self.forgotten: list[int] = []
        self.workdir = args.dir or tempfile.mkdtemp(prefix="efface-concurrency-")
        os.makedirs(self.workdir, exist_ok=True)
        self.path = args.store or os.path.join(self.workdir, "store")
        fresh = not os.path.exists(self.path)
        t = time.perf_counter()
        self.store = efface.open(self.path, embedder="hashing", background=False)
        self.build: dict[str, Any] = {"reused_store": not fresh}
        if fresh:
            self._write(range(self.corpus.n), "build")
        self.build["records"] = self.store.stats()["records"]
        self.build["build_s"] = round(time.perf_counter() - t, 1)
        log(f"store of {self.build['records']} records ready in {self.build['build_s']} s")

    def _write(self, ids, what: str) -> None:
        ids = list(ids)
        t = time.perf_counter()
        for s in range(0, len(ids), 1000):
            self.store.write_many([self.corpus.item(i) for i in ids[s : s + 1000]], tenant=TENANT, purpose=PURPOSE)
            if what == "build" and (s // 1000) % 10 == 0:
                log(f"  {s + 1000}/{len(ids)} written")
        t1 = time.perf_counter()
        self.store.recall("warm up the index", tenant=TENANT, purpose=PURPOSE)  # ANN absorbs the writes
        t2 = time.perf_counter()
        self.store.compact()
        if what == "build":
            self.build.update(
                write_many_s=round(t1 - t, 1),
                ann_absorb_s=round(t2 - t1, 1),
                compact_s=round(time.perf_counter() - t2, 1),
            )

    def take_subject(self) -> str | None:
        """A subject not forgotten since the last restore (None when every one was)."""
        if self.next_forget >= len(self.forget_subjects):
            return None
        s = self.forget_subjects[self.next_forget]
        self.next_forget += 1
        self.forgotten.append(s)
        return f"user-{s:06d}"

    def restore(self) -> int:
        """Write back the records of every subject forgotten since the last restore."""
        subjects, self.forgotten, self.next_forget = sorted(set(self.forgotten)), [], 0
        ids = [i for s in subjects for i in range(s, self.corpus.n, self.corpus.n_subjects)]
        if ids:
            self._write(ids, "restore")
        return len(ids)

    def maintenance(self, condition: str) -> Maintenance | None:
        st = self.store
        if condition == "idle":
            return None
        if condition == "verify":

            def step(m: Maintenance) -> None:
                subject = self.take_subject()
                if subject is None:
                    return m.exhausted()
                r = st.forget(tenant=TENANT, subject=subject)
                st.wait(r.handle, until="erased", timeout=120)
                if not m.stop.is_set():
                    m.timed(lambda: st.verify(r.handle))
        elif condition == "compaction":

            def step(m: Maintenance) -> None:
                subject = self.take_subject()
                if subject is None:
                    return m.exhausted()
                st.forget(tenant=TENANT, subject=subject)
                m.timed(st.compact)
        else:
            dest = os.path.join(self.workdir, "backup.efb")

            def step(m: Maintenance) -> None:
                m.timed(lambda: st.backup(dest))
                os.unlink(dest)

        return Maintenance(step)

    def run(self) -> dict[str, Any]:
        threads = [int(x) for x in self.args.threads.split(",")]
        out: dict[str, Any] = {}
        for condition in self.args.conditions.split(","):
            cond: dict[str, Any] = {"loadavg_before": load(), "threads": {}}
            t = time.perf_counter()
            duration = self.args.duration if condition == "idle" else self.args.maint_duration
            for n in threads:
                log(f"{condition}: {n} reader thread(s), {duration:g} s")
                cell = measure(
                    self.store, self.corpus, self.queries, self.read_keys, n, duration, self.maintenance(condition)
                )
                cell["loadavg_after"] = load()
                cell["records_written_back"] = self.restore()
                cond["threads"][str(n)] = cell
                r = cell["recall_ms"] or {}
                log(
                    f"  recall p50 {r.get('p50')} p99 {r.get('p99')} ms, {cell['recalls_per_s']} recalls/s "
                    f"(n={cell['recalls_counted']}), load {cell['loadavg_after']}"
                )
            cond["wall_s"] = round(time.perf_counter() - t, 1)
            cond["loadavg_after"] = load()
            out[condition] = cond
        return out

    def close(self) -> None:
        self.store.close()
        if not self.args.keep and not self.args.store:
            shutil.rmtree(self.workdir, ignore_errors=True)


def judge(conditions: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    idle = conditions.get("idle", {}).get("threads", {})
    t = TARGETS["p99_during_maintenance_vs_idle"]
    for name, cond in conditions.items():
        if name == "idle":
            continue
        for n, cell in cond["threads"].items():
            base = (idle.get(n) or {}).get("recall_ms")
            if not base or not cell.get("recall_ms"):
                continue
            ratio = cell["recall_ms"]["p99"] / base["p99"]
            out.append(
                {
                    "target": "p99_during_maintenance_vs_idle",
                    "what": t["what"],
                    "condition": name,
                    "threads": int(n),
                    "value": round(ratio, 2),
                    "p99_ms": cell["recall_ms"]["p99"],
                    "idle_p99_ms": base["p99"],
                    "threshold": f"<= {t['threshold']:g}",
                    "pass": ratio <= t["threshold"],
                }
            )
    t = TARGETS["throughput_4_threads_vs_1"]
    if idle.get("1") and idle.get("4") and idle["1"]["recalls_per_s"]:
        ratio = idle["4"]["recalls_per_s"] / idle["1"]["recalls_per_s"]
        out.append(
            {
                "target": "throughput_4_threads_vs_1",
                "what": t["what"],
                "condition": "idle",
                "threads": 4,
                "value": round(ratio, 2),
                "threshold": f">= {t['threshold']:g}",
                "pass": ratio >= t["threshold"],
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000, help="store size (default 100000)")
    ap.add_argument("--threads", default="1,4,16", help="reader thread counts (default 1,4,16)")
    ap.add_argument("--conditions", default=",".join(CONDITIONS), help="default: " + ",".join(CONDITIONS))
    ap.add_argument("--duration", type=float, default=8.0, help="seconds per idle cell (default 8)")
    ap.add_argument(
        "--maint-duration",
        type=float,
        default=20.0,
        help="seconds per maintenance cell (default 20: with one lock, a reader gets about one "
        "query per maintenance call, so p99 needs many calls)",
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: 5,000 records, 3 s cells")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--dir", default=None, help="working directory (default: a new temporary one)")
    ap.add_argument("--store", default=None, help="reuse (or create and keep) the store in this directory")
    ap.add_argument("--keep", action="store_true", help="keep the working directory")
    ap.add_argument("--out", default=None, help="also write the JSON to this file")
    args = ap.parse_args()
    if args.quick:
        args.records, args.duration, args.maint_duration = 5_000, 3.0, 3.0
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    t0 = time.perf_counter()
    machine = machine_info()
    try:
        commit = subprocess.run(
            ["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        ).stdout.strip()
    except Exception:
        commit = ""
    log(f"commit {commit[:10]}, load {load()}")
    bench = Bench(args)
    try:
        conditions = bench.run()
    finally:
        bench.close()
    targets = judge(conditions)
    doc = {
        "benchmark": "bench_concurrency",
        "command": " ".join(["bench/bench_concurrency.py", *sys.argv[1:]]),
        "started_at": started,
        "commit": commit,
        "machine": machine,
        "records": args.records,
        "params": {
            "threads": args.threads,
            "idle_duration_s": args.duration,
            "maintenance_duration_s": args.maint_duration,
            "k": 10,
            "read_every": 4,
            "background_compactor": False,
            "seed": args.seed,
            "counted": "queries started while the condition's maintenance call was running "
            "(verify(), compact() or backup(); all queries when idle); recall_ms_whole_window: "
            "every query of the cell, also those during the loop's forget and wait()",
        },
        "build": bench.build,
        "conditions": conditions,
        "targets": targets,
        "all_targets_met": bool(targets) and all(t["pass"] for t in targets),
        "loadavg_at_end": load(),
        "total_wall_s": round(time.perf_counter() - t0, 1),
    }
    text = json.dumps(doc, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
        log(f"wrote {args.out}")


if __name__ == "__main__":
    main()

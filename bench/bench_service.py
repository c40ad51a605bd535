#!/usr/bin/env python
"""Load on `efface serve`: concurrent clients on loopback, mixed write / recall / forget /
status, with the server's compactor running and a verifier thread verifying erasures.

    python bench/bench_service.py                          # 64 clients, 60 s
    python bench/bench_service.py --clients 8 --duration 10  # smoke run
    python bench/bench_service.py --procs 1                  # every client thread in one process
    python bench/bench_service.py --rate 2                   # each client paced at 2 requests/s

Prints ONE JSON document on stdout (throughput, p50/p99 per operation, errors); progress goes
to stderr. The server runs in its own process (``python -m efface serve``, hashing embedder) so
the clients do not share its interpreter, and the clients are spread over ``--procs`` processes
(8 by default) so that no client waits for another client's GIL; every request goes to 127.0.0.1 only, and
the run stops by itself after ``--duration`` seconds.

Targets (reported, never asserted): 0 errors; recall p99 <= 50 ms; no request failing or
stalling on the store's locks.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict

import numpy as np

import efface
from efface.service.keys import KeyRing, key_path

WORDS = "tea coffee refund order invoice shipping billing address phone email meeting call note".split()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(12))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--tenants", type=int, default=8)
    ap.add_argument("--seed-records", type=int, default=2000)
    ap.add_argument("--procs", type=int, default=8, help="client processes the clients are spread over")
    ap.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="requests per second per client, Poisson-paced (0: closed loop, each client sends its next "
        "request as soon as the last one is answered, which measures saturation, not latency at a load)",
    )
    args = ap.parse_args()

    root = tempfile.mkdtemp(prefix="efface-bench-service-")
    store_dir = os.path.join(root, "store")
    port = free_port()
    tenants = [f"t{i}" for i in range(args.tenants)]
    os.makedirs(store_dir)
    with KeyRing(key_path(store_dir)) as ring:
        keys = {t: ring.create(t, label="bench")[0] for t in tenants}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    server = subprocess.Popen(
        [sys.executable, "-m", "efface", "serve", "--store", store_dir, "--embedder", "hashing"]
        + ["--port", str(port), "--no-access-log"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                efface.Client(url, api_key=keys[tenants[0]]).health()
                break
            except efface.EffaceError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the server did not start") from None
                time.sleep(0.2)
        print(f"server up on {url}; seeding {args.seed_records} records", file=sys.stderr)
        rng = random.Random(7)
        for t in tenants:
            with efface.Client(url, api_key=keys[t]) as c:
                n = args.seed_records // len(tenants)
                items = [{"key": f"seed:{i}", "text": text(rng), "subject": f"s{i % 50}"} for i in range(n)]
                c.write_many(items, purpose="support")
        load_before = os.getloadavg()
        results = run(url, keys, tenants, args)
        results["machine"] = {
            "cpus": os.cpu_count(),
            "load_avg_before": [round(x, 2) for x in load_before],
            "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        }
        results["commit"] = commit()
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(root, ignore_errors=True)
    json.dump(results, sys.stdout, indent=2)
    print()


def run(url: str, keys: dict, tenants: list, args: argparse.Namespace) -> dict:
    """Start ``--procs`` client processes (the threads of one process share its GIL, which
    would time the clients' interpreter more than the server), gather their latencies."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    ready = ctx.Barrier(args.procs + 1)  # every process connected: the clock starts for all at once
    procs = []
    for p in range(args.procs):
        ids = list(range(p, args.clients, args.procs))
        procs.append(
            ctx.Process(
                target=client_process,
                args=(url, keys, tenants, ids, args.duration, p == 0, ready, out, args.rate),
            )
        )
    for proc in procs:
        proc.start()
    ready.wait(timeout=120)
    lat: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, int] = defaultdict(int)
    for _ in procs:
        got = out.get(timeout=args.duration + 120)
        for op, v in got["lat"].items():
            lat[op].extend(v)
        for k, n in got["errors"].items():
            errors[k] += n
    for proc in procs:
        proc.join()
    elapsed = args.duration
    ops = {
        op: {
            "count": len(v),
            "per_s": round(len(v) / elapsed, 1),
            "p50_ms": round(float(np.percentile(v, 50)) * 1000, 2),
            "p99_ms": round(float(np.percentile(v, 99)) * 1000, 2),
            "max_ms": round(max(v) * 1000, 2),
        }
        for op, v in sorted(lat.items())
    }
    total = sum(len(v) for v in lat.values())
    recall_p99 = ops.get("recall", {}).get("p99_ms")
    return {
        "clients": args.clients,
        "client_processes": args.procs,
        "rate_per_client_per_s": args.rate or "closed loop",
        "duration_s": round(elapsed, 1),
        "tenants": len(tenants),
        "requests": total,
        "throughput_per_s": round(total / elapsed, 1),
        "operations": ops,
        "errors": dict(errors),
        "targets": {
            "zero_errors": not errors,
            "recall_p99_le_50ms": recall_p99 is not None and recall_p99 <= 50,
        },
    }


def client_process(
    url: str, keys: dict, tenants: list, ids: list, duration: float, verifying: bool, ready, out, rate: float = 0.0
) -> None:
    """One client process: a thread per client id (and the verifier in the first process)."""
    clients = {i: efface.Client(url, api_key=keys[tenants[i % len(tenants)]]) for i in ids}
    for c in clients.values():
        c.health()  # connected before the clock starts
    ready.wait(timeout=120)
    stop_at = time.monotonic() + duration
    lat: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, int] = defaultdict(int)
    handles: list[tuple[str, str]] = []
    lock = threading.Lock()

    local = threading.local()

    def timed(op: str, f):  # type: ignore[no-untyped-def]
        # Paced, a request is timed from when it was due, so a client that fell behind a slow
        # server counts the wait too (no coordinated omission).
        t0 = getattr(local, "due", None) or time.perf_counter()
        local.due = None
        try:
            result = f()
        except Exception as exc:
            with lock:
                errors[f"{op}:{type(exc).__name__}"] += 1
            return None
        dt = time.perf_counter() - t0
        with lock:
            lat[op].append(dt)
        return result

    def client(i: int) -> None:
        rng = random.Random(i)
        tenant = tenants[i % len(tenants)]
        mine: list[str] = []
        last: str | None = None
        with clients[i] as c:
            n = 0
            due = time.perf_counter()
            while time.monotonic() < stop_at:
                if rate > 0:
                    due += rng.expovariate(rate)
                    wait = due - time.perf_counter()
                    if wait > 0:
                        time.sleep(wait)
                    local.due = due
                r = rng.random()
                if r < 0.4:
                    key = f"c{i}:{n}"
                    n += 1
                    if timed("write", lambda key=key: c.write(key, text(rng), subject=f"c{i}", purpose="support")):
                        mine.append(key)
                elif r < 0.8:
                    timed("recall", lambda: c.recall(" ".join(rng.sample(WORDS, 3)), purpose="support", k=10))
                elif r < 0.9 and mine:
                    receipt = timed("forget", lambda: c.forget(key=mine.pop(0)))
                    if receipt is not None:
                        last = receipt.handle
                        with lock:
                            handles.append((tenant, last))
                elif last is not None:
                    timed("status", lambda: c.status(last))

    def verifier() -> None:
        by_tenant = {t: efface.Client(url, api_key=keys[t]) for t in tenants}
        while time.monotonic() < stop_at:
            with lock:
                pick = handles[-1] if handles else None
            if pick is not None:
                timed("verify", lambda pick=pick: by_tenant[pick[0]].verify(pick[1]))
            time.sleep(1.0)
        for c in by_tenant.values():
            c.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in ids]
    if verifying:
        threads.append(threading.Thread(target=verifier))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put({"lat": dict(lat), "errors": dict(errors)})


if __name__ == "__main__":
    main()

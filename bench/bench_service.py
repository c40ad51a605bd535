#!/usr/bin/env python
"""Load on `efface serve`: concurrent clients on loopback, mixed write / recall / forget /
status, with the server's compactor running and a verifier thread verifying erasures.

    python bench/bench_service.py                          # 64 clients, 60 s
    python bench/bench_service.py --clients 8 --duration 10  # smoke run
    python bench/bench_service.py --procs 1                  # every client thread in one process
    python bench/bench_service.py --rate 2                   # each client paced at 2 requests/s
    python bench/bench_service.py --vocabulary tiny          # the old 13-word texts
    python bench/bench_service.py --py-spy server.json       # profile the server meanwhile

Prints ONE JSON document on stdout (throughput, p50/p99 per operation, errors); progress goes
to stderr. The server runs in its own process (``python -m efface serve``, hashing embedder) so
the clients do not share its interpreter, and the clients are spread over ``--procs`` processes
(8 by default) so that no client waits for another client's GIL; every request goes to 127.0.0.1 only, and
the run stops by itself after ``--duration`` seconds.

Texts (``--vocabulary``): ``real`` (the default) writes varied agent-memory sentences from
bench_store's corpus generator (names, places, foods, projects, ...) and recalls with 2-5 words
taken from a text that was written (seeded or by the client itself); ``tiny`` is the first
generator, 12 words drawn from 13, so every query word is in most records and the full-text
leg scores nearly every row of a tenant: no agent's memory looks like it, but it is kept to
measure that worst case.

Targets (reported, never asserted): 0 errors; recall p99 <= 50 ms; no request failing or
stalling on the store's locks.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import re
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
QUERY_STOPWORDS = frozenset(
    "a an the and or of on in to for by at is are was be has have their they them it its as".split()
)


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


class Texts:
    """What the clients write and ask (see the module docstring): ``text(rng)`` a new record's
    text, ``query(rng, written)`` a recall query, ``written`` texts this client has seen."""

    def __init__(self, vocabulary: str) -> None:
        self.vocabulary = vocabulary
        if vocabulary == "real":
            from bench_store import FIRST, LAST, Corpus  # bench/ is on sys.path: this script's directory

            self._sentence = Corpus._sentence
            rng = random.Random(11)
            self._names = [f"{rng.choice(FIRST)} {rng.choice(LAST)}" for _ in range(400)]

    def text(self, rng: random.Random) -> str:
        if self.vocabulary == "tiny":
            return " ".join(rng.choice(WORDS) for _ in range(12))
        return self._sentence(rng, rng.choice(self._names))

    def query(self, rng: random.Random, written: list[str]) -> str:
        if self.vocabulary == "tiny" or not written:
            return " ".join(rng.sample(WORDS, 3))
        words = [w for w in re.findall(r"[A-Za-z]+", rng.choice(written)) if w.lower() not in QUERY_STOPWORDS]
        return " ".join(rng.sample(words, min(len(words), rng.randint(2, 5))))


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
    ap.add_argument("--vocabulary", choices=("real", "tiny"), default="real", help="what the texts are made of")
    ap.add_argument(
        "--py-spy",
        metavar="OUT",
        help="record the server with py-spy for the measured minute (stacks in OUT; OUT.gil: GIL holders only)",
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
        texts = Texts(args.vocabulary)
        seeded: dict[str, list[str]] = {}
        for t in tenants:
            with efface.Client(url, api_key=keys[t]) as c:
                n = args.seed_records // len(tenants)
                items = [{"key": f"seed:{i}", "text": texts.text(rng), "subject": f"s{i % 50}"} for i in range(n)]
                c.write_many(items, purpose="support")
                seeded[t] = [i["text"] for i in items]
        spies = spy(server.pid, args) if args.py_spy else []
        load_before = os.getloadavg()
        server_cpu = cpu_seconds(server.pid)
        results = run(url, keys, tenants, seeded, args)
        server_cpu = cpu_seconds(server.pid) - server_cpu
        for s in spies:
            s.wait(timeout=120)
        results["machine"] = {
            "cpus": os.cpu_count(),
            "load_avg_before": [round(x, 2) for x in load_before],
            "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        }
        results["cpu_s"]["server"] = round(server_cpu, 1)
        results["cpu_s"]["server_ms_per_request"] = round(1000 * server_cpu / max(1, results["requests"]), 2)
        results["commit"] = commit()
        results["vocabulary"] = args.vocabulary
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(root, ignore_errors=True)
    json.dump(results, sys.stdout, indent=2)
    print()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux /proc), to tell a server that
    waits from one that computes, and both from a machine that has no core to give."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spy(pid: int, args: argparse.Namespace) -> list[subprocess.Popen]:
    """py-spy on the server for the measured minute: every thread's stacks (idle ones too: a
    thread waiting on a lock shows where), and only the GIL holder's (who keeps the others
    waiting). Sampled at 200 Hz, so the profile costs the server little."""
    common = ["py-spy", "record", "--pid", str(pid), "--rate", "200", "--duration", str(int(args.duration))]
    common += ["--format", "raw", "--nonblocking"]
    return [
        subprocess.Popen(common + ["--idle", "--threads", "-o", args.py_spy], stdout=subprocess.DEVNULL),
        subprocess.Popen(common + ["--gil", "-o", args.py_spy + ".gil"], stdout=subprocess.DEVNULL),
    ]


def run(url: str, keys: dict, tenants: list, seeded: dict, args: argparse.Namespace) -> dict:
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
                args=(url, keys, tenants, ids, args.duration, p == 0, ready, out, args.rate, args.vocabulary, seeded),
            )
        )
    for proc in procs:
        proc.start()
    ready.wait(timeout=120)
    lat: dict[str, list[float]] = defaultdict(list)
    server: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, int] = defaultdict(int)
    client_cpu = 0.0
    for _ in procs:
        got = out.get(timeout=args.duration + 120)
        for op, v in got["lat"].items():
            lat[op].extend(v)
        for op, v in got["server"].items():
            server[op].extend(v)
        client_cpu += got["cpu_s"]
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
            # in the server (Server-Timing: request in to answer out), when the server sends it
            **(
                {
                    "server_p50_ms": round(float(np.percentile(server[op], 50)) * 1000, 2),
                    "server_p99_ms": round(float(np.percentile(server[op], 99)) * 1000, 2),
                }
                if server.get(op)
                else {}
            ),
        }
        for op, v in sorted(lat.items())
    }
    # Inside the server, per lane phase (see efface.service.http.ServerTiming).
    for key, v in sorted(server.items()):
        op, _, phase = key.partition(".")
        if phase and op in ops:
            ops[op][f"server_{phase}_p50_ms"] = round(float(np.percentile(v, 50)) * 1000, 2)
            ops[op][f"server_{phase}_p99_ms"] = round(float(np.percentile(v, 99)) * 1000, 2)
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
        "cpu_s": {"clients": round(client_cpu, 1)},  # CPU seconds spent in the measured minute
        "targets": {
            "zero_errors": not errors,
            "recall_p99_le_50ms": recall_p99 is not None and recall_p99 <= 50,
        },
    }


def client_process(
    url: str,
    keys: dict,
    tenants: list,
    ids: list,
    duration: float,
    verifying: bool,
    ready,
    out,
    rate: float,
    vocabulary: str,
    seeded: dict,
) -> None:
    """One client process: a thread per client id (and the verifier in the first process)."""
    texts = Texts(vocabulary)
    local = threading.local()

    def server_timing(response) -> None:  # type: ignore[no-untyped-def]
        # The server's own time for the request (its Server-Timing header), beside the client's.
        # Server-Timing: "app;dur=MS" and, for a call run in a lane, "lane", "store", "render".
        local.server = None
        local.phases = {}
        for part in response.headers.get("server-timing", "").split(","):
            name, _, dur = part.strip().partition(";dur=")
            if dur:
                if name == "app":
                    local.server = float(dur) / 1000
                else:
                    local.phases[name] = float(dur) / 1000

    def connect(key: str) -> efface.Client:
        c = efface.Client(url, api_key=key)
        c._http.event_hooks["response"].append(server_timing)
        return c

    clients = {i: connect(keys[tenants[i % len(tenants)]]) for i in ids}
    for c in clients.values():
        c.health()  # connected before the clock starts
    ready.wait(timeout=120)
    cpu0 = time.process_time()
    stop_at = time.monotonic() + duration
    lat: dict[str, list[float]] = defaultdict(list)
    server: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, int] = defaultdict(int)
    handles: list[tuple[str, str]] = []
    lock = threading.Lock()

    def timed(op: str, f):  # type: ignore[no-untyped-def]
        # Paced, a request is timed from when it was due, so a client that fell behind a slow
        # server counts the wait too (no coordinated omission).
        t0 = getattr(local, "due", None) or time.perf_counter()
        local.due = None
        local.server = None
        local.phases = {}
        try:
            result = f()
        except Exception as exc:
            with lock:
                errors[f"{op}:{type(exc).__name__}"] += 1
            return None
        dt = time.perf_counter() - t0
        with lock:
            lat[op].append(dt)
            if local.server is not None:
                server[op].append(local.server)
            for name, x in local.phases.items():
                server[f"{op}.{name}"].append(x)
        return result

    def client(i: int) -> None:
        rng = random.Random(i)
        tenant = tenants[i % len(tenants)]
        mine: list[str] = []
        written = list(seeded[tenant])  # texts of the client's tenant it may ask about (forgotten ones too)
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
                    body = texts.text(rng)
                    if timed(
                        "write", lambda key=key, body=body: c.write(key, body, subject=f"c{i}", purpose="support")
                    ):
                        mine.append(key)
                        written.append(body)
                elif r < 0.8:
                    query = texts.query(rng, written)
                    timed("recall", lambda query=query: c.recall(query, purpose="support", k=10))
                elif r < 0.9 and mine:
                    receipt = timed("forget", lambda: c.forget(key=mine.pop(0)))
                    if receipt is not None:
                        last = receipt.handle
                        with lock:
                            handles.append((tenant, last))
                elif last is not None:
                    timed("status", lambda: c.status(last))

    def verifier() -> None:
        by_tenant = {t: connect(keys[t]) for t in tenants}
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
    out.put({"lat": dict(lat), "server": dict(server), "errors": dict(errors), "cpu_s": time.process_time() - cpu0})


if __name__ == "__main__":
    main()

"""Crash test: kill -9 during verification and compaction, then check the raw files.

A worker writes batches for two subjects, forgets one, and alternates ``verify`` and
``compact`` (with the background compactor also running) until ``erased``; the parent
kills it at a random moment, reopens the store, and checks:

* nothing acknowledged is lost: every record of a kept subject written before the kill
  is readable, and every acknowledged forget still holds;
* ``verify`` never reports ``erased`` while a byte of the erased text remains: whenever it
  does (before or after the crash), the test scans the raw files itself;
* the compactor resumes: after ``wait``, every acknowledged erasure verifies ``erased``,
  and the ledger's chain is intact.

On PostgreSQL too (the ``backend`` fixture, a bounded sample of the seeds): there ``verify``
says what it checked of the database's files, so after ``wait`` it must say ``unreadable`` or
``erased``, and ``erased`` never while a byte of the text remains in the store's directory.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_crash import Target, on  # noqa: E402
from test_crash import target as target  # noqa: E402 - the fixture

from conftest import bounded  # noqa: E402
from crash_verify_worker import text  # noqa: E402

WORKER = os.path.join(HERE, "crash_verify_worker.py")
ROUNDS = int(os.environ.get("EFFACE_CRASH_ROUNDS", bounded(4, 8)))


def run_and_kill(store_dir: str, seed: int, after_lines: int, delay: float, env: dict | None = None) -> list[dict]:
    proc = subprocess.Popen(
        [sys.executable, WORKER, store_dir, str(seed)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    lines: list[dict] = []
    fired = threading.Event()

    def reader():
        for raw in proc.stdout:
            if not raw.endswith(b"\n"):
                break
            lines.append(json.loads(raw))
            if len(lines) >= after_lines:
                fired.set()
        fired.set()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    fired.wait(timeout=120)
    time.sleep(delay)
    alive = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    t.join()
    stderr = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    proc.stdout.close()
    assert alive, f"the worker died on its own:\n{stderr}"
    assert lines and lines[0] == {"ev": "ready"}, stderr
    return lines[1:]


def files_holding(path: str, needles: list[bytes]) -> list[str]:
    found = []
    for d, _, names in os.walk(path):
        for f in names:
            with open(os.path.join(d, f), "rb") as fh:
                data = fh.read()
            if any(n in data for n in needles):
                found.append(os.path.relpath(os.path.join(d, f), path))
    return found


@on(sqlite=range(ROUNDS), postgres=bounded(range(1), range(2)))
def test_kill_during_verify_and_compaction(tmp_path, seed, target: Target):
    rng = random.Random(seed)
    store_dir = str(tmp_path / "store")
    lines = run_and_kill(
        store_dir, seed, after_lines=rng.randint(6, 40), delay=rng.uniform(0.0, 0.15), env=target.env()
    )
    scanned = target.url is None  # the byte ladder proves 'erased' of the files this test scans

    # What was acknowledged before the kill.
    begun: dict = {}
    writes: list[tuple[int, str, int]] = []  # (round, subject, n)
    forgets: list[tuple[int, str]] = []  # (round, handle)
    for line in lines:
        if line["ev"] == "begin":
            begun = line
            continue
        if begun["op"] == "write":
            writes.append((begun["round"], line["res"]["subject"], line["res"]["n"]))
        elif begun["op"] == "forget":
            forgets.append((begun["round"], line["res"]["handle"]))
    assert writes, "the kill came before any acknowledged write: move the trigger"

    with target.open(store_dir) as store:
        # nothing acknowledged is lost, and no acknowledged forget is undone
        forgotten_rounds = {r for r, _ in forgets}
        for r, subject, n in writes:
            for k in (0, n // 2, n - 1):
                got = store.read(f"{subject}/{r}/{k}", tenant="t", purpose="p")
                if subject == "keep":
                    assert got is not None and got.text == text(seed, r, subject, k)
                elif r in forgotten_rounds:
                    assert got is None
        # verify never claims erased while the bytes remain
        for r, handle in forgets:
            n = next(n for rr, s, n in writes if rr == r and s == "gone")
            needles = [text(seed, r, "gone", k).encode() for k in range(n)]
            v = store.verify(handle)
            if v.level == "erased":
                assert files_holding(store_dir, needles) == [], (seed, r)
            store.wait(handle, timeout=60)
            v = store.verify(handle)
            assert v.level == "erased" or (not scanned and v.level == "unreadable"), [c.to_dict() for c in v.failed]
            assert files_holding(store_dir, needles) == [], (seed, r)
        assert store.verify_ledger().ok

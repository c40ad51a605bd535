#!/usr/bin/env python
"""Read the py-spy profiles that ``bench_service.py --py-spy OUT`` records of the server and
say where its time went.

    python bench/spy_summary.py OUT          # every thread (idle ones too): who waits where
    python bench/spy_summary.py OUT.gil      # only the GIL holder: who keeps the others waiting

Prints, as shares of the samples: each thread role (event loop, a worker of each store call,
the compactor, ...); the store's lock (samples inside a group's run, i.e. holding it, and
samples waiting to take it); and the phases of a recall inside its worker. py-spy samples at
a fixed rate, so a share of samples is a share of time (per thread for the first file; of the
whole run for the GIL file, whose total also says how much of the minute the GIL was held).
"""

from __future__ import annotations

import re
import sys
from collections import Counter

RECALL_PHASES = [
    ("validate and embed the query", ("HashingEmbedder.embed", "validate.py")),
    ("known purpose", ("known_purpose",)),
    ("read-your-writes (ANN delta)", ("absorb_new_content",)),
    ("full-text candidates (FTS5)", ("FullTextIndex.candidates", "FullTextIndex._selective")),
    ("ANN candidates", ("VectorIndex.candidates",)),
    ("live check (live_ids)", ("live_ids",)),
    ("exact cosine", ("_cosine",)),
    ("read the texts (records_by_id)", ("records_by_id",)),
    ("snapshot begin/commit", ("SQLiteOrigin.snapshot",)),
]


def role(stack: str) -> str:
    if "Compactor" in stack:
        return "compactor"
    if "Lanes.run.<locals>.work" in stack:
        m = re.search(r"Store\.(\w+) \(efface/store.py", stack)
        return "worker: " + (m.group(1) if m else "other")
    if "Lanes.run (efface/service/http.py" in stack:
        return "event loop: handing a call to a worker"
    if "uvicorn" in stack or "asyncio" in stack:
        return "event loop (HTTP, routing, validation) and idle workers"
    return "other"


def main(path: str) -> None:
    roles: Counter[str] = Counter()
    lock: Counter[str] = Counter()
    phases: Counter[str] = Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            n = int(count)
            total += n
            roles[role(stack)] += n
            frames = stack.split(";")
            if "Store._run_jobs" in stack:
                lock["holding it (a group's run)"] += n
            elif frames[-1].startswith(("Chokepoint.submit", "Store._mutate", "Store.forget (efface/store.py")):
                lock["waiting for it"] += n
            if "Store.recall" in stack:
                found, depth = "recall's own python (fusion, hits)", -1
                for name, marks in RECALL_PHASES:
                    for i, frame in enumerate(frames):
                        if i > depth and any(m in frame for m in marks):
                            found, depth = name, i
                phases[found] += n
    print(f"{total} samples")
    for title, table in (("thread roles", roles), ("the store's lock", lock), ("inside recall", phases)):
        part = sum(table.values())
        print(f"\n{title} ({part} samples)")
        for name, n in table.most_common():
            print(f"  {n:8d}  {100 * n / max(1, part):5.1f} %  {name}")


if __name__ == "__main__":
    main(sys.argv[1])

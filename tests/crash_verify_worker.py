"""The process that test_crash_verify.py kills with SIGKILL while it verifies and compacts.

    python tests/crash_verify_worker.py STORE SEED

STORE is a directory, or this process's cache directory of a PostgreSQL store (see
``crash_worker.open_store``).

Each round writes a batch for two subjects, forgets one of them, then alternates
``verify`` and ``compact`` on that erasure until ``verify`` says ``erased``, and goes on to
the next round. It prints one JSON line per event, flushed, so the parent knows what was
acknowledged and what was in flight at the kill:

    {"ev": "begin", "i": 3, "op": "verify", "round": 1}
    {"ev": "ack", "i": 3, "res": {...}}
"""

from __future__ import annotations

import json
import random
import sys


def text(seed: int, r: int, subject: str, i: int) -> str:
    return f"{subject} seed{seed} round{r} item{i}: a distinctive memory about the orchard by the river"


def main(path: str, seed: int) -> None:
    from crash_worker import open_store  # a directory, or PostgreSQL (crash_worker's environment)

    rng = random.Random(seed)
    # The background compactor runs too, so kills also land inside its saves.
    store = open_store(path, background=True, compact_interval=0.02)

    def emit(obj):
        sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
        sys.stdout.flush()

    emit({"ev": "ready"})
    i = 0
    for r in range(1000):
        n = rng.randint(50, 400)

        def step(op, fn):
            nonlocal i
            emit({"ev": "begin", "i": i, "op": op, "round": r})
            res = fn()
            emit({"ev": "ack", "i": i, "res": res})
            i += 1
            return res

        for subject in ("keep", "gone"):
            step(
                "write",
                lambda subject=subject: (
                    {
                        "epoch": store.write_many(
                            [{"key": f"{subject}/{r}/{k}", "text": text(seed, r, subject, k)} for k in range(n)],
                            tenant="t",
                            subject=f"{subject}{r}",
                            purpose="p",
                        )
                    }
                    | {"subject": subject, "n": n}
                ),
            )
        receipt = step(
            "forget",
            lambda: (lambda rc: {"handle": rc.handle, "epoch": rc.epoch, "erased": len(rc.erased)})(
                store.forget(tenant="t", subject=f"gone{r}")
            ),
        )
        for _ in range(20):
            v = step("verify", lambda: {"level": store.verify(receipt["handle"]).level})
            if v["level"] == "erased":
                break
            step("compact", lambda: {"epoch": store.compact()})


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))

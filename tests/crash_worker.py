"""The process that test_crash.py kills with SIGKILL.

    python tests/crash_worker.py STORE SEED MODE [TENANTS]

Opens STORE (hashing embedder, background compactor on): a directory, or, with
``EFFACE_CRASH_PG_URL`` (and ``EFFACE_CRASH_KEK``, the key file) set, the store in that
PostgreSQL database with STORE as this process's cache directory. TENANTS (comma-separated,
default ``acme,globex``) are the tenants it writes to: two workers on one database are given
disjoint ones, so each one's acknowledged operations make a model of their own. It and runs a seeded random sequence
of writes, batch writes, retains, forgets and compactions until it is killed. Around each
operation it prints one JSON line to stdout, flushed:

    {"ev": "begin", "i": 7, "op": {...}}      before the call (it may or may not apply)
    {"ev": "ack",   "i": 7, "res": {...}}     after the call returned (it applied)

so the parent knows every acknowledged operation and the one in flight at the kill.
MODE is ``mixed`` (small random operations), ``bigbatch`` (mixed, with a large
write_many every few operations) or ``compact`` (large batches, absorbed and saved by a
compaction, then a forget that erases a third of each, then a compaction that starts with
all of those erasures pending in the vector index; no background compactor in this mode).
"""

from __future__ import annotations

import json
import random
import sys

TENANTS = ("acme", "globex")
SUBJECTS = ("alice", "bob", "carol")
PURPOSES = ("support", "analytics", "audit")
BASIS = {"support": ("consent", "contract"), "analytics": ("consent",), "audit": ("legal_hold",)}
GROUPS = ("s/", "s/x/", "n/")
WORDS = (
    "amber",
    "birch",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "grove",
    "harbor",
    "indigo",
    "juniper",
    "kestrel",
    "lumen",
    "meadow",
    "nectar",
    "orchid",
    "pebble",
)


def generated_items(gen: dict) -> list[dict]:
    """Expand a compact batch description (so the big batches' JSON lines stay small).
    The parent expands the same description to model the batch."""
    prefix, n, tag = gen["prefix"], gen["n"], gen["tag"]
    return [
        {
            "key": f"{prefix}{i}",
            "text": f"{WORDS[i % 16]} {WORDS[(i * 7 + 3) % 16]} bulk {tag}b{i}",
            "subject": SUBJECTS[i % 3],
            "purpose": "support",
            "basis": "consent",
        }
        for i in range(n)
    ]


def open_store(path: str, **options):
    """The store at ``path`` (a directory), or on the PostgreSQL database the environment names
    (``path``: this process's cache directory)."""
    import os

    import efface

    url = os.environ.get(PG_URL)
    if url:
        return efface.open(url, embedder="hashing", kek_file=os.environ[PG_KEK], cache_dir=path, **options)
    return efface.open(path, embedder="hashing", **options)


PG_URL, PG_KEK = "EFFACE_CRASH_PG_URL", "EFFACE_CRASH_KEK"


def main(path: str, seed: int, mode: str, tenants: tuple[str, ...] = TENANTS) -> None:
    import efface

    rng = random.Random(seed)
    serial = 0

    def text() -> str:
        nonlocal serial
        serial += 1
        # The last word is unique to this text, so full-text search can always find it.
        return " ".join(rng.sample(WORDS, 3)) + f" u{seed}x{serial}"

    def key() -> str:
        return rng.choice(GROUPS) + str(rng.randrange(8))

    def claim() -> dict:
        purpose = rng.choice(PURPOSES)
        return {"subject": rng.choice(SUBJECTS), "purpose": purpose, "basis": rng.choice(BASIS[purpose])}

    def emit(obj: dict) -> None:
        sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
        sys.stdout.flush()

    # In ``compact`` mode only the explicit compactions absorb erasures, so each one starts
    # with a batch's worth pending; elsewhere the background compactor runs all along.
    store = open_store(path, background=mode != "compact", compact_interval=0.05)
    emit({"ev": "ready"})

    def next_op(i: int) -> dict:
        tenant = rng.choice(tenants)
        if mode == "compact":
            r, step = divmod(i, 4)
            if step == 0:
                return {
                    "kind": "write_many",
                    "tenant": tenants[0],
                    "gen": {"prefix": f"c{r}/", "n": 1500, "tag": f"{seed}c{r}"},
                }
            if step == 1:  # the vector index takes the batch in, and it is saved
                return {"kind": "compact", "erasures_pending": False}
            if step == 2:  # erases a third of the batch: alice's or bob's records
                return {
                    "kind": "forget",
                    "tenant": tenants[0],
                    "selector": {"prefix": f"c{r}/", "subject": SUBJECTS[r % 2]},
                }
            return {"kind": "compact", "erasures_pending": True}
        if mode == "bigbatch" and i % 6 == 3:
            return {
                "kind": "write_many",
                "tenant": tenant,
                "gen": {"prefix": f"big{i}/", "n": 3000, "tag": f"{seed}g{i}"},
            }
        roll = rng.random()
        if roll < 0.35:
            return {"kind": "write", "tenant": tenant, "key": key(), "text": text(), **claim()}
        if roll < 0.55:
            keys = list(dict.fromkeys(key() for _ in range(rng.randint(2, 12))))
            items = [{"key": k, "text": text(), **claim()} for k in keys]
            return {"kind": "write_many", "tenant": tenant, "items": items}
        if roll < 0.7:
            return {"kind": "retain", "tenant": tenant, "key": key(), **claim()}
        if roll < 0.92:
            selector = {}
            while not selector:
                if rng.random() < 0.5:
                    selector["subject"] = rng.choice(SUBJECTS)
                if rng.random() < 0.4:
                    selector["purpose"] = rng.choice(PURPOSES)
                if rng.random() < 0.4:
                    selector["prefix"] = rng.choice(GROUPS)
                if rng.random() < 0.3:
                    selector["key"] = key()
            return {"kind": "forget", "tenant": tenant, "selector": selector}
        return {"kind": "compact"}

    i = 0
    while True:
        op = next_op(i)
        emit({"ev": "begin", "i": i, "op": op})
        kind, res = op["kind"], {}
        if kind == "write":
            try:
                res["epoch"] = store.write(
                    op["key"],
                    op["text"],
                    tenant=op["tenant"],
                    subject=op["subject"],
                    purpose=op["purpose"],
                    basis=op["basis"],
                )
            except efface.KeyInUse:  # another subject's record: refused, nothing written
                res["key_in_use"] = True
        elif kind == "write_many":
            items = generated_items(op["gen"]) if "gen" in op else op["items"]
            try:
                res["epoch"] = store.write_many(items, tenant=op["tenant"])
            except efface.KeyInUse:
                res["key_in_use"] = True
        elif kind == "retain":
            try:
                res["epoch"] = store.retain(
                    op["key"], tenant=op["tenant"], subject=op["subject"], purpose=op["purpose"], basis=op["basis"]
                )
            except efface.NotFound:
                res["not_found"] = True
        elif kind == "forget":
            try:
                receipt = store.forget(tenant=op["tenant"], **op["selector"])
            except efface.UnknownPurpose:
                res["unknown_purpose"] = True
            else:
                res.update(
                    handle=receipt.handle,
                    epoch=receipt.epoch,
                    erased=list(receipt.erased),
                    released=len(receipt.released),
                    pending=store.status(receipt.handle).pending_deletions,
                )
        elif kind == "compact":
            res["epoch"] = store.compact()
        emit({"ev": "ack", "i": i, "res": res})
        i += 1


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], *([tuple(sys.argv[4].split(","))] if len(sys.argv) > 4 else []))

#!/usr/bin/env python
"""Benchmark cross-subject derivations (issue 4): what the mention index costs on writes, and
how long a forget takes when the subject is named in 1,000 other records.

    python bench/bench_derivations.py > bench/results/results-derivations.json
    python bench/bench_derivations.py --quick          # smoke run, a few seconds

Prints ONE JSON document on stdout; progress goes to stderr.

1. **Write throughput, 0 vs 10,000 registered identifiers.** Two fresh stores get the same
   records, the same batches and the same precomputed embeddings (efface's HashingEmbedder,
   passed as ``write_many(embeddings=...)``, so embedding is excluded). One store has no
   registered subject; the other has 3,000 subjects with 10,000 identifiers (a name, an
   e-mail and a phone each, and a handle for 1,000 of them), and about half of the texts
   name one of them (by name, e-mail, phone in various formats, or handle). The batches are
   written alternately to the two stores (which one goes first alternates too), so both see
   the same machine load: the figures are side by side. Target: with identifiers within 20%
   of without (ratio >= 0.8).
2. **Forget latency for a subject named in 1,000 other records**, p50 over several fresh
   subjects, with policy ``quarantine`` and ``redact``, in a store that also holds 10,000
   unrelated records. Each receipt is checked to name all 1,000 records. Latency is the
   ``forget`` call alone (the vector index absorbs afterwards, off the clock, as the
   compactor would).

Reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from typing import Any

import numpy as np

import efface
from efface.derivations.mentions import MentionIndex
from efface.embed.hashing import HashingEmbedder

TENANT = "acme"
PURPOSE = "support"

FIRST = """Alice Bruno Carla Dmitri Elena Farid Grace Hiroshi Ines Jamal Katya Liam Mei Nadia Oscar
Priya Quentin Rosa Sanjay Tamsin Umar Valeria Wen Xavier Yara Zoltan Amara Bastian Chiara Diego
Esther Felix Gita Hugo Ingrid Jonas Keiko Lars Marisol Nikolai Olga Pablo Rania Stefan Teodora
Ulla Viktor Wanjiru Yusuf Zofia Aiko Camille Dario Emeka Freya Goran Hana Ivo Jasmin Kwame Leila
Matteo Noor Orla Pedro Renata Sven Tariq Ugo Vera Willem Ximena Yosef Zainab Anouk Cyrus""".split()
LAST = """Moreno Okafor Lindqvist Tanaka Haddad Novak Fischer Kowalski Oliveira Nguyen Petrov
Schmidt Rossi Dubois Jensen Mendes Kaur Yilmaz Costa Murphy Ivanova Sato Bianchi Larsen Gupta
Herrera Walsh Abbasi Castillo Eriksen Farouk Gallagher Horvat Iyer Jovanovic Kim Lopez Mahlaba
Nakamura Osei Park Quispe Reyes Suzuki Thorsen Usman Varga Weber Xu Yamamoto Zhang Achebe""".split()
AREAS = [
    212,
    213,
    305,
    312,
    415,
    503,
    617,
    646,
    702,
    718,
    202,
    206,
    303,
    404,
    512,
    602,
    615,
    713,
    801,
    808,
    907,
    971,
    978,
    919,
    858,
    818,
    773,
    714,
    701,
    651,
]
TEMPLATES = [
    "{who} prefers oolong tea in the morning and dislikes espresso.",
    "Met with {who} on Tuesday to discuss the Q3 roadmap; follow up by Friday.",
    "{who} reported a double charge on invoice {order} and was frustrated about the wait.",
    "Support ticket {order}: {who} could not reset the password and escalated by phone.",
    "{who} moved to Lisbon in March and now works remotely for the Atlas team.",
    "Weekly digest: {who} asked twice about the refund and the delivery status.",
    "{who} is allergic to peanuts; avoid ordering pad thai for team lunches.",
    "Reminder: {who} wants the contract renewal draft before the end of the month.",
    "Call summary: {who} liked the new dashboard but wants CSV exports back.",
    "{who} books an aisle seat when travelling to Osaka and a hotel near the station.",
]


def log(msg: str) -> None:
    print(f"[bench-deriv {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pct(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=float)
    return {
        "p50": round(float(np.percentile(a, 50)), 2),
        "p90": round(float(np.percentile(a, 90)), 2),
        "min": round(float(a.min()), 2),
        "max": round(float(a.max()), 2),
        "mean": round(float(a.mean()), 2),
        "n": len(values),
    }


# -- synthetic subjects and texts ---------------------------------------------------------------------
class People:
    """``n`` subjects with unique names, e-mails and phones; handles for the first ``handles``."""

    def __init__(self, n: int, handles: int, seed: int, prefix: str = "p"):
        rng = random.Random(seed)
        pairs = [(first, last) for first in FIRST for last in LAST]
        rng.shuffle(pairs)
        if n > len(pairs):
            raise SystemExit(f"at most {len(pairs)} distinct names")
        self.subjects = []
        for i in range(n):
            first, last = pairs[i]
            area, line = AREAS[i // 100 % len(AREAS)], 100 + i % 100
            self.subjects.append(
                {
                    "id": f"{prefix}{i}",
                    "name": f"{first} {last}",
                    "email": f"{first}.{last}{i}@example.org".lower(),
                    "phone": (area, line),
                    "handle": f"@{first}_{last}{i}".lower() if i < handles else None,
                }
            )

    def identifiers(self, s: dict) -> list[str]:
        area, line = s["phone"]
        ids = [s["name"], s["email"], f"+1 {area} 555 {line:04d}"]
        return ids + ([s["handle"]] if s["handle"] else [])

    @staticmethod
    def mention(s: dict, rng: random.Random) -> str:
        """One way a text may name ``s``."""
        area, line = s["phone"]
        kind = rng.random()
        if kind < 0.55:
            return rng.choice([s["name"], s["name"].upper(), s["name"].replace(" ", "  ")])
        if kind < 0.75:
            return s["email"]
        if kind < 0.95:
            return rng.choice([f"({area}) 555-{line:04d}", f"{area}.555.{line:04d}", f"+1{area}555{line:04d}"])
        return s["handle"] or s["name"]


def texts_for(n: int, people: People, mention_share: float, seed: int) -> list[str]:
    """``n`` texts; ``mention_share`` of them name a registered subject, the rest name someone
    who is not registered (a first name only) — both cost the same to write without identifiers."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        if rng.random() < mention_share:
            who = People.mention(rng.choice(people.subjects), rng)
        else:
            who = rng.choice(FIRST)
        order = f"{rng.randint(10_000, 99_999_999)}"
        out.append(rng.choice(TEMPLATES).format(who=who, order=order))
    return out


# -- 1. write throughput --------------------------------------------------------------------------------
def bench_writes(args, workdir: str) -> dict[str, Any]:
    embedder = HashingEmbedder()
    people = People(args.subjects, args.handles, seed=1)
    n_ids = sum(len(people.identifiers(s)) for s in people.subjects)
    texts = texts_for(args.records, people, args.mention_share, seed=2)
    log(f"embedding {len(texts)} texts up front (excluded from the figures)")
    vectors = embedder.embed(texts)

    stores = {}
    for label in ("without_identifiers", "with_identifiers"):
        stores[label] = efface.open(os.path.join(workdir, "w-" + label), embedder="hashing", background=False)
    log(f"registering {args.subjects} subjects ({n_ids} identifiers)")
    t0 = time.perf_counter()
    for s in people.subjects:
        stores["with_identifiers"].register_subject(s["id"], tenant=TENANT, identifiers=people.identifiers(s))
    register_s = time.perf_counter() - t0

    # Matching cost alone, for the record: the same matcher the store uses.
    index = MentionIndex()
    for s in people.subjects:
        index.set_subject(TENANT, s["id"], people.identifiers(s))
    index.find(TENANT, "warm up the automaton")
    sample = texts[: min(len(texts), 5000)]
    t0 = time.perf_counter()
    found = sum(1 for t in sample if index.find(TENANT, t))
    match_us = (time.perf_counter() - t0) / len(sample) * 1e6

    times: dict[str, list[float]] = {k: [] for k in stores}
    order = list(stores)
    n_batches = (len(texts) + args.batch - 1) // args.batch
    log(f"writing {len(texts)} records in {n_batches} batches of {args.batch}, alternating stores")
    for b in range(n_batches):
        lo, hi = b * args.batch, min(len(texts), (b + 1) * args.batch)
        items = [{"key": f"r:{i}", "text": texts[i], "subject": f"owner{i % 997}"} for i in range(lo, hi)]
        for label in order if b % 2 == 0 else order[::-1]:
            t0 = time.perf_counter()
            stores[label].write_many(items, tenant=TENANT, purpose=PURPOSE, embeddings=vectors[lo:hi])
            times[label].append(time.perf_counter() - t0)

    mentions = (
        stores["with_identifiers"]
        ._origin.connection.execute("SELECT count(DISTINCT record_id) FROM mentions")
        .fetchone()[0]
    )
    for s in stores.values():
        s.close()
    out: dict[str, Any] = {}
    for label, ts in times.items():
        out[label] = {
            "records_per_s": round(len(texts) / sum(ts)),
            "batch_ms": pct([t * 1000 for t in ts]),
        }
    ratio = out["with_identifiers"]["records_per_s"] / out["without_identifiers"]["records_per_s"]
    out.update(
        {
            "records": len(texts),
            "batch": args.batch,
            "subjects_registered": args.subjects,
            "identifiers_registered": n_ids,
            "texts_naming_a_registered_subject": mentions,
            "registration_s": round(register_s, 2),
            "mention_match_us_per_record": round(match_us, 1),
            "mention_match_sample_hits": found,
            "ratio_with_over_without": round(ratio, 3),
            "target": "with identifiers >= 0.8 x without (within 20%)",
            "target_met": ratio >= 0.8,
        }
    )
    return out


# -- 2. forget latency ------------------------------------------------------------------------------------
def bench_forget(args, workdir: str, policy: str) -> dict[str, Any]:
    embedder = HashingEmbedder()
    path = os.path.join(workdir, "f-" + policy)
    store = efface.open(path, embedder="hashing", background=False)
    store.set_policy(TENANT, policy)
    rng = random.Random(3)
    background = People(args.subjects, 0, seed=4, prefix="bg")  # registered, never forgotten
    for s in background.subjects[: args.subjects]:
        store.register_subject(s["id"], tenant=TENANT, identifiers=background.identifiers(s))
    bg_texts = texts_for(args.forget_background, background, 0.2, seed=5)
    for lo in range(0, len(bg_texts), 2000):
        chunk = bg_texts[lo : lo + 2000]
        store.write_many(
            [{"key": f"bg:{lo + j}", "text": t, "subject": f"owner{(lo + j) % 997}"} for j, t in enumerate(chunk)],
            tenant=TENANT,
            purpose=PURPOSE,
            embeddings=embedder.embed(chunk),
        )
    # Fresh subjects, each named in ``mentioned_in`` records of others (the service account).
    victims = People(args.reps, args.reps, seed=6, prefix="v").subjects
    for v in victims:
        # Names must not collide with the background subjects' names (they would be found too).
        v["name"] = f"Vexa{v['id']} Quillon"
        v["email"] = f"vexa.{v['id']}@quillon.example"
        v["handle"] = f"@vexa_{v['id']}"
        v["phone"] = (207, 1000 + int(v["id"][1:]))  # (207) 555-1xxx: no background phone is like it
        ids = [v["name"], v["email"], f"+1 207 555 {v['phone'][1]:04d}", v["handle"]]
        store.register_subject(v["id"], tenant=TENANT, identifiers=ids)
        own = [f"{v['name']} said the order arrived late ({i})" for i in range(args.own)]
        store.write_many(
            [{"key": f"{v['id']}:own:{i}", "text": t} for i, t in enumerate(own)],
            tenant=TENANT,
            subject=v["id"],
            purpose=PURPOSE,
            embeddings=embedder.embed(own),
        )
        texts = []
        for i in range(args.mentioned_in):
            kind = i % 4
            who = (v["name"], v["email"], f"(207) 555-{v['phone'][1]:04d}", v["handle"])[kind]
            texts.append(rng.choice(TEMPLATES).format(who=who, order=rng.randint(10_000, 99_999)))
        store.write_many(
            [{"key": f"{v['id']}:m:{i}", "text": t} for i, t in enumerate(texts)],
            tenant=TENANT,
            subject="svc",
            purpose="analytics",
            embeddings=embedder.embed(texts),
        )
    store.compact()
    records = store.stats()["records"]
    log(f"policy {policy}: {records} records, forgetting {len(victims)} subjects")

    latencies, counts = [], []
    expected_action = {"quarantine": "quarantined", "redact": "redacted"}[policy]
    for v in victims:
        t0 = time.perf_counter()
        receipt = store.forget(tenant=TENANT, subject=v["id"])
        latencies.append((time.perf_counter() - t0) * 1000)
        actions = [d.action for d in receipt.derivations]
        if len(receipt.erased) != args.own or len(actions) != args.mentioned_in or set(actions) != {expected_action}:
            raise SystemExit(
                f"policy {policy}: receipt named {len(actions)} derivations "
                f"({sorted(set(actions))}), erased {len(receipt.erased)}: expected "
                f"{args.mentioned_in} {expected_action} and {args.own} erased"
            )
        counts.append(len(actions))
        store.compact()  # the compactor's work, off the clock
    store.close()
    return {
        "policy": policy,
        "store_records": records,
        "mentioned_in": args.mentioned_in,
        "own_records": args.own,
        "repetitions": len(victims),
        "forget_ms": pct(latencies),
        "all_ms": [round(x, 1) for x in latencies],
        "derivations_per_receipt": sorted(set(counts)),
    }


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "efface": efface.__version__,
    }
    try:
        info["loadavg_start"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    try:
        import apsw

        info["sqlite"] = apsw.sqlite_lib_version()
    except Exception:
        pass
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=30_000, help="records written to each store in part 1")
    ap.add_argument("--batch", type=int, default=1_000, help="write_many batch size")
    ap.add_argument("--subjects", type=int, default=3_000, help="registered subjects (3 identifiers each)")
    ap.add_argument("--handles", type=int, default=1_000, help="how many of them also have a handle")
    ap.add_argument("--mention-share", type=float, default=0.5, help="share of texts naming a registered subject")
    ap.add_argument("--mentioned-in", type=int, default=1_000, help="records naming each forgotten subject")
    ap.add_argument("--own", type=int, default=5, help="records each forgotten subject owns")
    ap.add_argument("--reps", type=int, default=7, help="fresh subjects forgotten per policy")
    ap.add_argument("--forget-background", type=int, default=10_000, help="unrelated records in the forget store")
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--keep", action="store_true", help="keep the store directories")
    args = ap.parse_args()
    if args.quick:
        args.records, args.subjects, args.handles, args.mentioned_in = 4_000, 600, 200, 200
        args.reps, args.forget_background = 3, 2_000

    info = machine()
    workdir = tempfile.mkdtemp(prefix="efface-bench-deriv-")
    started = time.time()
    try:
        writes = bench_writes(args, workdir)
        log(
            f"writes: {writes['without_identifiers']['records_per_s']} rec/s without, "
            f"{writes['with_identifiers']['records_per_s']} rec/s with {writes['identifiers_registered']} "
            f"identifiers (ratio {writes['ratio_with_over_without']})"
        )
        forgets = {}
        for policy in ("quarantine", "redact"):
            forgets[policy] = bench_forget(args, workdir, policy)
            log(f"forget ({policy}): p50 {forgets[policy]['forget_ms']['p50']} ms")
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    try:
        info["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    doc = {
        "benchmark": "cross-subject derivations (issue 4)",
        "quick": args.quick,
        "machine": info,
        "embedder": "hashing-384 (precomputed; embedding excluded from write figures)",
        "write_throughput": writes,
        "forget_latency": forgets,
        "wall_s": round(time.time() - started, 1),
    }
    json.dump(doc, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()

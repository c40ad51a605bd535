"""Recall latency side by side: efface, Chroma and LanceDB on the same MiniLM vectors.

Run through ``bench_peers.py --recall-latency`` (one JSON document on stdout)::

    PYTHONPATH=src python bench/bench_peers.py --recall-latency --n 100000 --queries 500

Every store gets the same record vectors and the same query vectors. Each query is asked of
every system in turn (the order rotates per query), so a burst of load on this shared
machine falls on all of them alike instead of on whichever ran during it.

Two figures per system:
  * ``search``: the query vector handed in (encoding excluded). For efface that is
    ``Store.recall`` with an embedder that looks the query's precomputed vector up, so
    everything else recall does (validation, the FTS leg, the ANN leg, the origin's live
    check, hydration, the gate) is in.
  * ``end_to_end``: the query text encoded with all-MiniLM-L6-v2 first and then searched:
    with the encoder ``Store.recall`` uses by default (onnxruntime's int8 query model, see
    ``efface.embed.minilm_onnx``), for the peers too; for efface also with the same export
    at full precision and with torch (the fallback).

Record vectors: the bench's agent-memory corpus (bench_store.Corpus) encoded with MiniLM.
Encoding 100k texts takes long on two shared cores, so ``--encode`` texts are encoded (all
of them by default) and, if fewer than ``n``, the rest are mixtures of two encoded vectors
plus noise, renormalised; the JSON says how many of each. Vectors are cached under
``~/.cache/efface-bench/latency``. Nothing here asserts a time.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_store import Corpus, background_loaded  # noqa: E402

TENANT, PURPOSE = "acme", "assistant"
CACHE = Path(os.environ.get("EFFACE_BENCH_CACHE", Path.home() / ".cache" / "efface-bench")) / "latency"


class _NotAsked(Exception):
    """A peer left out of the run (``--kinds``)."""


def log(msg: str) -> None:
    print(f"[latency {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pct(values: list[float]) -> dict[str, float]:
    a = np.asarray(values)
    return {f"p{p}": round(float(np.percentile(a, p)), 2) for p in (50, 90, 99)} | {
        "mean": round(float(a.mean()), 2),
        "max": round(float(a.max()), 2),
    }


def encoder():
    """The default MiniLM runtime (onnxruntime when usable, else torch)."""
    from efface.embed import resolve

    return resolve("minilm")


def record_vectors(corpus: Corpus, encode: int, seed: int) -> tuple[np.ndarray, dict]:
    CACHE.mkdir(parents=True, exist_ok=True)
    m = min(encode, corpus.n)
    path = CACHE / f"corpus-{corpus.n}-{m}-{seed}.npy"
    if path.exists():
        vecs = np.load(path)
    else:
        base_path = CACHE / f"encoded-{corpus.n}-{m}-{seed}.npy"  # texts depend on n too
        if base_path.exists():
            base = np.load(base_path)
        else:
            emb = encoder()
            log(f"encoding {m} record texts with MiniLM ({type(emb).__name__})")
            t0, parts = time.perf_counter(), []
            for s in range(0, m, 2048):
                parts.append(emb.embed(corpus.texts[s : min(s + 2048, m)]))
                log(f"  {s + len(parts[-1])}/{m} in {time.perf_counter() - t0:.0f}s")
            base = np.concatenate(parts)
            np.save(base_path, base)
        rng = np.random.default_rng(seed)
        rest = corpus.n - m
        if rest:
            a, b = rng.integers(0, m, rest), rng.integers(0, m, rest)
            w = rng.uniform(0.3, 0.7, (rest, 1)).astype(np.float32)
            mixed = w * base[a] + (1 - w) * base[b] + rng.normal(0, 0.02, (rest, base.shape[1])).astype(np.float32)
            mixed /= np.linalg.norm(mixed, axis=1, keepdims=True)
            vecs = np.concatenate([base, mixed]).astype(np.float32)
        else:
            vecs = base.astype(np.float32)
        np.save(path, vecs)
    return vecs, {"minilm_encoded": m, "mixtures_of_two_encoded": corpus.n - m}


class BenchEmbedder:
    """Named ``minilm`` like the real one. In ``lookup`` mode it hands back the query's
    precomputed vector (encoding excluded); otherwise it encodes with ``self.live``."""

    name, dim = "minilm", 384

    def __init__(self, table: dict[str, np.ndarray]):
        self.table, self.live, self.mode = table, None, "lookup"

    def embed(self, texts):
        if self.mode == "lookup":
            return np.stack([self.table[t] for t in texts])
        return self.live.embed(texts)

    def embed_query(self, text):
        """What Store.recall asks: the live embedder's query model (the ONNX one: int8)."""
        if self.mode == "lookup":
            return self.table[text]
        one = getattr(self.live, "embed_query", None)
        return one(text) if one is not None else self.live.embed([text])[0]


def build_efface(path: Path, corpus: Corpus, vecs: np.ndarray, table: dict) -> tuple[object, BenchEmbedder, dict]:
    import efface

    emb = BenchEmbedder(table)
    store = efface.open(path, embedder=emb)
    t0 = time.perf_counter()
    for s in range(0, corpus.n, 2000):
        stop = min(s + 2000, corpus.n)
        store.write_many(
            [corpus.item(i) for i in range(s, stop)], tenant=TENANT, purpose=PURPOSE, embeddings=vecs[s:stop]
        )
    written = time.perf_counter() - t0
    t1 = time.perf_counter()
    store.compact()  # the ANN index absorbs the import and is saved: recall then measures search alone
    return store, emb, {"write_s": round(written, 2), "absorb_and_compact_s": round(time.perf_counter() - t1, 2)}


def build_chroma(path: Path, corpus: Corpus, vecs: np.ndarray):
    import chromadb
    from chromadb.config import Settings

    client = chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False))
    col = client.create_collection("memories", embedding_function=None, metadata={"hnsw:space": "cosine"})
    t0 = time.perf_counter()
    for s in range(0, corpus.n, 5000):
        stop = min(s + 5000, corpus.n)
        col.add(
            ids=[corpus.key(i) for i in range(s, stop)],
            documents=corpus.texts[s:stop],
            embeddings=vecs[s:stop],
            metadatas=[{"subject": corpus.subject(i), "kind": "note", "seq": i} for i in range(s, stop)],
        )
    return client, col, {"build_s": round(time.perf_counter() - t0, 2)}


def build_lancedb(path: Path, corpus: Corpus, vecs: np.ndarray):
    os.environ.setdefault("LANCE_LOG", "error")
    import lancedb
    import pyarrow as pa

    t0 = time.perf_counter()
    db = lancedb.connect(str(path))
    table = pa.table(
        {
            "key": pa.array([corpus.key(i) for i in range(corpus.n)]),
            "text": pa.array(corpus.texts),
            "subject": pa.array([corpus.subject(i) for i in range(corpus.n)]),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1), pa.float32()), vecs.shape[1]),
        }
    )
    t = db.create_table("memories", data=table)
    t.create_index("text", config=lancedb.index.FTS())
    return t, {"build_s": round(time.perf_counter() - t0, 2), "vector_index": "none (exact scan, LanceDB's default)"}


def run(
    n: int,
    queries: int,
    encode: int,
    seed: int = 1234,
    workdir: str | None = None,
    profile: bool = False,
    peers: tuple[str, ...] = ("chroma", "lancedb"),
):
    from efface.embed import minilm_runtime
    from efface.embed.minilm import MiniLMEmbedder

    corpus = Corpus(n, seed=seed)
    qs = [q for _, q in corpus.queries(queries + 20, seed=seed + 1)]
    warm, qs = qs[:20], qs[20:]
    vecs, provenance = record_vectors(corpus, encode, seed)
    onnx = encoder()
    from efface.embed.minilm_onnx import OnnxMiniLMEmbedder

    onnx32 = OnnxMiniLMEmbedder(quantized=False)  # the same export, queries at full precision
    torch_emb = MiniLMEmbedder()
    log(f"encoding {len(qs) + len(warm)} queries")
    qvec = onnx.embed(warm + qs)
    table = dict(zip(warm + qs, qvec, strict=True))

    tmp = Path(tempfile.mkdtemp(prefix="efface-latency-", dir=workdir))
    out: dict = {
        "n": n,
        "queries": len(qs),
        "k": 10,
        "record_vectors": provenance,
        "encoder_default_runtime": minilm_runtime(),
        "builds": {},
    }
    try:
        log(f"building efface ({n})")
        store, emb, out["builds"]["efface"] = build_efface(tmp / "efface", corpus, vecs, table)
        systems: dict = {}

        def efface_search(i: int):
            emb.mode = "lookup"
            return store.recall(qs[i], tenant=TENANT, purpose=PURPOSE, k=10)

        def efface_e2e(live):
            def go(i: int):
                emb.mode, emb.live = "live", live
                return store.recall(qs[i], tenant=TENANT, purpose=PURPOSE, k=10)

            return go

        systems["efface"] = {"search": efface_search, "end_to_end": efface_e2e(onnx)}
        systems["efface (float32 query encoder)"] = {"end_to_end": efface_e2e(onnx32)}
        systems["efface (torch encoder)"] = {"end_to_end": efface_e2e(torch_emb)}
        # The peers' end to end encodes with efface's own query model (int8 when the ONNX
        # runtime is the default): the same encode for every system.
        query_vector = getattr(onnx, "embed_query", lambda text: onnx.embed([text])[0])
        try:
            if "chroma" not in peers:
                raise _NotAsked("chroma")
            log("building chroma")
            _client, col, out["builds"]["chroma"] = build_chroma(tmp / "chroma", corpus, vecs)
            systems["chroma"] = {
                "search": lambda i: col.query(query_embeddings=[qvec[20 + i]], n_results=10),
                "end_to_end": lambda i: col.query(query_embeddings=[query_vector(qs[i])], n_results=10),
            }
        except ImportError as exc:
            out["builds"]["chroma"] = {"skipped": f"not importable: {exc.name}"}
        except _NotAsked:
            out["builds"]["chroma"] = {"skipped": "not in --kinds"}
        try:
            if "lancedb" not in peers:
                raise _NotAsked("lancedb")
            log("building lancedb")
            lt, out["builds"]["lancedb"] = build_lancedb(tmp / "lancedb", corpus, vecs)
            systems["lancedb vector"] = {
                "search": lambda i: lt.search(qvec[20 + i]).limit(10).to_list(),
                "end_to_end": lambda i: lt.search(query_vector(qs[i])).limit(10).to_list(),
            }
            systems["lancedb hybrid"] = {
                "search": lambda i: lt.search(query_type="hybrid").vector(qvec[20 + i]).text(qs[i]).limit(10).to_list(),
                "end_to_end": lambda i: (
                    lt.search(query_type="hybrid").vector(query_vector(qs[i])).text(qs[i]).limit(10).to_list()
                ),
            }
        except ImportError as exc:
            out["builds"]["lancedb"] = {"skipped": f"not importable: {exc.name}"}
        except _NotAsked:
            out["builds"]["lancedb"] = {"skipped": "not in --kinds (an exact scan: seconds a query at 1M)"}

        encoders = {
            "onnx": lambda i: query_vector(qs[i]),
            "onnx float32": lambda i: onnx32.embed([qs[i]]),
            "torch": lambda i: torch_emb.embed([qs[i]]),
        }
        calls = [(f"{name}|{mode}", fn) for name, modes in systems.items() for mode, fn in modes.items()]
        calls += [(f"encode only|{name}", fn) for name, fn in encoders.items()]
        for _label, fn in calls:  # warm every path and lazy load
            for i in range(5):
                fn(i)
        # a large store loads its postings and its copy of liveness from its first recall
        out["builds"]["efface"]["background_loads_waited_s"] = background_loaded(store)
        log(f"measuring {len(calls)} calls x {len(qs)} queries, interleaved")
        load_before = os.getloadavg()
        lat: dict[str, list[float]] = {label: [] for label, _ in calls}
        rot = random.Random(seed)
        for i in range(len(qs)):
            order = calls[:]
            rot.shuffle(order)
            for label, fn in order:
                t = time.perf_counter()
                fn(i)
                lat[label].append((time.perf_counter() - t) * 1000)
            if i % 100 == 99:
                log(f"  {i + 1}/{len(qs)}")
        out["load_average_before_after"] = [round(x, 2) for x in load_before + os.getloadavg()]
        res: dict = {}
        for label, values in lat.items():
            name, mode = label.split("|")
            res.setdefault(name, {})[mode] = pct(values)
        out["latency_ms"] = res
        s = res["efface"]["search"]
        out["targets"] = {
            "efface search p50 <= chroma search p50": (
                None if "chroma" not in res else s["p50"] <= res["chroma"]["search"]["p50"]
            ),
            "efface search p99 <= 3x its p50": s["p99"] <= 3 * s["p50"],
            "efface end-to-end p50 <= 10 ms": res["efface"]["end_to_end"]["p50"] <= 10,
            "efface end-to-end p99 <= 30 ms": res["efface"]["end_to_end"]["p99"] <= 30,
        }
        if profile:
            out["efface_search_profile"] = profile_search(efface_search, len(qs))
        store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["commit"] = subprocess.run(
        ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    out["uptime"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return out


def profile_search(fn, count: int) -> list[str]:
    """cProfile of efface's search (encode excluded): the top functions by own time."""
    prof = cProfile.Profile()
    prof.enable()
    for i in range(count):
        fn(i)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
    return [line for line in buf.getvalue().splitlines() if line.strip()][:40]

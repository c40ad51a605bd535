"""Real third-party stores built for the adapter and audit tests: two subjects, 50 records
each, texts made of distinctive sentences, vectors from efface's hashing embedder (no
store ever loads or downloads a model).

``require(module)`` skips a test with a visible reason when a store's library is missing,
except under ``CI=true``, where the libraries are installed (extra ``peers``) and a missing
one is a failure.
"""

from __future__ import annotations

import importlib
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from efface.embed import resolve

N = 50
SUBJECT = "subj-7f3a91"
"""The subject the tests forget (a value that no text contains, so reports can be checked)."""
OTHER = "subj-c2e810"

_WORDS = [
    "amber",
    "basil",
    "cobalt",
    "dune",
    "ember",
    "fjord",
    "garnet",
    "harbor",
    "indigo",
    "juniper",
    "kelp",
    "lantern",
    "meadow",
    "nectar",
    "onyx",
    "pepper",
    "quartz",
    "raven",
    "saffron",
    "thistle",
    "umber",
    "violet",
    "willow",
    "xenon",
    "yarrow",
    "zephyr",
]


def require(module: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{module} is not installed, but CI must run the peer tests: install efface[peers]")
        pytest.skip(f"{module} not installed (pip install 'efface[peers]')")


FRAMEWORK_VENV_ENV = "EFFACE_FRAMEWORK_VENV"
"""Set by ``scripts/check frameworks`` to a framework's name while it runs that framework's tests in its own
virtual environment (docs/dependencies.md says why some frameworks have one)."""


def require_framework(module: str, extra: str, *, venv: str | None = None) -> Any:
    """Import an agent framework's module for a compat test module (at module level), or
    skip the module saying how to install it. Under ``CI=true`` a missing framework fails,
    except one that CI installs in its own virtual environment (``venv``: that framework's
    name) while the main suite runs: ``scripts/check frameworks`` runs its tests there, with
    ``EFFACE_FRAMEWORK_VENV`` naming it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        in_ci = os.environ.get("CI") == "true"
        if in_ci and (venv is None or os.environ.get(FRAMEWORK_VENV_ENV) == venv):
            pytest.fail(f"{module} is not installed, but CI must run these tests: pip install 'efface[{extra}]'")
        where = (
            "; scripts/check runs these tests in a venv of their own (its frameworks step)" if venv is not None else ""
        )
        pytest.skip(f"{module} not installed (pip install 'efface[{extra}]'){where}", allow_module_level=True)


def dataset(n: int = N, seed: int = 11):
    """ids, texts, subjects, vectors for ``2 * n`` records (the first ``n`` are SUBJECT's)."""
    rng = random.Random(seed)
    texts = [
        f"Record {i} of the ledger: "
        + " ".join(rng.choice(_WORDS) for _ in range(12))
        + f" under seal {rng.randrange(10**9):09d}."
        for i in range(2 * n)
    ]
    ids = [f"m{i:04d}" for i in range(2 * n)]
    subjects = [SUBJECT] * n + [OTHER] * n
    vectors = resolve("hashing", None).embed(texts)
    return ids, texts, subjects, vectors


def build_chroma(path: Path, sync_threshold: int = 20):
    """A Chroma store whose HNSW index is flushed to its files every ``sync_threshold`` adds."""
    require("chromadb")
    import chromadb
    from chromadb.config import Settings

    ids, texts, subjects, vectors = dataset()
    client = chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False))
    col = client.create_collection(
        "memories",
        embedding_function=None,
        configuration={"hnsw": {"space": "cosine", "sync_threshold": sync_threshold, "batch_size": sync_threshold}},
    )
    col.add(ids=ids, documents=texts, embeddings=vectors, metadatas=[{"subject": s} for s in subjects])
    client.close()
    client.clear_system_cache()


def build_lancedb(path: Path):
    require("lancedb")
    import lancedb
    from lancedb.index import FTS

    ids, texts, subjects, vectors = dataset()
    db = lancedb.connect(str(path))
    t = db.create_table(
        "memories",
        data=[{"id": ids[i], "text": texts[i], "subject": subjects[i], "vector": vectors[i]} for i in range(len(ids))],
    )
    t.create_index("text", config=FTS())


def build_qdrant(path: Path):
    require("qdrant_client")
    from qdrant_client import QdrantClient, models

    ids, texts, subjects, vectors = dataset()
    c = QdrantClient(path=str(path))
    c.create_collection(
        "memories", vectors_config=models.VectorParams(size=vectors.shape[1], distance=models.Distance.COSINE)
    )
    c.upsert(
        "memories",
        points=[
            models.PointStruct(
                id=i, vector=vectors[i].tolist(), payload={"key": ids[i], "text": texts[i], "subject": subjects[i]}
            )
            for i in range(len(ids))
        ],
    )
    c.close()


def build_efface(path: Path):
    import efface

    ids, texts, subjects, _ = dataset()
    with efface.open(path, embedder="hashing", background=False) as s:
        for i in range(len(ids)):
            s.write(ids[i], texts[i], tenant="default", subject=subjects[i], purpose="support")


def targets():
    """(texts, vectors) of the records the tests forget."""
    _ids, texts, _subjects, vectors = dataset()
    return texts[:N], vectors[:N]


def files(root: Path):
    return sorted(p for p in Path(root).rglob("*") if p.is_file())


def texts_in(path: Path, texts) -> int:
    """How many of ``texts`` occur whole in the raw bytes of ``path`` (plain ``in``)."""
    data = Path(path).read_bytes()
    return sum(t.encode() in data for t in texts)


def vectors_in_float32(path: Path, vectors, rtol: float = 1e-5) -> int:
    """How many whole vectors occur in ``path`` as float32 runs, within float32 rounding
    (an independent check: whole vectors at any byte alignment, not the audit's windows)."""
    return _vectors_in(path, vectors, "<f4", rtol)


def vectors_in_float16(path: Path, vectors, rtol: float = 1e-3) -> int:
    """:func:`vectors_in_float32` for half-precision runs (efface's stored form), within
    half precision's rounding."""
    return _vectors_in(path, vectors, "<f2", rtol)


def _vectors_in(path: Path, vectors, dtype: str, rtol: float) -> int:
    data = Path(path).read_bytes()
    dim = vectors.shape[1]
    size = np.dtype(dtype).itemsize
    views = [
        np.frombuffer(data[a : a + (len(data) - a) // size * size], dtype=dtype).astype(np.float32) for a in range(size)
    ]
    found = 0
    for v in vectors:
        j = int(np.argmax(np.abs(v)))
        hit = False
        for arr in views:
            with np.errstate(all="ignore"):
                pos = np.nonzero(np.isclose(arr, v[j], rtol=rtol, atol=0))[0] - j
            if any(
                p >= 0 and p + dim <= len(arr) and np.allclose(arr[p : p + dim], v, rtol=rtol, atol=rtol * 1e-2)
                for p in pos
            ):
                hit = True
                break
        found += hit
    return found

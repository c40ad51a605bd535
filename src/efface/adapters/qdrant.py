"""Qdrant (local mode, or any ``QdrantClient``) through the gate's ``MemoryTool`` protocol.

Scope -> one collection (cosine, the embedder's size); key -> point id ``uuid5(key)`` with
the key kept in the payload; subject -> payload ``subject``. ``forget`` acknowledges with
exactly what ``client.delete`` returned (``UpdateResult(operation_id, status)``); the
``operation_id`` is a per-collection sequence, not a verifiable erasure epoch, so ``epoch``
stays None.
"""

from __future__ import annotations

import os
import uuid
from typing import Any, Mapping, Sequence

from ..gate.protocol import ForgetAck, ToolHit
from ._common import check_selector, embedder, need, now


def point_id(key: str) -> str:
    """The point id a key is stored under."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "efface:" + key))


class QdrantTool:
    """A Qdrant local-mode directory (``path``) or a given client, as a MemoryTool."""

    name = "qdrant"

    def __init__(self, path: "str | os.PathLike | None" = None, *, client: Any = None, embedder_spec: Any = None):
        need("qdrant_client", "qdrant")
        from qdrant_client import QdrantClient

        self.client = client if client is not None else QdrantClient(path=os.fspath(path))
        self.embedder = embedder(embedder_spec)

    def close(self) -> None:
        self.client.close()

    def _ensure(self, scope: str) -> None:
        from qdrant_client import models

        if not self.client.collection_exists(scope):
            self.client.create_collection(scope, vectors_config=models.VectorParams(
                size=self.embedder.dim, distance=models.Distance.COSINE))

    def write(self, key: str, text: str, *, scope: str, subject: str | None = None,
              metadata: Mapping[str, Any] | None = None) -> None:
        from qdrant_client import models

        self._ensure(scope)
        payload = {"key": key, "text": text, "metadata": dict(metadata or {})}
        if subject is not None:
            payload["subject"] = subject
        self.client.upsert(scope, points=[models.PointStruct(id=point_id(key), vector=self.embedder.embed([text])[0].tolist(),
                                                             payload=payload)])

    def recall(self, query: str, *, scope: str, k: int = 10) -> Sequence[ToolHit]:
        if not self.client.collection_exists(scope):
            return []
        res = self.client.query_points(scope, query=self.embedder.embed([query])[0].tolist(), limit=k,
                                       with_payload=True).points
        return [ToolHit(p.payload["key"], p.payload.get("text", ""), p.score, p.payload.get("metadata") or {})
                for p in res]

    def forget(self, *, scope: str, subject: str | None = None, keys: Sequence[str] | None = None) -> ForgetAck:
        from qdrant_client import models

        check_selector(subject, keys)
        if not self.client.collection_exists(scope):
            return ForgetAck(raw=None, scope=scope, keys=tuple(keys or ()), acknowledged_at=now())
        must = []
        if keys:
            must.append(models.HasIdCondition(has_id=[point_id(k) for k in keys]))
        if subject is not None:
            must.append(models.FieldCondition(key="subject", match=models.MatchValue(value=subject)))
        raw = self.client.delete(scope, points_selector=models.FilterSelector(filter=models.Filter(must=must)))
        return ForgetAck(raw=raw, scope=scope, keys=tuple(keys or ()), acknowledged_at=now())

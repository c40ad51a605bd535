"""Qdrant: its gate adapter (:class:`QdrantTool`) and its audit driver (:class:`QdrantLocalDriver`).

Adapter (``efface.adapters.qdrant`` is an alias of this module): Qdrant's local mode, or any
``QdrantClient``. Scope -> one collection (cosine, the embedder's size); key -> point id
``uuid5(key)`` with the key kept in the payload; subject -> payload ``subject``. ``forget``
acknowledges with exactly what ``client.delete`` returned (``UpdateResult(operation_id,
status)``); the ``operation_id`` is a per-collection sequence, not a verifiable erasure
epoch, so ``epoch`` stays None.

Audit driver (``efface audit qdrant``): Qdrant's local mode (``QdrantClient(path=...)``);
scope = one collection. Read paths probed: ``retrieve`` by point id, ``scroll`` with a
payload filter on the subject, ``query_points`` by the deleted vectors, and ``scroll`` with
a full-text match on the text payload field. Qdrant's local mode has no maintenance call of
its own (no optimizer, no snapshot pruning): the maintenance stage is empty and says so.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..audit.driver import BaseDriver, Call, count_returned, no_targets, version
from ..audit.model import ProbeResult, Selection, Targets
from ..errors import InvalidInput
from ..gate.protocol import ForgetAck, ToolHit
from ._common import check_selector, embedder, need, now

if TYPE_CHECKING:
    from qdrant_client import QdrantClient


# == the gate adapter ================================================================================
def point_id(key: str) -> str:
    """The point id a key is stored under."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "efface:" + key))


class QdrantTool:
    """A Qdrant local-mode directory (``path``) or a given client, as a MemoryTool."""

    name = "qdrant"

    def __init__(self, path: str | os.PathLike | None = None, *, client: Any = None, embedder_spec: Any = None):
        need("qdrant_client", "qdrant")
        from qdrant_client import QdrantClient

        if client is None:
            if path is None:
                raise TypeError("QdrantTool needs a path or a client")
            client = QdrantClient(path=os.fspath(path))
        self.client = client
        self.embedder = embedder(embedder_spec)

    def close(self) -> None:
        self.client.close()

    def _ensure(self, scope: str) -> None:
        from qdrant_client import models

        if not self.client.collection_exists(scope):
            self.client.create_collection(
                scope, vectors_config=models.VectorParams(size=self.embedder.dim, distance=models.Distance.COSINE)
            )

    def write(
        self, key: str, text: str, *, scope: str, subject: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> None:
        from qdrant_client import models

        self._ensure(scope)
        payload = {"key": key, "text": text, "metadata": dict(metadata or {})}
        if subject is not None:
            payload["subject"] = subject
        vector = self.embedder.embed([text])[0].tolist()
        self.client.upsert(scope, points=[models.PointStruct(id=point_id(key), vector=vector, payload=payload)])

    def recall(self, query: str, *, scope: str, k: int = 10) -> Sequence[ToolHit]:
        if not self.client.collection_exists(scope):
            return []
        res = self.client.query_points(
            scope, query=self.embedder.embed([query])[0].tolist(), limit=k, with_payload=True
        ).points
        payloads = [(p.payload or {}, p.score) for p in res]  # with_payload=True: every point has one
        return [ToolHit(pl["key"], pl.get("text", ""), score, pl.get("metadata") or {}) for pl, score in payloads]

    def forget(self, *, scope: str, subject: str | None = None, keys: Sequence[str] | None = None) -> ForgetAck:
        from qdrant_client import models

        check_selector(subject, keys)
        if not self.client.collection_exists(scope):
            return ForgetAck(raw=None, scope=scope, keys=tuple(keys or ()), acknowledged_at=now())
        must: list[models.Condition] = []
        if keys:
            must.append(models.HasIdCondition(has_id=[point_id(k) for k in keys]))
        if subject is not None:
            must.append(models.FieldCondition(key="subject", match=models.MatchValue(value=subject)))
        raw = self.client.delete(scope, points_selector=models.FilterSelector(filter=models.Filter(must=must)))
        return ForgetAck(raw=raw, scope=scope, keys=tuple(keys or ()), acknowledged_at=now())


# == the audit driver ================================================================================
_PAGE = 1000
TEXT_PROBES = 25
"""How many deleted texts the full-text probe tries (each query scans every point)."""


def _point_id(x: str):
    return int(x) if str(x).isdigit() else str(x)


class QdrantLocalDriver(BaseDriver):
    kind = "qdrant"

    def __init__(self, collection: str | None = None, text_field: str = "text"):
        self.collection = collection or ""
        self.text_field = text_field
        self._client: QdrantClient | None = None

    def library(self) -> str:
        return version("qdrant-client")

    def open(self, root: Path) -> None:
        need("qdrant_client", "qdrant", for_audit=True)
        from qdrant_client import QdrantClient

        self._client = QdrantClient(path=str(root))
        names = [c.name for c in self._client.get_collections().collections]
        if not self.collection:
            if len(names) != 1:
                raise InvalidInput(f"the store has {len(names)} collections: name one with --collection")
            self.collection = names[0]
        if self.collection not in names:
            raise InvalidInput("no such collection in this Qdrant store: check --collection")

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        self._client = None

    @property
    def _c(self) -> QdrantClient:
        return self._opened(self._client)

    def _filter(self, selection: Selection):
        from qdrant_client import models

        assert selection.subject is not None, "a selection without ids names a subject"
        return models.Filter(
            must=[models.FieldCondition(key=selection.subject_field, match=models.MatchValue(value=selection.subject))]
        )

    def _scroll(self, flt=None, vectors: bool = False) -> list:
        points, offset = [], None
        while True:
            batch, offset = self._c.scroll(
                self.collection, scroll_filter=flt, limit=_PAGE, offset=offset, with_payload=True, with_vectors=vectors
            )
            points += batch
            if offset is None:
                return points

    def _text(self, p) -> str:
        return str((p.payload or {}).get(self.text_field) or "")

    @staticmethod
    def _vector(p):
        v = p.vector
        if isinstance(v, dict):  # named vectors: the first one
            v = next(iter(v.values()), None)
        return v

    def targets(self, selection: Selection) -> Targets:
        if selection.ids is not None:
            pts = self._c.retrieve(
                self.collection, [_point_id(i) for i in selection.ids], with_payload=True, with_vectors=True
            )
        else:
            pts = self._scroll(self._filter(selection), vectors=True)
        if not pts:
            raise no_targets()
        vecs = [self._vector(p) for p in pts]
        vectors = (
            np.asarray(vecs, dtype=np.float32) if all(v is not None for v in vecs) else np.zeros((0, 0), np.float32)
        )
        return Targets(tuple(str(p.id) for p in pts), tuple(self._text(p) for p in pts), vectors)

    def others(self, targets: Targets) -> tuple[list[str], np.ndarray]:
        mine = set(targets.ids)
        pts = [p for p in self._scroll(vectors=True) if str(p.id) not in mine]
        vecs = [self._vector(p) for p in pts]
        ok = [v for v in vecs if v is not None]
        return [self._text(p) for p in pts], np.asarray(ok, dtype=np.float32).reshape(len(ok), -1)

    def delete(self, selection: Selection, targets: Targets) -> Call:
        from qdrant_client import models

        sel: models.PointIdsList | models.FilterSelector
        if selection.ids is not None:
            sel = models.PointIdsList(points=[_point_id(i) for i in selection.ids])
        else:
            sel = models.FilterSelector(filter=self._filter(selection))
        return Call("client.delete(collection, points_selector)", self._c.delete(self.collection, points_selector=sel))

    def probes(self, selection: Selection, targets: Targets) -> list[ProbeResult]:
        from qdrant_client import models

        n = len(targets.ids)
        out = []
        pts = self._c.retrieve(self.collection, [_point_id(i) for i in targets.ids], with_payload=True)
        out.append(
            ProbeResult(
                "retrieve by id",
                n,
                count_returned(targets, [p.id for p in pts], [self._text(p) for p in pts]),
                f"{len(pts)} points returned for {n} ids",
            )
        )
        if selection.subject is not None:
            pts = self._scroll(self._filter(selection))
            out.append(
                ProbeResult(
                    "scroll with payload filter",
                    n,
                    count_returned(targets, [p.id for p in pts], [self._text(p) for p in pts]),
                    f"{len(pts)} points matched",
                )
            )
        pts = self._scroll()
        out.append(
            ProbeResult(
                "full listing (scroll)",
                n,
                count_returned(targets, [p.id for p in pts], [self._text(p) for p in pts]),
                f"{len(pts)} points listed",
            )
        )
        if len(targets.vectors):
            ids, texts = [], []
            for v in targets.vectors:
                res = self._c.query_points(self.collection, query=v.tolist(), limit=10, with_payload=True).points
                ids += [p.id for p in res]
                texts += [self._text(p) for p in res]
            out.append(
                ProbeResult(
                    "nearest neighbours of the deleted vectors",
                    n,
                    count_returned(targets, ids, texts),
                    f"{len(targets.vectors)} queries, k=10",
                )
            )
        # Qdrant's local mode filters every point in Python for each full-text query: probe
        # a sample of the texts so a large store stays auditable, and say so.
        sample = [t for t in targets.texts if t][:TEXT_PROBES]
        found = 0
        for text in sample:
            if text:
                match = models.FieldCondition(key=self.text_field, match=models.MatchText(text=text))
                flt = models.Filter(must=[match])
                pts = self._scroll(flt)
                found += bool(count_returned(targets, [p.id for p in pts], [self._text(p) for p in pts]))
        out.append(
            ProbeResult(
                "full-text match on the text payload",
                len(sample),
                found,
                f"{len(sample)} of {n} deleted texts probed, one query each",
            )
        )
        return out

    def notes(self) -> list[str]:
        return [sqlite_note()]


def sqlite_note() -> str:
    """Qdrant's local mode keeps points in SQLite and never sets ``secure_delete`` itself:
    whether deleted points are zeroed depends on how Python's SQLite was built."""
    import sqlite3

    con = sqlite3.connect(":memory:")
    on = con.execute("PRAGMA secure_delete").fetchone()[0]
    con.close()
    return (
        f"Qdrant's local mode stores points in SQLite via Python's sqlite3 (SQLite {sqlite3.sqlite_version}, "
        f"secure_delete {'on' if on else 'off'} by default in this build) and does not set secure_delete "
        f"itself: with a build where it is off, deleted points stay in free pages until VACUUM"
    )

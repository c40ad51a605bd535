"""mem0, offline (see :mod:`efface.adapters.mem0`). PATH holds ``qdrant/`` (Qdrant local
mode) and ``history.db`` (mem0's history). Scope = the Qdrant collection (default ``mem0``);
the subject is mem0's ``user_id``.

Read paths probed: ``get`` by memory id, ``get_all`` filtered by user, ``search`` with each
deleted text (mem0 embeds it: nearest neighbours), and ``history`` by memory id, which is
where mem0 keeps what it deleted. mem0 has no maintenance call of its own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..model import ProbeResult, Selection, Targets
from .base import Call, count_returned, no_targets, version

_ALL = 1_000_000


class Mem0Driver:
    kind = "mem0"

    def __init__(self, collection: str | None = None):
        self.collection = collection or "mem0"
        self._m = None

    def library(self) -> str:
        return f"{version('mem0ai')} (vector store: {version('qdrant-client')})"

    def open(self, root: Path) -> None:
        from ...adapters.mem0 import open_offline

        self._m = open_offline(root, self.collection)

    def close(self) -> None:
        if self._m is not None:
            from ...adapters.mem0 import close

            close(self._m)
        self._m = None

    def _client(self):
        return self._m.vector_store.client

    def _vectors(self, ids) -> np.ndarray:
        pts = self._client().retrieve(self.collection, list(ids), with_vectors=True)
        by_id = {str(p.id): p.vector for p in pts}
        return np.asarray([by_id[str(i)] for i in ids], dtype=np.float32)

    def targets(self, selection: Selection) -> Targets:
        if selection.ids is not None:
            rows = [r for r in (self._m.get(i) for i in selection.ids) if r]
        else:
            rows = self._m.get_all(filters={selection.subject_field: selection.subject}, top_k=_ALL)["results"]
        if not rows:
            raise no_targets()
        ids = tuple(str(r["id"]) for r in rows)
        # mem0's search needs a user, agent or run filter: search in every one the targets had.
        scopes = sorted({(f, r[f]) for r in rows for f in ("user_id", "agent_id", "run_id") if r.get(f)})
        return Targets(ids, tuple(r.get("memory") or "" for r in rows), self._vectors(ids), {"scopes": scopes})

    def others(self, targets: Targets) -> tuple[list[str], np.ndarray]:
        mine = set(targets.ids)
        pts, offset = [], None
        while True:
            batch, offset = self._client().scroll(self.collection, limit=1000, offset=offset, with_payload=True,
                                                  with_vectors=True)
            pts += [p for p in batch if str(p.id) not in mine]
            if offset is None:
                break
        vecs = [p.vector for p in pts]
        return [str((p.payload or {}).get("data") or "") for p in pts], np.asarray(vecs, np.float32).reshape(len(vecs), -1)

    def delete(self, selection: Selection, targets: Targets) -> Call:
        if selection.ids is not None:
            return Call("memory.delete(memory_id) for each id", [self._m.delete(i) for i in selection.ids])
        return Call("memory.delete_all(user_id=subject)", self._m.delete_all(**{selection.subject_field: selection.subject}))

    def probes(self, selection: Selection, targets: Targets) -> list[ProbeResult]:
        n = len(targets.ids)
        got = [r for r in (self._m.get(i) for i in targets.ids) if r]
        out = [ProbeResult("get by memory id", n, count_returned(targets, [r["id"] for r in got],
                                                                 [r.get("memory") for r in got]),
                           f"{len(got)} memories returned for {n} ids")]
        if selection.subject is not None:
            rows = self._m.get_all(filters={selection.subject_field: selection.subject}, top_k=_ALL)["results"]
            out.append(ProbeResult("get_all filtered by user", n, count_returned(
                targets, [r["id"] for r in rows], [r.get("memory") for r in rows]), f"{len(rows)} memories listed"))
        ids, texts = [], []
        scopes = targets.extra.get("scopes", [])
        for field, value in scopes:
            for t in targets.texts:
                for r in self._m.search(t, top_k=10, filters={field: value}, threshold=0.0).get("results", []):
                    ids.append(r["id"])
                    texts.append(r.get("memory"))
        out.append(ProbeResult("search by the deleted texts (nearest neighbours)", n,
                               count_returned(targets, ids, texts),
                               f"{n} queries x {len(scopes)} user/agent/run filter(s), top_k=10"))
        hit, entries = set(), 0
        for i, mid in enumerate(targets.ids):
            for h in self._m.history(mid):
                entries += 1
                if targets.texts[i] and targets.texts[i] in (h.get("old_memory"), h.get("new_memory")):
                    hit.add(i)
        out.append(ProbeResult("history by memory id", n, len(hit), f"{entries} history entries for {n} ids"))
        return out

    def maintenance(self, root: Path) -> list[Call]:
        return []

    def decoders(self):
        return ()

    def notes(self) -> list[str]:
        from .qdrant import sqlite_note

        return [sqlite_note()]

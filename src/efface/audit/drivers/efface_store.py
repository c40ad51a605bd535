"""efface itself. Scope = tenant (``--collection``; default ``default``).

Targets are the records the selection names whose every claim is the subject's and is not
a legal hold or obligation (the others are retained by design and reported by the
receipt). Read paths probed: ``read`` by key for every purpose, and ``recall`` with each
deleted text (FTS and ANN together, the vectors being the same). The delete stage is
``forget`` then ``wait``; maintenance is ``compact``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..model import ProbeResult, Selection, Targets
from .base import Call, count_returned, no_targets, version

_KEEP = ("legal_hold", "legal_obligation")


class EffaceDriver:
    kind = "efface"

    def __init__(self, collection: str | None = None):
        self.collection = collection or "default"
        self._s = None

    def library(self) -> str:
        return version("efface")

    def open(self, root: Path) -> None:
        import efface

        self._s = efface.open(str(root), background=False)

    def close(self) -> None:
        if self._s is not None:
            self._s.close()
        self._s = None

    def _sql(self, sql: str, args=()) -> list:
        return list(self._s._origin.connection.execute(sql, args))  # read-only queries on the origin

    def targets(self, selection: Selection) -> Targets:
        tenant = self.collection
        if selection.ids is not None:
            marks = ",".join("?" * len(selection.ids))
            rows = self._sql(f"SELECT id, key, text, embedding FROM records WHERE tenant=? AND key IN ({marks})",
                             [tenant, *selection.ids])
        else:
            rows = self._sql(
                "SELECT r.id, r.key, r.text, r.embedding FROM records r WHERE r.tenant=? AND EXISTS"
                " (SELECT 1 FROM claims c WHERE c.record_id=r.id AND c.subject=?) AND NOT EXISTS"
                f" (SELECT 1 FROM claims c WHERE c.record_id=r.id AND (c.subject<>? OR c.basis IN {_KEEP}))",
                [tenant, selection.subject, selection.subject])
        if not rows:
            raise no_targets()
        ids = [r[0] for r in rows]
        marks = ",".join("?" * len(ids))
        purposes = sorted({p for (p,) in self._sql(f"SELECT DISTINCT purpose FROM claims WHERE record_id IN ({marks})", ids)})
        vectors = np.stack([np.frombuffer(r[3], dtype=np.float32) for r in rows])
        return Targets(tuple(r[1] for r in rows), tuple(r[2] for r in rows), vectors, {"purposes": purposes})

    def others(self, targets: Targets) -> tuple[list[str], np.ndarray]:
        mine = set(targets.ids)
        rows = [r for r in self._sql("SELECT tenant, key, text, embedding FROM records")
                if not (r[0] == self.collection and r[1] in mine)]
        vecs = [np.frombuffer(r[3], dtype=np.float32) for r in rows]
        return [r[2] for r in rows], (np.stack(vecs) if vecs else None)

    def delete(self, selection: Selection, targets: Targets) -> Call:
        if selection.ids is not None:
            receipts = [self._s.forget(tenant=self.collection, key=k) for k in selection.ids]
        else:
            receipts = [self._s.forget(tenant=self.collection, subject=selection.subject)]
        for r in receipts:
            self._s.wait(r.handle, timeout=120)
        summary = [{"handle": r.handle, "level": r.level, "erased": len(r.erased), "retained": len(r.retained),
                    "quarantined": len(r.quarantined)} for r in receipts]
        return Call("store.forget(...) + store.wait(handle)", summary[0] if len(summary) == 1 else summary)

    def probes(self, selection: Selection, targets: Targets) -> list[ProbeResult]:
        n = len(targets.ids)
        purposes = targets.extra.get("purposes", [])
        found: set[str] = set()
        for p in purposes:
            for k in targets.ids:
                if self._s.read(k, tenant=self.collection, purpose=p) is not None:
                    found.add(k)
        out = [ProbeResult("read by key", n, len(found), f"{n} keys x {len(purposes)} purpose(s)")]
        ids, texts = [], []
        for p in purposes:
            for t in targets.texts:
                for h in self._s.recall(t, tenant=self.collection, purpose=p, k=10):
                    ids.append(h.key)
                    texts.append(h.text)
        out.append(ProbeResult("recall by the deleted texts (FTS + ANN)", n, count_returned(targets, ids, texts),
                               f"{n} queries x {len(purposes)} purpose(s), k=10"))
        return out

    def maintenance(self, root: Path) -> list[Call]:
        self.open(root)
        try:
            epoch = self._s.compact()
        finally:
            self.close()
        return [Call("store.compact()", epoch)]

    def decoders(self):
        return ()

"""efface itself as a peer: its gate adapter (:class:`EffaceTool`) and its audit driver
(:class:`EffaceDriver`).

Adapter (``efface.adapters.efface_store`` is an alias of this module): an efface store
presented through the gate's ``MemoryTool`` protocol, with everything its receipts prove put
into the acknowledgement. The tool serves one tenant under one purpose: its ``scope`` is the
tenant, and retention scopes (``scopes_cleared``/``scopes_retained``) are purposes, the
reasons records are kept.

Audit driver (``efface audit efface``). Scope = tenant (``--collection``; default
``default``). Targets are the records the selection names whose every claim is the
subject's and is not a legal hold or obligation (the others are retained by design and
reported by the receipt). Read paths probed: ``read`` by key for every purpose, and
``recall`` with each deleted text (FTS and ANN together, the vectors being the same). The
delete stage is ``forget`` then ``wait``; maintenance is ``compact``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import validate
from ..audit.driver import BaseDriver, Call, count_returned, no_targets, version
from ..audit.model import ProbeResult, Selection, Targets
from ..errors import InvalidInput, UnknownPurpose
from ..gate.protocol import ForgetAck, ToolHit, VerificationRead
from ..vectors import read_many as read_vectors

if TYPE_CHECKING:
    from ..store import Store


# == the gate adapter ================================================================================
class EffaceTool:
    """``EffaceTool(store, tenant=..., purpose=...)``: an efface ``Store`` as a memory tool.

    ``forget(keys=[...])`` runs one efface forget per key (each its own erasure and receipt;
    the acknowledgement joins their handles with commas and carries the newest epoch), or one
    forget for a subject. ``clock`` must be the store's clock (it is, by default) so that
    verification reads and acknowledgements share a time line."""

    name = "efface"

    def __init__(self, store: Any, *, tenant: str, purpose: str, clock: Callable[[], float] | None = None):
        self.store = store
        self.tenant = tenant
        self.purpose = purpose
        self._clock: Callable[[], float] = clock if clock is not None else getattr(store, "_clock", time.time)

    def _scope(self, scope: str) -> None:
        if scope != self.tenant:
            raise InvalidInput("this tool serves one tenant: pass that tenant as the scope")

    def write(
        self, key: str, text: str, *, scope: str, subject: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> None:
        """Write under the tool's purpose, with consent as the basis."""
        self._scope(scope)
        if subject is None:
            raise InvalidInput("efface keeps a record only for a subject: pass the subject whose data it is")
        self.store.write(key, text, tenant=self.tenant, subject=subject, purpose=self.purpose, metadata=metadata)

    def recall(self, query: str, *, scope: str, k: int = 10) -> list[ToolHit]:
        self._scope(scope)
        return [
            ToolHit(h.key, h.text, h.score, h.metadata)
            for h in self.store.recall(query, tenant=self.tenant, purpose=self.purpose, k=k)
        ]

    def forget(self, *, scope: str, subject: str | None = None, keys: Sequence[str] | None = None) -> ForgetAck:
        """Forget through efface and acknowledge with the receipts' evidence and a
        verification read of every erased key at the origin."""
        self._scope(scope)
        if keys:
            for k in keys:  # all checked before the first erasure commits
                validate.key(k)
            receipts = [self.store.forget(tenant=self.tenant, subject=subject, key=k) for k in keys]
        else:
            receipts = [self.store.forget(tenant=self.tenant, subject=subject)]
        released = {r.purpose for rc in receipts for r in rc.released}
        # A purpose under which anything is kept is not cleared, even if some claims under it went.
        retained = {r.purpose for rc in receipts for r in rc.retained}
        erased = tuple(dict.fromkeys(k for rc in receipts for k in rc.erased))
        paths = dict.fromkeys(p for rc in receipts for p in rc.paths)
        # Derived records the tenant's policy kept still carry what was forgotten: not covered.
        if not any(d.action == "kept" for rc in receipts for d in rc.derivations):
            paths["derivations"] = None
        targeted = tuple(keys) if keys else tuple(dict.fromkeys(r.key for rc in receipts for r in rc.released))
        return ForgetAck(
            raw=receipts[0] if len(receipts) == 1 else tuple(receipts),
            scope=scope,
            keys=targeted,
            acknowledged_at=max(rc.acknowledged_at for rc in receipts),
            handle=",".join(rc.handle for rc in receipts),
            epoch=max(rc.epoch for rc in receipts),
            scopes_cleared=tuple(sorted(released - retained)),
            scopes_retained=tuple(sorted(retained)),
            derived_covered=tuple(paths),
            max_propagation_s=max(rc.max_propagation_s for rc in receipts),
            verification=self._origin_read(erased, sorted(released | {self.purpose})),
        )

    def _origin_read(self, keys: Sequence[str], purposes: Sequence[str]) -> VerificationRead:
        found = []
        for key in keys:
            for purpose in purposes:
                try:
                    hit = self.store.read(key, tenant=self.tenant, purpose=purpose)
                except UnknownPurpose:  # nothing was ever kept under it in this tenant
                    hit = None
                if hit is not None:
                    found.append(key)
                    break
        return VerificationRead(routed_to="origin", found=tuple(found), checked_at=self._clock())

    def verification_read(self, keys: Sequence[str], scope: str) -> VerificationRead:
        """Point reads of ``keys`` under the tool's purpose. ``store.read`` always goes to
        the origin: efface has no cache or replica in front of it."""
        self._scope(scope)
        return self._origin_read(tuple(keys), (self.purpose,))

    def read_epoch(self, scope: str) -> int:
        """The origin's current epoch. efface resolves every recall candidate against the
        origin's live claims when it is read (docs/concepts.md §4, invariant 1), so its reads reflect every
        committed erasure, even while an index still holds the bytes (that lag is the
        receipt's propagation window, which :func:`efface.gate.classify` checks)."""
        self._scope(scope)
        return int(self.store.stats()["epoch"])

    @property
    def derived_structures(self) -> tuple[str, ...]:
        """The read paths an efface forget covers, besides the origin."""
        return tuple(p for p in self.store.stats()["paths"] if p != "origin")

    @property
    def max_propagation_s(self) -> float:
        """The longest bound any of the store's read paths declares."""
        return max(p["max_propagation_s"] for p in self.store.stats()["paths"].values())


# == the audit driver ================================================================================
_KEEP = ("legal_hold", "legal_obligation")


class EffaceDriver(BaseDriver):
    kind = "efface"

    def __init__(self, collection: str | None = None):
        self.collection = collection or "default"
        self._s: Store | None = None

    def library(self) -> str:
        return version("efface")

    def open(self, root: Path) -> None:
        import efface

        self._s = efface.open(str(root), background=False)

    def close(self) -> None:
        if self._s is not None:
            self._s.close()
        self._s = None

    @property
    def _store(self) -> Store:
        return self._opened(self._s)

    def _sql(self, sql: str, args=()) -> list:
        """Read-only SQL on the store's origin file, as the other drivers read their stores'
        files: an audit finds its targets in what is on disk, not through the API it audits."""
        import apsw

        conn = apsw.Connection(os.path.join(self._store.path, "origin.db"), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            return list(conn.execute(sql, args))
        finally:
            conn.close()

    def _tenant_id(self) -> str | None:
        """The id every row of the tenant holds: the origin keeps the tenant's name only in
        ``tenants`` (docs/concepts.md §8), beside the keyed hash that stands in for it elsewhere."""
        rows = self._sql("SELECT tenant FROM tenants WHERE name=?", (self.collection,))
        return rows[0][0] if rows else None

    def targets(self, selection: Selection) -> Targets:
        tenant = self._tenant_id()
        if selection.ids is not None:
            marks = ",".join("?" * len(selection.ids))
            rows = self._sql(
                f"SELECT id, key, text, embedding FROM records WHERE tenant=? AND key IN ({marks})",
                [tenant, *selection.ids],
            )
        else:
            rows = self._sql(
                "SELECT r.id, r.key, r.text, r.embedding FROM records r WHERE r.tenant=? AND EXISTS"
                " (SELECT 1 FROM claims c WHERE c.record_id=r.id AND c.subject=?) AND NOT EXISTS"
                f" (SELECT 1 FROM claims c WHERE c.record_id=r.id AND (c.subject<>? OR c.basis IN {_KEEP}))",
                [tenant, selection.subject, selection.subject],
            )
        if not rows:
            raise no_targets()
        ids = [r[0] for r in rows]
        marks = ",".join("?" * len(ids))
        sql = f"SELECT DISTINCT purpose FROM claims WHERE record_id IN ({marks})"
        purposes = sorted({p for (p,) in self._sql(sql, ids)})
        vectors = read_vectors([r[3] for r in rows])
        return Targets(tuple(r[1] for r in rows), tuple(r[2] for r in rows), vectors, {"purposes": purposes})

    def others(self, targets: Targets) -> tuple[list[str], np.ndarray | None]:
        mine, tenant = set(targets.ids), self._tenant_id()
        rows = [
            r
            for r in self._sql("SELECT tenant, key, text, embedding FROM records")
            if not (r[0] == tenant and r[1] in mine)
        ]
        return [r[2] for r in rows], (read_vectors([r[3] for r in rows]) if rows else None)

    def delete(self, selection: Selection, targets: Targets) -> Call:
        if selection.ids is not None:
            receipts = [self._store.forget(tenant=self.collection, key=k) for k in selection.ids]
        else:
            receipts = [self._store.forget(tenant=self.collection, subject=selection.subject)]
        for r in receipts:
            self._store.wait(r.handle, timeout=120)
        summary = [
            {
                "handle": r.handle,
                "level": r.level,
                "erased": len(r.erased),
                "retained": len(r.retained),
                "quarantined": len(r.quarantined),
            }
            for r in receipts
        ]
        return Call("store.forget(...) + store.wait(handle)", summary[0] if len(summary) == 1 else summary)

    def probes(self, selection: Selection, targets: Targets) -> list[ProbeResult]:
        n = len(targets.ids)
        purposes = targets.extra.get("purposes", [])
        found: set[str] = set()
        for p in purposes:
            for k in targets.ids:
                if self._store.read(k, tenant=self.collection, purpose=p) is not None:
                    found.add(k)
        out = [ProbeResult("read by key", n, len(found), f"{n} keys x {len(purposes)} purpose(s)")]
        ids, texts = [], []
        for p in purposes:
            for t in targets.texts:
                for h in self._store.recall(t, tenant=self.collection, purpose=p, k=10):
                    ids.append(h.key)
                    texts.append(h.text)
        out.append(
            ProbeResult(
                "recall by the deleted texts (FTS + ANN)",
                n,
                count_returned(targets, ids, texts),
                f"{n} queries x {len(purposes)} purpose(s), k=10",
            )
        )
        return out

    def maintenance(self, root: Path) -> list[Call]:
        self.open(root)
        try:
            epoch = self._store.compact()
        finally:
            self.close()
        return [Call("store.compact()", epoch)]

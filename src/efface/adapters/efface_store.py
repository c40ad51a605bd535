"""An efface store presented through the gate's ``MemoryTool`` protocol, with everything
its receipts prove put into the acknowledgement.

The tool serves one tenant under one purpose: its ``scope`` is the tenant, and retention
scopes (``scopes_cleared``/``scopes_retained``) are purposes, the reasons records are kept.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

from .. import validate
from ..errors import InvalidInput, UnknownPurpose
from ..gate.protocol import ForgetAck, ToolHit, VerificationRead


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
        self._clock = clock or getattr(store, "_clock", time.time)

    def _scope(self, scope: str) -> None:
        if scope != self.tenant:
            raise InvalidInput("this tool serves one tenant: pass that tenant as the scope")

    def write(self, key: str, text: str, *, scope: str, subject: str | None = None,
              metadata: Mapping[str, Any] | None = None) -> None:
        """Write under the tool's purpose, with consent as the basis."""
        self._scope(scope)
        if subject is None:
            raise InvalidInput("efface keeps a record only for a subject: pass the subject whose data it is")
        self.store.write(key, text, tenant=self.tenant, subject=subject, purpose=self.purpose, metadata=metadata)

    def recall(self, query: str, *, scope: str, k: int = 10) -> list[ToolHit]:
        self._scope(scope)
        return [ToolHit(h.key, h.text, h.score, h.metadata)
                for h in self.store.recall(query, tenant=self.tenant, purpose=self.purpose, k=k)]

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
        origin's live claims when it is read (DESIGN invariant 1), so its reads reflect every
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

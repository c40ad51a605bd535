"""Receipts: the outcome of a release, the hashed body the store keeps, the Receipt it returns.

A forget (or a TTL expiry) produces an :class:`Outcome` inside its transaction. What the
store keeps of it (the receipts table and the ledger) is :func:`hashed_body`: keyed hashes
in place of every key, subject and tenant, so a receipt never holds personal data
(invariant 7). What the caller gets back is :func:`to_receipt`: the same facts in clear,
with the state of every read path at that moment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..model import CopyState, Derivation, PathState, Receipt, Released, Retained, Selector


@dataclass
class Outcome:
    """What one release did, as the transaction that made it saw it."""

    selector: Selector
    kind: str
    released: list[Released]
    erased: list[str]
    retained: list[Retained]
    drops: list[int]
    puts: list[int] = field(default_factory=list)
    texts: dict[int, str] = field(default_factory=dict)
    derivations: list[Derivation] = field(default_factory=list)
    policy: str = "quarantine"
    identifiers_erased: bool = False
    subjects_erased: list[str] = field(default_factory=list)
    """Subjects left with no claim in the tenant whose registered identifiers went with it
    (by any selector, an expiry, or ``forget(everything=True)``)."""
    tenant_erased: bool = False
    """The tenant's name was erased: nothing of the tenant is left."""
    handle: str = ""
    acknowledged_at: float = 0.0
    ledger_seq: int = 0
    ledger_hash: str = ""
    backups: str | None = None

    @property
    def quarantined(self) -> tuple[str, ...]:
        return tuple(d.key for d in self.derivations if d.action == "quarantined")


def hashed_body(
    out: Outcome, epoch: int, now: float, hasher: Callable[..., str], max_propagation_s: float
) -> dict[str, Any]:
    """The receipt as it is kept: keyed hashes in place of every key, subject and tenant."""
    t = out.selector.tenant
    memo: dict[tuple[str, str], str] = {}

    def h(kind: str, value: str | None) -> str | None:
        if value is None:
            return None
        if (kind, value) not in memo:
            memo[kind, value] = hasher(kind, t, value)
        return memo[kind, value]

    return {
        "epoch": epoch,
        "kind": out.kind,
        "level": "intent",
        "selector": {
            "tenant_h": t,  # the selector's tenant is already its id (a keyed hash)
            "subject_h": h("subject", out.selector.subject),
            "purpose": out.selector.purpose,
            "prefix_h": h("key", out.selector.prefix),
            "key_h": h("key", out.selector.key),
        },
        "released": [
            {"key_h": h("key", r.key), "subject_h": h("subject", r.subject), "purpose": r.purpose, "basis": r.basis}
            for r in out.released
        ],
        "erased": [h("key", k) for k in out.erased],
        "retained": [
            {
                "key_h": h("key", r.key),
                "purpose": r.purpose,
                "basis": r.basis,
                "expires_at": r.expires_at,
                "reason": r.reason,
            }
            for r in out.retained
        ],
        "quarantined": [h("key", k) for k in out.quarantined],
        "derivations": [{"key_h": h("key", d.key), "why": d.why, "action": d.action} for d in out.derivations],
        "policy": out.policy,
        "identifiers_erased": out.identifiers_erased,
        "tenant_erased": out.tenant_erased,
        "subjects_erased": [h("subject", s) for s in out.subjects_erased],
        "max_propagation_s": max_propagation_s,
        "acknowledged_at": now,
    }


def to_receipt(
    epoch: int,
    out: Outcome,
    paths: dict[str, PathState],
    max_propagation_s: float,
    copies: dict[str, CopyState] | None = None,
) -> Receipt:
    """The receipt returned to the caller: the outcome in clear, and every path's and every
    copy's state now (:func:`efface.erasure.copies.at_ack`)."""
    return Receipt(
        handle=out.handle,
        epoch=epoch,
        kind=out.kind,
        selector=out.selector,
        level="intent",
        released=tuple(out.released),
        erased=tuple(out.erased),
        retained=tuple(out.retained),
        quarantined=out.quarantined,
        paths=paths,
        max_propagation_s=max_propagation_s,
        acknowledged_at=out.acknowledged_at,
        derivations=tuple(out.derivations),
        policy=out.policy,
        identifiers_erased=out.identifiers_erased,
        tenant_erased=out.tenant_erased,
        subjects_erased=tuple(out.subjects_erased),
        ledger_seq=out.ledger_seq,
        ledger_hash=out.ledger_hash,
        copies=copies or {},
    )

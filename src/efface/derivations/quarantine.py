"""Decisions on derived records, as transaction bodies for the store's chokepoint: a tenant's
policy, re-deriving a quarantined record, lifting a quarantine without change. Each one is
recorded in the ledger (keyed hashes only) in the transaction that makes it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import NotFound

Body = Callable[[Any, float], tuple[Any, list[int], list[int], dict[int, str]]]


def reason_hash(hasher: Callable[..., str], tenant: str, reason: str | None) -> str | None:
    """What the ledger keeps of a stated reason: a keyed hash (docs/concepts.md §8). Equal reasons hash
    alike in one store, so an auditor shown the text can check it; without the store's secret
    the hash says nothing of it."""
    return None if reason is None else hasher("reason", tenant, reason)


def policy_body(hasher: Callable[..., str], tenant: str, policy: str, reason: str | None) -> Body:
    """The policy's reason lives in the tenant's policy row (it explains every ``keep`` in
    later receipts) until the next ``set_policy`` replaces it; the ledger keeps its hash."""

    def body(tx, now):
        tx.set_policy(tenant, policy, reason)
        tx.append_ledger(
            "policy", None, {"tenant_h": tenant, "policy": policy, "reason_h": reason_hash(hasher, tenant, reason)}, now
        )
        return None, [], [], {}

    return body


def rederive_body(
    derivations: Any,
    hasher: Callable[..., str],
    tenant: str,
    key: str,
    text: str,
    vector: bytes,
    sources: Sequence[str] | None,
    metadata: str | None,
) -> Body:
    """A new version of a derived record (its claims stay); its quarantine is lifted."""

    def body(tx, now):
        rid = tx.record_id(tenant, key)
        if rid is None:
            raise NotFound("no live record with that key in this tenant: write it instead")
        tx.replace_text(rid, text, vector, now)
        if metadata is not None:
            tx.set_metadata(rid, metadata)
        if sources is not None:
            tx.set_sources(rid, tenant, sources)
        derivations.on_write(tx, tenant, rid, text)
        lifted = tx.lift_quarantine(rid)
        tx.append_ledger(
            "rederive",
            None,
            {"tenant_h": tenant, "key_h": hasher("key", tenant, key), "lifted": lifted},
            now,
        )
        return None, [rid], [], {rid: text}

    return body


def release_body(hasher: Callable[..., str], tenant: str, key: str, reason: str) -> Body:
    """The reason is kept beside the released record and erased with it (its forget's
    verify proves the text gone); the ledger keeps its keyed hash."""

    def body(tx, now):
        rid = tx.record_id(tenant, key)
        if rid is None or not tx.lift_quarantine(rid):
            raise NotFound("no quarantined record with that key in this tenant")
        reason_h = reason_hash(hasher, tenant, reason)
        tx.save_reason(rid, tenant, reason_h, reason, now)
        tx.append_ledger(
            "release",
            None,
            {"tenant_h": tenant, "key_h": hasher("key", tenant, key), "reason_h": reason_h},
            now,
        )
        return None, [], [], {}

    return body

"""The release rules: which claims a forget (or an expiry) releases, what is erased, what stays.

A forget releases the claims its selector matches, per (subject, purpose) pair, never per
key (docs/concepts.md §2). Claims whose basis is ``legal_hold`` or ``legal_obligation`` stay unless the
forget names their purpose. A record left with no claim is erased; a record with claims left
is retained, and the receipt says under which basis and why. Everything here runs inside the
caller's origin transaction, so the tombstones, the derived records' quarantine, the evidence
verify needs, the destroyed data keys, the receipt and the ledger entry commit together.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ..backups.coverage import coverage
from ..errors import KeyInUse
from ..model import LEGAL_BASES, Released, Retained, Selector
from ..origin.base import ClaimRow, Tx
from .receipts import Outcome, hashed_body


class EvidenceCollector(Protocol):
    """What a forget keeps for a later verification (see :mod:`efface.erasure.evidence`)."""

    def collect(
        self,
        tx: Tx,
        tenant: str,
        handle: str,
        content: dict[int, tuple[str, str, bytes, str]],
        quarantined_ids: Sequence[int],
        identifiers: Sequence[str],
        now: float,
        keys: Sequence[bytes] = (),
        tenant_name: str | None = None,
        reasons: Sequence[str] = (),
    ) -> None: ...


class Releaser:
    """Applies the release rules inside a transaction; handed its collaborators."""

    def __init__(
        self,
        derivations: Any,
        evidence: EvidenceCollector,
        hasher: Callable[..., str],
        max_propagation: Callable[[], float],
    ):
        self._derivations = derivations
        self._evidence = evidence
        self._hash = hasher
        self._max_propagation = max_propagation

    def release(
        self,
        tx: Tx,
        selector: Selector,
        kind: str,
        matched: Sequence[ClaimRow],
        now: float,
        *,
        staying: frozenset[str] = frozenset(),
    ) -> Outcome:
        """Release claims, erase records left with none, list what stays and why, and write
        the receipt and the ledger entry: all inside the caller's transaction. ``staying``:
        subjects about to get a new claim in the same transaction (the writers of a replacing
        write), whose registrations must not go with the claims released here."""
        held = [c for c in matched if kind == "forget" and c.basis in LEGAL_BASES and selector.purpose is None]
        held_ids = {c.id for c in held}
        released = [c for c in matched if c.id not in held_ids]
        tx.release([c.id for c in released])
        out = Outcome(selector, kind, [Released(c.key, c.subject, c.purpose, c.basis) for c in released], [], [], [])
        key_of = {c.record_id: c.key for c in matched}
        left = tx.remaining_claims(sorted(key_of))
        for rid in sorted(key_of):
            if rid not in left:
                out.erased.append(key_of[rid])
                out.drops.append(rid)
                continue
            for c in left[rid]:
                if c.id in held_ids:
                    reason = f"basis {c.basis} is kept unless the forget names purpose '{c.purpose}'"
                else:
                    reason = "another live claim keeps the record (retention scopes are a union)"
                out.retained.append(Retained(c.key, c.purpose, c.basis, c.expires_at, reason))
        content = tx.content_of(out.drops)  # for the fingerprints verify needs; gone at commit
        reasons = tx.reasons_of(out.drops)  # stated release reasons go with their records
        tx.erase_records(out.drops)
        # Crypto-shredding: a subject left with no claim in the tenant loses its data key here,
        # in the erasure's own transaction, so its part of every backup is unreadable from now.
        shredded = tx.destroy_subject_keys(selector.tenant, {c.subject for c in released})
        handle = "efr_" + secrets.token_hex(12)
        subject = selector.subject if kind == "forget" else None
        out.derivations, out.puts, out.texts, redacted = self._derivations.process(
            tx,
            tenant=selector.tenant,
            subject=subject,
            erased_keys=out.erased,
            erased_ids=set(out.drops),
            handle=handle,
            now=now,
        )
        out.policy = tx.policy(selector.tenant)[0]
        identifiers = self._last_claims(tx, selector.tenant, subject, {c.subject for c in released} - staying, out)
        if subject in out.subjects_erased:
            # the identifiers as the redacted texts and metadata wrote them (another case, a
            # soft hyphen, full width): verify looks for those bytes too
            identifiers += [w for w in redacted if w not in identifiers]
        if selector.everything and kind == "forget":
            # All of the tenant: every registered subject left with no claim loses its
            # identifiers too, even one that never had a claim.
            for gone in tx.subjects_of(selector.tenant):
                registered = tx.subject_identifiers(selector.tenant, gone)
                if self._derivations.forget_subject(tx, selector.tenant, gone):
                    out.subjects_erased.append(gone)
                    identifiers += [gone, *(json.loads(registered) if registered else [])]
                elif not tx.subject_has_claims(selector.tenant, gone):
                    identifiers.append(gone)
            out.identifiers_erased = bool(out.subjects_erased)
        # Once no record, registered subject or data key of the tenant is left, its name goes
        # too (docs/concepts.md §8), fingerprinted so verify proves it gone from every file.
        # (not when a write replaces the tenant's last record: its new record keeps the name)
        tenant_name = None if kind == "replace" else tx.drop_tenant_name(selector.tenant)
        out.tenant_erased = tenant_name is not None
        if out.tenant_erased:
            # The policy's stated reason is free text about the tenant (it may name anyone):
            # it goes with the tenant, and the policy reverts to the default.
            policy_reason = tx.drop_policy(selector.tenant)
            if policy_reason is not None:
                reasons = [*reasons, policy_reason]
        found = [tx.record_id(selector.tenant, d.key) for d in out.derivations if d.action == "quarantined"]
        quarantined_ids = [rid for rid in found if rid is not None]
        self._evidence.collect(
            tx,
            selector.tenant,
            handle,
            content,
            quarantined_ids,
            identifiers,
            now,
            keys=[key for _s, key in shredded],
            tenant_name=tenant_name,
            reasons=reasons,
        )
        body = hashed_body(out, tx.epoch, now, self._hash, self._max_propagation())
        body["backups"] = out.backups = coverage(
            tx, selector.tenant, out.released, out.erased, out.derivations, [s for s, _key in shredded], self._hash
        )
        tx.save_receipt(handle, kind, selector.tenant, body, now)  # the tenant id is its keyed hash
        out.ledger_seq, out.ledger_hash = tx.append_ledger(kind, handle, body, now)
        out.handle, out.acknowledged_at = handle, now
        return out

    def _last_claims(self, tx: Tx, tenant: str, named: str | None, released: set[str], out: Outcome) -> list[str]:
        """A subject's identifiers go with its last claim in the tenant, whatever removed it
        (docs/concepts.md §8): a forget by subject, key, prefix or purpose, or an expiry. For each
        subject this erasure released a claim of (and the subject a forget names) that has no
        claim left, its registration and mention rows are deleted here, in the erasure's
        transaction; returns the names and identifiers verify must prove gone."""
        identifiers: list[str] = []
        for subject in sorted(released | ({named} if named is not None else set())):
            if tx.subject_has_claims(tenant, subject):
                continue  # another claim (another key, a retained legal hold) keeps them
            registered = tx.subject_identifiers(tenant, subject)
            if self._derivations.forget_subject(tx, tenant, subject):
                out.subjects_erased.append(subject)
            identifiers += [subject, *(json.loads(registered) if registered else [])]
        out.identifiers_erased = bool(out.subjects_erased)
        return identifiers


def overwritten_claims(
    tx: Tx, tenant: str, items: Sequence[tuple], replace: bool, rids: Mapping[str, int] | None = None
) -> list[ClaimRow]:
    """The claims a write would leave on text they were not made for: every claim on each
    existing record that another subject than the item's holds a claim on. Refuses with
    :class:`~efface.errors.KeyInUse` unless ``replace``, and always when another subject
    holds the record under a legal basis. ``items`` are ``(key, text, subject, ...)``;
    ``rids``, the ids of the items' keys that exist (``Tx.record_ids``), if already looked up."""
    out: list[ClaimRow] = []
    # Set-based look-ups for the whole batch (a bulk import of new keys finds nothing).
    if rids is None:
        rids = tx.record_ids(tenant, [item[0] for item in items])
    held = tx.remaining_claims(list(rids.values())) if rids else {}
    for n, (key, _text, subject, *_rest) in enumerate(items):
        rid = rids.get(key)
        claims = held.get(rid, []) if rid is not None else []
        others = [c for c in claims if c.subject != subject]
        if not others:
            continue
        which = f"item {n + 1} of {len(items)}: " if len(items) > 1 else ""
        if any(c.basis in LEGAL_BASES for c in others):
            raise KeyInUse(
                f"{which}the key holds a record another subject keeps under a legal basis (legal_hold or "
                "legal_obligation); it cannot be replaced: write under another key. Nothing was written",
                claims=len(others),
            )
        if not replace:
            raise KeyInUse(
                f"{which}the key holds a record that {len(others)} claim(s) of other subjects keep, made for "
                "the text it holds: write under another key, or pass replace=True to erase that record with "
                "its claims (a receipt records it) and write yours. Nothing was written",
                claims=len(others),
            )
        out += claims
    return out

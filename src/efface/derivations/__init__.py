"""Cross-subject derivations (invariant 4): lineage, mentions and what a forget does to them.

At forget time the store enumerates every record that is *derived* from what it erased:

* **lineage** — records written with ``sources=`` naming an erased key, and, transitively,
  records derived from those;
* **mention** — when the forget names a subject, records whose text names one of the
  subject's registered identifiers (found through :class:`~efface.mentions.MentionIndex`,
  kept up to date on every write, so no scan happens at forget time).

Each tenant's policy decides what happens to them, and the receipt says it:
``quarantine`` (default: unreadable and unrecallable until re-derived or released),
``redact`` (a new version with the subject's identifiers replaced by ``[redacted]``; the old
version is erased like any erased record — lineage-derived records are quarantined, since
a derived fact cannot be redacted by identifiers), or ``keep`` (only with a stated reason).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from .. import validate as v
from ..errors import InvalidInput
from ..model import Derivation
from ..vectors import stored_one
from .identifiers import problem
from .mentions import PHONE_PREFIX, MentionIndex

POLICIES = ("quarantine", "redact", "keep")
REDACTION_MARK = "[redacted]"


ERASED_SOURCE = "erased:"
"""What stands in a derived record's ``sources`` for a source that was erased, followed by
the handle of the erasure (``erased:efr_...``)."""


class Derivations:
    """The mention index and the forget-time derivation logic of one store."""

    def __init__(self, origin, embedder):
        self._origin = origin
        self._embedder = embedder
        self.mentions = MentionIndex()
        for tenant, subject, identifiers in origin.all_subjects():
            # Registered before registration refused identifiers too common to name anyone:
            # they are kept (and erased with the subject) but never matched.
            usable = [i for i in json.loads(identifiers) if problem(i) is None]
            self.mentions.set_subject(tenant, subject, usable)

    # -- writes ----------------------------------------------------------------------------
    def on_write(self, tx, tenant: str, record_id: int, text: str) -> None:
        """Record which registered subjects this text names."""
        found = self.mentions.find(tenant, text)
        if record_id in tx.old_texts:  # a rewrite: what the old text named no longer counts
            tx.set_mentions(record_id, tenant, found)
        elif found:
            tx.add_mentions(record_id, tenant, found)

    def on_register(self, tx, tenant: str, subject: str, identifiers: Sequence[str]) -> MentionIndex:
        """Find the tenant's existing records that name the newly registered identifiers.
        Candidates come from the full-text index (a phrase query per identifier), then the
        normalised matcher confirms them; returns the subject's own matcher for the caller
        to install after the commit."""
        own = MentionIndex()
        own.set_subject(tenant, subject, identifiers)
        candidates: dict[int, str] = {}
        for pattern in own.identifiers(tenant, subject):
            words = pattern[len(PHONE_PREFIX) :] if pattern.startswith(PHONE_PREFIX) else pattern
            for variant in _phone_variants(words) if pattern.startswith(PHONE_PREFIX) else [words]:
                candidates.update(tx.records_with_phrase(tenant, variant))
        for rid, text in candidates.items():
            if own.find(tenant, text):
                tx.add_mentions(rid, tenant, [subject])
        return own

    # -- forget ----------------------------------------------------------------------------
    def process(
        self,
        tx,
        *,
        tenant: str,
        subject: str | None,
        erased_keys: Sequence[str],
        erased_ids: set[int],
        handle: str,
        now: float,
    ) -> tuple[list[Derivation], list[int], dict[int, str], list[str]]:
        """Enumerate and treat the records derived from this erasure, inside its transaction.
        Returns (derivations for the receipt, record ids rewritten, their new texts, and the
        identifiers as they were written in what redaction removed, for the fingerprints)."""
        policy, reason = tx.policy(tenant)
        affected: dict[int, tuple[str, str]] = {}  # record id -> (key, why)
        if subject is not None:
            for rid, key in tx.mentioning(tenant, subject):
                if rid not in erased_ids:
                    affected[rid] = (key, "mention")
        # Lineage, transitively: anything built from an erased record, or from a record
        # that is itself held back because of this erasure.
        frontier = list(erased_keys) + [k for k, _ in affected.values()]
        seen = set(frontier)
        while frontier:
            nxt = []
            for rid, key in tx.derived_from(tenant, frontier):
                if rid in erased_ids:
                    continue
                if rid not in affected:
                    affected[rid] = (key, "lineage")
                elif "lineage" not in affected[rid][1]:
                    affected[rid] = (key, "lineage+mention")
                if key not in seen:
                    seen.add(key)
                    nxt.append(key)
            frontier = nxt

        out: list[Derivation] = []
        puts: list[int] = []
        texts: dict[int, str] = {}
        written: set[str] = set()
        if policy == "redact":
            # Redacted versions first, embedded in one batch.
            for rid, (_key, why) in affected.items():
                if "mention" in why:
                    new_text = self._redacted(tx, tenant, subject, rid, written)
                    if new_text is not None:
                        texts[rid] = new_text
                    # The metadata of a record that names the subject may name them too
                    # ({"caller": "Quorra Vell"}): redacted alike, or the name would stay
                    # on disk as a live value that verify must excuse.
                    new_meta = self._redacted_metadata(tx, tenant, subject, rid, written)
                    if new_meta is not None:
                        tx.set_metadata(rid, new_meta)
            if texts:
                ids = list(texts)
                vecs = self._embedder.embed([texts[r] for r in ids])
                for rid, vec in zip(ids, vecs, strict=True):
                    tx.replace_text(rid, texts[rid], stored_one(vec), now)
                    tx.set_mentions(rid, tenant, self.mentions.find(tenant, texts[rid]) - {subject})
                    puts.append(rid)
        for rid, (key, why) in sorted(affected.items(), key=lambda kv: kv[1][0]):
            if policy == "keep":
                out.append(Derivation(key, why, "kept", f"tenant policy keep: {reason}"))
                continue
            # Under redact, the name does not outlive the erasure on disk, whatever else happens.
            redacted = rid in texts
            if redacted and why == "mention":
                out.append(Derivation(key, why, "redacted", f"identifiers replaced by {REDACTION_MARK}"))
                continue
            tx.quarantine(rid, tenant, why, handle, now)
            detail = {
                "lineage": "derived from an erased record: re-derive it from its surviving sources or release it",
                "mention": "names the erased subject: re-derive it without them or release it",
                "lineage+mention": "derived from an erased record and names the erased subject: "
                "re-derive it or release it",
            }[why]
            if redacted:
                detail = f"identifiers replaced by {REDACTION_MARK}; still " + detail
            elif policy == "redact":
                detail += (
                    " (no identifier span could be located for redaction)"
                    if why == "mention"
                    else " (redaction cannot remove what was derived)"
                )
            out.append(Derivation(key, why, "quarantined", detail))
        if erased_keys:
            # Lineage keeps the erasure's handle, never the erased key (docs/concepts.md §8).
            tx.forget_sources(tenant, erased_keys, ERASED_SOURCE + handle)
        return out, puts, texts, sorted(written)

    def _redact(self, tenant: str, subject: str, text: str, written: set[str]) -> str | None:
        """``text`` with every span naming ``subject`` replaced, or None if none does; the
        spans as written are added to ``written``."""
        spans = _merge(self.mentions.spans(tenant, subject, text))
        if not spans:
            return None
        for start, end in reversed(spans):
            written.add(text[start:end])
            text = text[:start] + REDACTION_MARK + text[end:]
        return text

    def _redacted(self, tx, tenant: str, subject: str | None, record_id: int, written: set[str]) -> str | None:
        rec = tx.record(record_id)
        if rec is None or subject is None:
            return None
        return self._redact(tenant, subject, rec.text, written)

    def _redacted_metadata(self, tx, tenant: str, subject: str | None, record_id: int, written: set[str]) -> str | None:
        """The record's metadata (JSON) with the subject's identifiers redacted in every
        string, keys of objects too; None if nothing in it names them."""
        rec = tx.record(record_id)
        if rec is None or subject is None or not rec.metadata or rec.metadata == "{}":
            return None
        changed = False

        def walk(value):
            nonlocal changed
            if isinstance(value, str):
                new = self._redact(tenant, subject, value, written)
                if new is None:
                    return value
                changed = True
                return new
            if isinstance(value, list):
                return [walk(v) for v in value]
            if isinstance(value, dict):
                return {walk(k): walk(v) for k, v in value.items()}
            return value

        redacted = walk(json.loads(rec.metadata))
        # the store's own encoding of metadata (validate.metadata)
        return json.dumps(redacted, sort_keys=True, ensure_ascii=False, allow_nan=False) if changed else None

    def forget_subject(self, tx, tenant: str, subject: str) -> bool:
        """Erase the subject's identifiers once no claim of theirs is left in the tenant.
        Returns True when they were erased (the caller drops them from memory after commit)."""
        if tx.subject_has_claims(tenant, subject):
            return False
        return tx.drop_subject(tenant, subject)


def validate_policy(policy: str, reason: str | None) -> tuple[str, str | None]:
    if policy not in POLICIES:
        raise InvalidInput(f"policy must be one of {', '.join(POLICIES)}")
    if policy == "keep" and (not isinstance(reason, str) or not reason.strip()):
        raise InvalidInput("policy 'keep' needs a stated reason (every receipt shows it; the ledger records its hash)")
    if reason is not None:
        v.reason(reason, blank=True)
    return policy, reason


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _phone_variants(e164: str) -> list[str]:
    """Word sequences a phone number may be indexed as by FTS5 (digits split on punctuation
    are found by their last group; the whole digit run by itself)."""
    digits = e164.lstrip("+")
    out = [digits]
    if len(digits) > 10:
        out.append(digits[-10:])
    out.append(digits[-4:])
    return out

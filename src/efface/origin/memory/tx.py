"""A write transaction on the memory origin: it works on a copy of the state."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from ...text import words as text_words
from ..base import ClaimRow, NewRecord, RecordRow
from ..ledger import GENESIS, chain_hash
from .state import _all_subjects, _Claim, _exposed, _live, _live_subject_hashes, _Rec, _State, _subject_keys


class MemoryTx:
    """One open write transaction on a private copy of the state."""

    def __init__(self, state: _State, epoch: int):
        self._s = state
        self.epoch = epoch
        self.old_texts: dict[int, str] = {}
        """Each changed record's text as it was before this transaction (as on SQLiteTx)."""
        self._touched: set[str] = set()

    def _remember(self, rid: int | None) -> None:
        if rid is not None and rid in self._s.records:
            self.old_texts.setdefault(rid, self._s.records[rid].text)

    def _posting(self, word: str) -> set[int]:
        """The postings set of ``word``, copied on first write in this transaction."""
        s = self._s
        if word not in self._touched:
            s.postings[word] = set(s.postings.get(word, ()))
            self._touched.add(word)
        return s.postings.setdefault(word, set())  # a touched word emptied and deleted: a fresh set

    def _claim_row(self, c: _Claim) -> ClaimRow:
        return ClaimRow(
            c.id, c.record_id, self._s.records[c.record_id].key, c.subject, c.purpose, c.basis, c.expires_at
        )

    def _set_lineage(self, rid: int, tenant: str, sources: Sequence[str]) -> None:
        if sources:
            self._s.lineage[rid] = (tenant, tuple(dict.fromkeys(sources)))
        else:
            self._s.lineage.pop(rid, None)

    # -- records and claims ------------------------------------------------------------
    def upsert(self, tenant: str, rec: NewRecord, now: float) -> int:
        s = self._s
        rid = s.by_key.get((tenant, rec.key))
        sources = json.dumps(list(rec.sources))
        if rid is None:
            rid = s.next_record
            s.next_record += 1
            s.by_key[(tenant, rec.key)] = rid
            s.records[rid] = _Rec(rid, tenant, rec.key, rec.text, rec.metadata, sources, rec.embedding, now, now)
        else:
            self._remember(rid)
            old = s.records[rid]
            s.records[rid] = _Rec(
                rid, tenant, rec.key, rec.text, rec.metadata, sources, rec.embedding, old.created_at, now
            )
        self._set_lineage(rid, tenant, rec.sources)
        self.add_claim(rid, rec.subject, rec.purpose, rec.basis, rec.expires_at, now)
        return rid

    def add_claim(
        self, record_id: int, subject: str, purpose: str, basis: str, expires_at: float | None, now: float
    ) -> None:
        s = self._s
        if record_id not in s.records:
            raise KeyError(f"no record {record_id}")  # SQLite: FOREIGN KEY constraint failed
        scope = (record_id, subject, purpose, basis)
        cid = s.claim_scope.get(scope)
        if cid is None:
            cid = s.next_claim
            s.next_claim += 1
            s.claim_scope[scope] = cid
            s.claims_of[record_id] = s.claims_of.get(record_id, ()) + (cid,)
        # Restating a claim replaces its expiry: the newest statement of a scope wins.
        s.claims[cid] = _Claim(cid, record_id, subject, purpose, basis, expires_at, now)

    def upsert_many(
        self, tenant: str, recs: Sequence[NewRecord], now: float, known: Mapping[str, int] | None = None
    ) -> list[int]:
        return [self.upsert(tenant, rec, now) for rec in recs]

    def record_id(self, tenant: str, key: str) -> int | None:
        return self._s.by_key.get((tenant, key))

    def record_ids(self, tenant: str, keys: Sequence[str]) -> dict[str, int]:
        found = ((k, self._s.by_key.get((tenant, k))) for k in keys)
        return {k: rid for k, rid in found if rid is not None}

    def match_claims(
        self, tenant: str, subject: str | None, purpose: str | None, prefix: str | None, key: str | None
    ) -> list[ClaimRow]:
        s = self._s
        out = []
        for c in s.claims.values():
            r = s.records[c.record_id]
            if (
                r.tenant == tenant
                and (subject is None or c.subject == subject)
                and (purpose is None or c.purpose == purpose)
                and (prefix is None or r.key.startswith(prefix))
                and (key is None or r.key == key)
            ):
                out.append(self._claim_row(c))
        return out

    def due_claims(self, now: float) -> list[tuple[str, ClaimRow]]:
        s = self._s
        due = [
            (s.records[c.record_id].tenant, self._claim_row(c))
            for c in s.claims.values()
            if c.expires_at is not None and c.expires_at <= now
        ]
        return sorted(due, key=lambda tc: tc[0])

    def release(self, claim_ids: Sequence[int]) -> None:
        s = self._s
        for cid in claim_ids:
            c = s.claims.pop(cid, None)
            if c is None:
                continue
            del s.claim_scope[(c.record_id, c.subject, c.purpose, c.basis)]
            left = tuple(i for i in s.claims_of.get(c.record_id, ()) if i != cid)
            if left:
                s.claims_of[c.record_id] = left
            else:
                s.claims_of.pop(c.record_id, None)

    def remaining_claims(self, record_ids: Sequence[int]) -> dict[int, list[ClaimRow]]:
        """The claims left on each of ``record_ids`` (records with none are absent)."""
        s = self._s
        out: dict[int, list[ClaimRow]] = {}
        for rid in record_ids:
            cids = s.claims_of.get(rid)
            if cids:
                out[rid] = [self._claim_row(s.claims[c]) for c in cids]
        return out

    def content_of(self, record_ids: Sequence[int]) -> dict[int, tuple[str, str, bytes, str]]:
        """Key, text, embedding and metadata (JSON, as stored) of records about to be erased
        (for their fingerprints)."""
        s = self._s
        return {
            rid: (s.records[rid].key, s.records[rid].text, s.records[rid].embedding, s.records[rid].metadata)
            for rid in record_ids
            if rid in s.records
        }

    def save_evidence(
        self,
        handle: str,
        tenant_h: str,
        erased_ids: bytes,
        quarantined_ids: bytes,
        paths: dict[str, bytes],
        fingerprints: bytes,
        now: float,
    ) -> None:
        if handle in self._s.evidence:
            raise KeyError(f"evidence for {handle} exists")  # SQLite: UNIQUE constraint failed
        self._s.evidence[handle] = {
            "tenant_h": tenant_h,
            "epoch": self.epoch,
            "erased_ids": erased_ids,
            "quarantined_ids": quarantined_ids,
            "anchors": b"",
            "tokens": b"",
            "fingerprints": fingerprints,
            "created_at": now,
        }
        self.save_path_evidence(handle, paths)

    def erase_records(self, record_ids: Sequence[int]) -> None:
        """Delete the records and everything that hangs off them."""
        s = self._s
        for rid in record_ids:
            rec = s.records.pop(rid, None)
            if rec is None:
                continue
            self.old_texts.setdefault(rid, rec.text)
            del s.by_key[(rec.tenant, rec.key)]
            s.lineage.pop(rid, None)
            s.mentions.pop(rid, None)
            s.quarantine.pop(rid, None)
            s.reasons.pop(rid, None)
            self.release(list(s.claims_of.get(rid, ())))

    # -- derivations (lineage, mentions, quarantine) ------------------------------------
    def set_mentions(self, record_id: int, tenant: str, subjects: Iterable[str]) -> None:
        self._s.mentions.pop(record_id, None)
        self.add_mentions(record_id, tenant, subjects)

    def add_mentions(self, record_id: int, tenant: str, subjects: Iterable[str]) -> None:
        new = frozenset(subjects)
        if not new:
            return
        t, old = self._s.mentions.get(record_id, (tenant, frozenset()))
        self._s.mentions[record_id] = (t, old | new)

    def mentioning(self, tenant: str, subject: str) -> list[tuple[int, str]]:
        s = self._s
        return [
            (rid, s.records[rid].key)
            for rid, (t, subs) in sorted(s.mentions.items())
            if t == tenant and subject in subs and rid in s.records
        ]

    def derived_from(self, tenant: str, keys: Sequence[str]) -> list[tuple[int, str]]:
        s = self._s
        wanted = set(keys)
        return [
            (rid, s.records[rid].key)
            for rid, (t, srcs) in sorted(s.lineage.items())
            if t == tenant and rid in s.records and wanted.intersection(srcs)
        ]

    def replace_text(self, record_id: int, text: str, embedding: bytes, now: float) -> None:
        s = self._s
        old = s.records.get(record_id)
        if old is None:
            return
        self._remember(record_id)
        s.records[record_id] = _Rec(
            old.id, old.tenant, old.key, text, old.metadata, old.sources, embedding, old.created_at, now
        )

    def set_sources(self, record_id: int, tenant: str, sources: Sequence[str]) -> None:
        s = self._s
        old = s.records.get(record_id)
        if old is not None:
            s.records[record_id] = _Rec(
                old.id,
                old.tenant,
                old.key,
                old.text,
                old.metadata,
                json.dumps(list(sources)),
                old.embedding,
                old.created_at,
                old.updated_at,
            )
        self._set_lineage(record_id, tenant, sources)

    def forget_sources(self, tenant: str, keys: Sequence[str], marker: str) -> list[int]:
        """``marker`` in place of the erased ``keys`` in every record citing them."""
        gone = set(keys)
        rewritten = sorted({rid for rid, _key in self.derived_from(tenant, keys)})
        for rid in rewritten:
            old = json.loads(self._s.records[rid].sources)
            self.set_sources(rid, tenant, list(dict.fromkeys(marker if k in gone else k for k in old)))
        return rewritten

    def record(self, record_id: int) -> RecordRow | None:
        rec = self._s.records.get(record_id)
        return rec.row() if rec else None

    def quarantine(self, record_id: int, tenant: str, why: str, handle: str, now: float) -> None:
        self._s.quarantine.setdefault(record_id, (tenant, why, handle, now))

    def is_quarantined(self, record_id: int) -> bool:
        return record_id in self._s.quarantine

    def save_reason(self, record_id: int, tenant: str, reason_h: str, text: str, now: float) -> None:
        s = self._s
        s.reasons[record_id] = (*s.reasons.get(record_id, ()), (tenant, reason_h, text))

    def reasons_of(self, record_ids: Sequence[int]) -> list[str]:
        return [text for rid in record_ids for _t, _h, text in self._s.reasons.get(rid, ())]

    def lift_quarantine(self, record_id: int) -> bool:
        return self._s.quarantine.pop(record_id, None) is not None

    def subject_has_claims(self, tenant: str, subject: str) -> bool:
        s = self._s
        return any(c.subject == subject and s.records[c.record_id].tenant == tenant for c in s.claims.values())

    def drop_subject(self, tenant: str, subject: str) -> bool:
        """Erase a subject's registered identifiers and the mention rows that point at it."""
        s = self._s
        for rid, (t, subs) in list(s.mentions.items()):
            if t == tenant and subject in subs:
                left = subs - {subject}
                if left:
                    s.mentions[rid] = (t, left)
                else:
                    del s.mentions[rid]
        return s.subjects.pop((tenant, subject), None) is not None

    def policy(self, tenant: str) -> tuple[str, str | None]:
        return self._s.policies.get(tenant, ("quarantine", None))

    def set_policy(self, tenant: str, policy: str, reason: str | None) -> None:
        self._s.policies[tenant] = (policy, reason)

    def drop_policy(self, tenant: str) -> str | None:
        return self._s.policies.pop(tenant, ("quarantine", None))[1]

    def records_with_phrase(self, tenant: str, text: str, limit: int = 100000) -> list[tuple[int, str]]:
        """Records of the tenant whose words contain the words of ``text`` in order."""
        phrase = text_words(text)
        if not phrase:
            return []
        s = self._s
        # Candidates from the index as staged so far, plus records changed in this transaction.
        sets = [s.postings.get(w, set()) for w in dict.fromkeys(phrase)]
        candidates = set.intersection(*map(set, sets)) | set(self.old_texts)
        n = len(phrase)
        out = []
        for rid in sorted(candidates):
            rec = s.records.get(rid)
            if rec is None or rec.tenant != tenant:
                continue
            ws = text_words(rec.text)
            if any(ws[i : i + n] == phrase for i in range(len(ws) - n + 1)):
                out.append((rid, rec.text))
                if len(out) >= limit:
                    break
        return out

    # -- reads inside the transaction (backups, restores, release) ----------------------
    def subject_identifiers(self, tenant: str, subject: str) -> str | None:
        row = self._s.subjects.get((tenant, subject))
        return row[0] if row else None

    def all_subjects(self) -> list[tuple[str, str, str]]:
        return _all_subjects(self._s)

    def count_live_records(self, now: float) -> int:
        return len({c.record_id for c in self._s.claims.values() if _live(c, now)})

    def all_policies(self) -> list[tuple[str, str, str | None]]:
        return [(t, p, r) for t, (p, r) in self._s.policies.items()]

    def all_purposes(self) -> list[tuple[str, str]]:
        return list(self._s.purposes)

    def has_policy(self, tenant: str) -> bool:
        return tenant in self._s.policies

    def set_times(self, record_id: int, created_at: float, updated_at: float) -> None:
        old = self._s.records.get(record_id)
        if old is not None:
            self._s.records[record_id] = _Rec(
                old.id, old.tenant, old.key, old.text, old.metadata, old.sources, old.embedding, created_at, updated_at
            )

    def set_metadata(self, record_id: int, metadata: str) -> None:
        old = self._s.records.get(record_id)
        if old is not None:
            self._s.records[record_id] = _Rec(
                old.id,
                old.tenant,
                old.key,
                old.text,
                metadata,
                old.sources,
                old.embedding,
                old.created_at,
                old.updated_at,
            )

    def save_path_evidence(self, handle: str, evidence: dict[str, bytes]) -> None:
        kept = dict(self._s.path_evidence.get(handle, {}))
        for name, data in evidence.items():
            if name in kept:
                raise KeyError(f"path evidence {handle}/{name} exists")  # SQLite: UNIQUE constraint failed
            kept[name] = data
        self._s.path_evidence[handle] = kept

    def log_changes(self, tenant: str, puts: Iterable[int], drops: Iterable[int]) -> None:
        self._s.changes += [(self.epoch, i, tenant, "put") for i in puts]
        self._s.changes += [(self.epoch, i, tenant, "drop") for i in drops]

    def save_receipt(self, handle: str, kind: str, tenant_h: str, body: dict, now: float) -> None:
        if handle in self._s.receipts:
            raise KeyError(f"receipt {handle} exists")  # SQLite: UNIQUE constraint failed
        self._s.receipts[handle] = (self.epoch, kind, tenant_h, now, json.dumps(body, sort_keys=True))

    def append_ledger(self, kind: str, handle: str | None, body: dict, now: float) -> tuple[int, str]:
        led = self._s.ledger
        seq, prev = (led[-1]["seq"] + 1, led[-1]["hash"]) if led else (1, GENESIS)
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        digest = chain_hash(prev, seq, now, kind, handle, text)
        led.append({"seq": seq, "at": now, "kind": kind, "handle": handle, "body": text, "prev": prev, "hash": digest})
        return seq, digest

    def set_tenant_name(self, tenant: str, name: str) -> None:
        self._s.tenant_names.setdefault(tenant, name)

    def drop_tenant_name(self, tenant: str) -> str | None:
        """Delete the tenant's name if nothing personal of the tenant is left (no record,
        registered subject or data key); returns the name deleted."""
        s = self._s
        if any(r.tenant == tenant for r in s.records.values()) or any(
            t == tenant for t, _subj in [*s.subjects, *s.subject_keys]
        ):
            return None
        return s.tenant_names.pop(tenant, None)

    def subjects_of(self, tenant: str) -> list[str]:
        """Every subject registered or holding a claim in the tenant."""
        s = self._s
        found = {subj for t, subj in s.subjects if t == tenant}
        found |= {c.subject for c in s.claims.values() if s.records[c.record_id].tenant == tenant}
        return sorted(found)

    def register_purpose(self, tenant: str, purpose: str) -> None:
        self._s.purposes.setdefault((tenant, purpose), None)

    def set_subject(self, tenant: str, subject: str, identifiers: str, now: float) -> None:
        self._s.subjects[(tenant, subject)] = (identifiers, now)

    # -- per-subject data keys (crypto-shredding of backups) -----------------------------
    def ensure_subject_keys(
        self, tenant: str, subjects: Iterable[str], now: float, subject_h: Callable[[str], str]
    ) -> None:
        keys = self._s.subject_keys
        for subj in sorted(set(subjects)):
            if (tenant, subj) not in keys:
                keys[(tenant, subj)] = (os.urandom(16), os.urandom(32), subject_h(subj), now)

    def destroy_subject_keys(self, tenant: str, subjects: Iterable[str]) -> list[tuple[str, bytes]]:
        """Delete the data key of every subject in ``subjects`` left with no claim in the tenant.
        Returns (subject, key) of each key destroyed."""
        gone = []
        for subj in sorted(set(subjects)):
            if not self.subject_has_claims(tenant, subj):
                row = self._s.subject_keys.pop((tenant, subj), None)
                if row is not None:
                    gone.append((subj, row[1]))
        return gone

    def subject_keys(self) -> list[tuple[str, str, bytes, bytes]]:
        return _subject_keys(self._s)

    def live_subject_hashes(self, tenant: str, hashes: Iterable[str]) -> set[str]:
        return _live_subject_hashes(self._s, tenant, hashes)

    def claim_subjects(self, now: float) -> list[tuple[str, str]]:
        s = self._s
        return list(
            dict.fromkeys((s.records[c.record_id].tenant, c.subject) for c in s.claims.values() if _live(c, now))
        )

    def backup_rows(self, now: float) -> Iterator[tuple[tuple, list[tuple]]]:
        """Each record with a live claim, in id order, with its live claims
        (subject, purpose, basis, expires_at) and its quarantine (why, handle, since) or None."""
        s = self._s
        for rid in sorted(s.records):
            claims = [
                (c.subject, c.purpose, c.basis, c.expires_at)
                for c in (s.claims[i] for i in sorted(s.claims_of.get(rid, ())))
                if _live(c, now)
            ]
            if not claims:
                continue
            r = s.records[rid]
            q = s.quarantine.get(rid)
            yield (
                (
                    (r.id, r.tenant, r.key, r.text, r.metadata, r.sources, r.embedding, r.created_at, r.updated_at)
                    + ((q[1], q[2], q[3]) if q else (None, None, None))
                ),
                claims,
            )

    def backup_floor(self) -> int | None:
        return min((b[2] for b in self._s.backups.values()), default=None)

    def record_backup(
        self, backup_id: str, path_h: str, ledger_seq: int, now: float, records: int, subjects: int
    ) -> None:
        if backup_id in self._s.backups:
            raise KeyError(f"backup {backup_id} exists")
        self._s.backups[backup_id] = (path_h, self.epoch, ledger_seq, now, records, subjects)

    def note_exposure(self, tenant: str, pairs: Iterable[tuple[str, str]]) -> None:
        for k, subj in pairs:
            self._s.exposure.setdefault((tenant, k, subj), None)

    def drop_exposure(self, tenant: str, subject_hashes: Iterable[str]) -> None:
        gone = set(subject_hashes)
        for t, k, subj in list(self._s.exposure):
            if t == tenant and subj in gone:
                del self._s.exposure[(t, k, subj)]

    def exposed(self, tenant: str, key_hashes: Sequence[str]) -> set[str]:
        return _exposed(self._s, tenant, key_hashes)

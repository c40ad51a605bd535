"""The in-memory reference origin: plain dicts and a small word index, nothing on disk.

In the manner of ZODB's ``MappingStorage``: the whole state is one :class:`_State` object.
A transaction works on a copy of it (the top-level containers are copied, the values in
them are never mutated in place) and the copy is swapped in by one reference assignment at
commit, so an exception leaves nothing behind and a reader sees either the old or the new
state, never a half-applied one. One writer at a time, under :attr:`MemoryOrigin.write_lock`.

The word index (:class:`MemoryText`, at ``origin.text``) holds postings and per-record term
counts over :func:`efface.text.words`, ranks by BM25, and is staged inside the transaction
like the SQLite FTS5 index. Nothing of it survives :meth:`MemoryOrigin.close`: there are no
bytes to checkpoint, purge or scan, so the origin has no ``physical`` capability and its
erased epoch is its current epoch. It is the reference the contract tests run beside SQLite.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

from ..text import words as text_words
from .base import ClaimRow, NewRecord, RecordRow
from .ledger import GENESIS, chain_hash

BM25_K1 = 1.2
BM25_B = 0.75


@dataclass(frozen=True)
class _Rec:
    id: int
    tenant: str
    key: str
    text: str
    metadata: str
    sources: str
    embedding: bytes
    created_at: float
    updated_at: float

    def row(self) -> RecordRow:
        return RecordRow(self.id, self.tenant, self.key, self.text, self.metadata, self.sources, self.updated_at)


@dataclass(frozen=True)
class _Claim:
    id: int
    record_id: int
    subject: str
    purpose: str
    basis: str
    expires_at: float | None
    created_at: float


def _live(c: _Claim, now: float) -> bool:
    return c.expires_at is None or c.expires_at > now


class _State:
    """Everything the origin holds. Containers are copied per transaction; values are immutable
    (frozen rows, tuples, frozensets, strings), except the postings' inner sets, which the
    transaction copies on first touch (:meth:`MemoryTx._posting`)."""

    def __init__(self) -> None:
        self.epoch = 0
        self.next_record = 1
        self.next_claim = 1
        self.meta: dict[str, str] = {}
        self.records: dict[int, _Rec] = {}
        self.by_key: dict[tuple[str, str], int] = {}
        self.claims: dict[int, _Claim] = {}
        self.claim_scope: dict[tuple[int, str, str, str], int] = {}
        self.claims_of: dict[int, tuple[int, ...]] = {}
        self.lineage: dict[int, tuple[str, tuple[str, ...]]] = {}  # rid -> (tenant, source keys)
        self.subjects: dict[tuple[str, str], tuple[str, float]] = {}  # -> (identifiers, updated_at)
        self.mentions: dict[int, tuple[str, frozenset[str]]] = {}  # rid -> (tenant, subjects)
        self.quarantine: dict[int, tuple[str, str, str, float]] = {}  # rid -> (tenant, why, handle, since)
        self.policies: dict[str, tuple[str, str | None]] = {}
        self.purposes: dict[tuple[str, str], None] = {}
        self.changes: list[tuple[int, int, str, str]] = []
        self.receipts: dict[str, tuple[int, str, str, float, str]] = {}  # -> (epoch, kind, tenant_h, at, body)
        self.evidence: dict[str, dict[str, Any]] = {}
        self.path_evidence: dict[str, dict[str, bytes]] = {}
        self.ledger: list[dict[str, Any]] = []
        self.subject_keys: dict[tuple[str, str], tuple[bytes, bytes, str, float]] = {}
        self.exposure: dict[tuple[str, str, str], None] = {}
        self.backups: dict[str, tuple[str, int, int, float, int, int]] = {}
        # the word index
        self.doc_terms: dict[int, Counter[str]] = {}
        self.doc_len_total = 0
        self.postings: dict[str, set[int]] = {}

    def clone(self) -> "_State":
        new = copy.copy(self)
        for name, value in vars(self).items():
            if isinstance(value, (dict, list)):
                setattr(new, name, copy.copy(value))
        return new


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
        return ClaimRow(c.id, c.record_id, self._s.records[c.record_id].key, c.subject, c.purpose, c.basis,
                        c.expires_at)

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
            s.records[rid] = _Rec(rid, tenant, rec.key, rec.text, rec.metadata, sources, rec.embedding,
                                  old.created_at, now)
        self._set_lineage(rid, tenant, rec.sources)
        self.add_claim(rid, rec.subject, rec.purpose, rec.basis, rec.expires_at, now)
        return rid

    def add_claim(self, record_id: int, subject: str, purpose: str, basis: str,
                  expires_at: float | None, now: float) -> None:
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

    def record_id(self, tenant: str, key: str) -> int | None:
        return self._s.by_key.get((tenant, key))

    def match_claims(self, tenant: str, subject: str | None, purpose: str | None,
                     prefix: str | None, key: str | None) -> list[ClaimRow]:
        s = self._s
        out = []
        for c in s.claims.values():
            r = s.records[c.record_id]
            if (r.tenant == tenant and (subject is None or c.subject == subject)
                    and (purpose is None or c.purpose == purpose)
                    and (prefix is None or r.key.startswith(prefix)) and (key is None or r.key == key)):
                out.append(self._claim_row(c))
        return out

    def due_claims(self, now: float) -> list[tuple[str, ClaimRow]]:
        s = self._s
        due = [(s.records[c.record_id].tenant, self._claim_row(c)) for c in s.claims.values()
               if c.expires_at is not None and c.expires_at <= now]
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

    def content_of(self, record_ids: Sequence[int]) -> dict[int, tuple[str, str, bytes]]:
        """Key, text and embedding of records about to be erased (for their fingerprints)."""
        s = self._s
        return {rid: (s.records[rid].key, s.records[rid].text, s.records[rid].embedding)
                for rid in record_ids if rid in s.records}

    def save_evidence(self, handle: str, tenant_h: str, erased_ids: bytes, quarantined_ids: bytes,
                      paths: dict[str, bytes], fingerprints: bytes, now: float) -> None:
        if handle in self._s.evidence:
            raise KeyError(f"evidence for {handle} exists")  # SQLite: UNIQUE constraint failed
        self._s.evidence[handle] = {
            "tenant_h": tenant_h, "epoch": self.epoch, "erased_ids": erased_ids, "quarantined_ids": quarantined_ids,
            "anchors": b"", "tokens": b"", "fingerprints": fingerprints, "created_at": now}
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
        return [(rid, s.records[rid].key) for rid, (t, subs) in sorted(s.mentions.items())
                if t == tenant and subject in subs and rid in s.records]

    def derived_from(self, tenant: str, keys: Sequence[str]) -> list[tuple[int, str]]:
        s = self._s
        wanted = set(keys)
        return [(rid, s.records[rid].key) for rid, (t, srcs) in sorted(s.lineage.items())
                if t == tenant and rid in s.records and wanted.intersection(srcs)]

    def replace_text(self, record_id: int, text: str, embedding: bytes, now: float) -> None:
        s = self._s
        old = s.records.get(record_id)
        if old is None:
            return
        self._remember(record_id)
        s.records[record_id] = _Rec(old.id, old.tenant, old.key, text, old.metadata, old.sources, embedding,
                                    old.created_at, now)

    def set_sources(self, record_id: int, tenant: str, sources: Sequence[str]) -> None:
        s = self._s
        old = s.records.get(record_id)
        if old is not None:
            s.records[record_id] = _Rec(old.id, old.tenant, old.key, old.text, old.metadata,
                                        json.dumps(list(sources)), old.embedding, old.created_at, old.updated_at)
        self._set_lineage(record_id, tenant, sources)

    def record(self, record_id: int) -> RecordRow | None:
        rec = self._s.records.get(record_id)
        return rec.row() if rec else None

    def quarantine(self, record_id: int, tenant: str, why: str, handle: str, now: float) -> None:
        self._s.quarantine.setdefault(record_id, (tenant, why, handle, now))

    def is_quarantined(self, record_id: int) -> bool:
        return record_id in self._s.quarantine

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
            if any(ws[i:i + n] == phrase for i in range(len(ws) - n + 1)):
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
            self._s.records[record_id] = _Rec(old.id, old.tenant, old.key, old.text, old.metadata, old.sources,
                                              old.embedding, created_at, updated_at)

    def set_metadata(self, record_id: int, metadata: str) -> None:
        old = self._s.records.get(record_id)
        if old is not None:
            self._s.records[record_id] = _Rec(old.id, old.tenant, old.key, old.text, metadata, old.sources,
                                              old.embedding, old.created_at, old.updated_at)

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
        led.append({"seq": seq, "at": now, "kind": kind, "handle": handle, "body": text, "prev": prev,
                    "hash": digest})
        return seq, digest

    def register_purpose(self, tenant: str, purpose: str) -> None:
        self._s.purposes.setdefault((tenant, purpose), None)

    def set_subject(self, tenant: str, subject: str, identifiers: str, now: float) -> None:
        self._s.subjects[(tenant, subject)] = (identifiers, now)

    # -- per-subject data keys (crypto-shredding of backups) -----------------------------
    def ensure_subject_keys(self, tenant: str, subjects: Iterable[str], now: float,
                            subject_h: Callable[[str], str]) -> None:
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
        return list(dict.fromkeys((s.records[c.record_id].tenant, c.subject)
                                  for c in s.claims.values() if _live(c, now)))

    def backup_rows(self, now: float) -> Iterator[tuple[tuple, list[tuple]]]:
        """Each record with a live claim, in id order, with its live claims
        (subject, purpose, basis, expires_at) and its quarantine (why, handle, since) or None."""
        s = self._s
        for rid in sorted(s.records):
            claims = [(c.subject, c.purpose, c.basis, c.expires_at)
                      for c in (s.claims[i] for i in sorted(s.claims_of.get(rid, ()))) if _live(c, now)]
            if not claims:
                continue
            r = s.records[rid]
            q = s.quarantine.get(rid)
            yield ((r.id, r.tenant, r.key, r.text, r.metadata, r.sources, r.embedding, r.created_at, r.updated_at)
                   + ((q[1], q[2], q[3]) if q else (None, None, None))), claims

    def backup_floor(self) -> int | None:
        return min((b[2] for b in self._s.backups.values()), default=None)

    def record_backup(self, backup_id: str, path_h: str, ledger_seq: int, now: float,
                      records: int, subjects: int) -> None:
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


def _all_subjects(s: _State) -> list[tuple[str, str, str]]:
    return [(t, subj, ident) for (t, subj), (ident, _at) in s.subjects.items()]


def _subject_keys(s: _State) -> list[tuple[str, str, bytes, bytes]]:
    return [(t, subj, kid, key) for (t, subj), (kid, key, _h, _at) in s.subject_keys.items()]


def _live_subject_hashes(s: _State, tenant: str, hashes: Iterable[str]) -> set[str]:
    wanted = set(hashes)
    return {h for (t, _subj), (_kid, _key, h, _at) in s.subject_keys.items() if t == tenant and h in wanted}


def _exposed(s: _State, tenant: str, key_hashes: Sequence[str]) -> set[str]:
    wanted = set(key_hashes)
    return {subj for t, k, subj in s.exposure if t == tenant and k in wanted}


class MemoryOrigin:
    """The origin in this process's memory (see the module docstring)."""

    def __init__(self) -> None:
        self.write_lock = threading.RLock()
        """Held for every transaction and every maintenance write."""
        self._state = _State()
        self._pending: _State | None = None
        """The open transaction's state (only ever set with :attr:`write_lock` held)."""
        self._local = threading.local()
        self._closed = False
        self.text = MemoryText(self)
        """The word index: see :class:`MemoryText`."""

    # -- states ---------------------------------------------------------------------------
    def _st(self) -> _State:
        """The state this thread reads: its snapshot's, or the newest committed one."""
        pinned = getattr(self._local, "state", None)
        if pinned is not None:
            return pinned
        if self._closed:
            raise RuntimeError("the origin is closed")
        return self._state

    @contextlib.contextmanager
    def snapshot(self) -> Iterator["MemoryOrigin"]:
        """Every read made in this thread inside the block sees one committed state."""
        outer = getattr(self._local, "state", None)
        if outer is None:
            self._local.state = self._st()
        try:
            yield self
        finally:
            if outer is None:
                self._local.state = None

    @contextlib.contextmanager
    def transaction(self, kind: str, tenant: str | None, now: float) -> Iterator[MemoryTx]:
        """One write transaction on a copy of the state; the epoch is assigned in it. The copy
        is swapped in on a clean exit; on an exception it is dropped."""
        with self.write_lock:
            if self._closed:
                raise RuntimeError("the origin is closed")
            state = self._state.clone()
            state.epoch += 1
            tx = MemoryTx(state, state.epoch)
            self._pending = state
            try:
                yield tx
            finally:
                self._pending = None
            self._state = state

    def _replace(self, change: Callable[[_State], None]) -> None:
        """A maintenance write (no epoch): ``change`` edits a copy, swapped in whole. Made by the
        thread inside an open transaction (the lock is reentrant), it joins that transaction,
        as it does on SQLite's writer connection."""
        with self.write_lock:
            if self._pending is not None:
                change(self._pending)
                return
            state = self._state.clone()
            change(state)
            self._state = state

    def meta_get(self, key: str) -> str | None:
        return self._st().meta.get(key)

    def meta_set(self, key: str, value: str) -> None:
        self._replace(lambda s: s.meta.__setitem__(key, value))

    def prune_changes(self, upto: int) -> None:
        def change(s: _State) -> None:
            s.changes = [c for c in s.changes if c[0] > upto]

        self._replace(change)

    def record_verification(self, handle: str, body: dict, receipt_level: str, discard: bool,
                            now: float) -> tuple[int, str]:
        """Append a verification to the ledger, raise the receipt's level, and (once erased is
        proven) drop the fingerprints and the word hashes: all or none."""
        with self.write_lock:
            state = self._state.clone()
            tx = MemoryTx(state, state.epoch)
            seq, digest = tx.append_ledger("verify", handle, body, now)
            row = state.receipts.get(handle)
            if row is not None:
                stored = json.loads(row[4])
                stored["level"] = receipt_level
                state.receipts[handle] = row[:4] + (json.dumps(stored, sort_keys=True),)
            if discard:
                ev = state.evidence.get(handle)
                if ev is not None:
                    state.evidence[handle] = {**ev, "fingerprints": None, "tokens": b"[]"}
                kept = state.path_evidence.get(handle)
                if kept is not None and "fts" in kept:
                    state.path_evidence[handle] = {k: v for k, v in kept.items() if k != "fts"}
            self._state = state
        return seq, digest

    def path_evidence(self, handle: str) -> dict[str, bytes]:
        """What each read path kept at forget time for its probe (see paths.base.ReadPath)."""
        return dict(self._st().path_evidence.get(handle, {}))

    def erased_epoch(self) -> int:
        """Nothing is on disk: an erasure's bytes go with the state it was committed over."""
        return self.current_epoch()

    def live_subject_hashes(self, tenant: str, hashes: Iterable[str]) -> set[str]:
        return _live_subject_hashes(self._st(), tenant, hashes)

    def exposed(self, tenant: str, key_hashes: Sequence[str]) -> set[str]:
        return _exposed(self._st(), tenant, key_hashes)

    def close(self) -> None:
        with self.write_lock:
            self._closed = True
            self._state = _State()  # drop every reference the origin holds to the content

    # -- reads ---------------------------------------------------------------------------
    def read(self, tenant: str, key: str, purpose: str, now: float) -> tuple[RecordRow, list[ClaimRow]] | None:
        s = self._st()
        rid = s.by_key.get((tenant, key))
        if rid is None or rid in s.quarantine:
            return None
        rec = s.records[rid]
        claims = [ClaimRow(c.id, rid, rec.key, c.subject, c.purpose, c.basis, c.expires_at)
                  for c in (s.claims[i] for i in s.claims_of.get(rid, ())) if c.purpose == purpose and _live(c, now)]
        return (rec.row(), claims) if claims else None

    def live_ids(self, ids: Sequence[int], tenant: str, purpose: str, subject: str | None,
                 now: float) -> set[int]:
        """The ids among ``ids`` that are live for this tenant and purpose (and subject)."""
        return _live_ids(self._st(), ids, tenant, purpose, subject, now)

    def records_by_id(self, ids: Sequence[int]) -> dict[int, RecordRow]:
        s = self._st()
        return {i: s.records[i].row() for i in ids if i in s.records}

    def all_subjects(self) -> list[tuple[str, str, str]]:
        return _all_subjects(self._st())

    def quarantined(self, tenant: str) -> list[tuple[int, str, str, str, float, str]]:
        """(record id, key, why, handle, since, sources JSON) of every quarantined record."""
        s = self._st()
        rows = [(rid, s.records[rid].key, why, handle, since, s.records[rid].sources)
                for rid, (t, why, handle, since) in s.quarantine.items() if t == tenant and rid in s.records]
        return sorted(rows, key=lambda r: r[1])

    def live_keys(self, tenant: str, keys: Sequence[str]) -> set[str]:
        s = self._st()
        return {k for k in keys if (tenant, k) in s.by_key}

    def purposes(self, tenant: str) -> list[str]:
        return sorted(p for t, p in self._st().purposes if t == tenant)

    def changes_since(self, epoch: int, upto: int | None = None) -> list[tuple[int, int, str, str]]:
        return [c for c in self._st().changes if c[0] > epoch and (upto is None or c[0] <= upto)]

    def latest_put_epoch(self, after: int) -> int | None:
        return max((c[0] for c in self._st().changes if c[0] > after and c[3] == "put"), default=None)

    def due_tenant(self, now: float) -> str | None:
        """A tenant with a claim whose TTL has passed, if any (the one that expired first)."""
        s = self._st()
        due = [(c.expires_at, c.id, c.record_id) for c in s.claims.values()
               if c.expires_at is not None and c.expires_at <= now]
        return s.records[min(due)[2]].tenant if due else None

    def pending_drops(self, applied: int) -> int:
        return sum(1 for c in self._st().changes if c[3] == "drop" and c[0] > applied)

    def embeddings(self, ids: Sequence[int]) -> dict[int, bytes]:
        s = self._st()
        return {i: s.records[i].embedding for i in ids if i in s.records}

    def records_of_tenant(self, tenant: str) -> Iterable[tuple[int, bytes]]:
        s = self._st()
        return [(rid, r.embedding) for rid, r in sorted(s.records.items()) if r.tenant == tenant]

    def tenants(self) -> list[str]:
        return list(dict.fromkeys(r.tenant for r in self._st().records.values()))

    def current_epoch(self) -> int:
        return self._st().epoch

    def receipt(self, handle: str) -> dict[str, Any] | None:
        row = self._st().receipts.get(handle)
        if row is None:
            return None
        epoch, kind, tenant_h, at, body = row
        return {"handle": handle, "epoch": epoch, "kind": kind, "tenant_h": tenant_h, "created_at": at,
                "body": json.loads(body)}

    def receipts(self, tenant_h: str | None = None) -> list[dict[str, Any]]:
        s = self._st()
        handles = sorted((row[0], n, h) for n, (h, row) in enumerate(s.receipts.items())
                         if not tenant_h or row[2] == tenant_h)
        out = []
        for _epoch, _n, h in handles:
            epoch, kind, th, at, body = s.receipts[h]
            out.append({"handle": h, "epoch": epoch, "kind": kind, "tenant_h": th, "created_at": at,
                        "body": json.loads(body)})
        return out

    def ledger(self) -> list[dict[str, Any]]:
        return [dict(e) for e in self._st().ledger]

    # -- evidence for verify -------------------------------------------------------------
    def evidence(self, handle: str) -> dict[str, Any] | None:
        ev = self._st().evidence.get(handle)
        return dict(ev) if ev is not None else None

    def erased_proof(self, handle: str) -> dict[str, Any] | None:
        """The newest verification of ``handle`` that proved ``erased``."""
        for e in reversed(self._st().ledger):
            if e["handle"] == handle and e["kind"] == "verify" and json.loads(e["body"]).get("level") == "erased":
                return dict(e)
        return None

    def ack_times(self, after: int, upto: int) -> list[float]:
        """Acknowledgement times of the erasures with epochs in (after, upto]."""
        return [row[3] for row in self._st().receipts.values() if after < row[0] <= upto]

    def tenant_names(self) -> list[str]:
        """Every tenant that ever wrote (its purposes outlive its records)."""
        return list(dict.fromkeys(t for t, _p in self._st().purposes))

    def residual_rows(self, ids: Sequence[int]) -> dict[str, int]:
        """Rows that still name any of these record ids, per table."""
        s = self._st()
        wanted = set(ids)
        counts = {
            "records": sum(1 for i in wanted if i in s.records),
            "claims": sum(len(s.claims_of.get(i, ())) for i in wanted),
            "lineage": sum(len(s.lineage[i][1]) for i in wanted if i in s.lineage),
            "mentions": sum(len(s.mentions[i][1]) for i in wanted if i in s.mentions),
            "quarantine": sum(1 for i in wanted if i in s.quarantine),
        }
        return {t: n for t, n in counts.items() if n}

    def still_quarantined(self, ids: Sequence[int]) -> int:
        s = self._st()
        return sum(1 for i in set(ids) if i in s.quarantine)

    def count_records(self) -> int:
        return len(self._st().records)

    def subject_keys(self) -> list[tuple[str, str, bytes, bytes]]:
        """(tenant, subject, kid, key) of every live data key (restore opens backups with them)."""
        return _subject_keys(self._st())


def _live_ids(s: _State, ids: Iterable[int], tenant: str, purpose: str, subject: str | None,
              now: float) -> set[int]:
    out = set()
    for rid in ids:
        rec = s.records.get(rid)
        if rec is None or rec.tenant != tenant or rid in s.quarantine:
            continue
        for cid in s.claims_of.get(rid, ()):
            c = s.claims[cid]
            if c.purpose == purpose and _live(c, now) and (subject is None or c.subject == subject):
                out.add(rid)
                break
    return out


class MemoryText:
    """The memory origin's word index: postings and term counts over :func:`efface.text.words`,
    staged inside the transaction, ranked by BM25 (OR semantics)."""

    def __init__(self, origin: MemoryOrigin):
        self._o = origin

    def stage(self, tx: MemoryTx, puts: Sequence[int], drops: Sequence[int], texts: dict[int, str]) -> None:
        s = tx._s
        for rid in dict.fromkeys((*puts, *drops)):
            old = s.doc_terms.pop(rid, None)
            if old is None:
                continue
            s.doc_len_total -= sum(old.values())
            for w in old:
                posting = tx._posting(w)
                posting.discard(rid)
                if not posting:
                    del s.postings[w]
        for rid in puts:
            terms = Counter(text_words(texts[rid]))
            s.doc_terms[rid] = terms
            s.doc_len_total += sum(terms.values())
            for w in terms:
                tx._posting(w).add(rid)

    def doc_count(self) -> int:
        return len(self._o._st().doc_terms)

    def document_frequency(self, words: Sequence[str]) -> dict[str, int]:
        s = self._o._st()
        return {w: len(s.postings[w]) for w in words if w in s.postings}

    def _matches(self, s: _State, words: Sequence[str]) -> set[int]:
        out: set[int] = set()
        for w in dict.fromkeys(words):
            out |= s.postings.get(w, set())
        return out

    def search(self, words: Sequence[str], tenant: str, purpose: str, subject: str | None, now: float,
               depth: int, limit: int) -> list[int]:
        """Rank the ``depth`` best matches of any of ``words`` by BM25, keep those live for the
        tenant and purpose (and subject), best first, at most ``limit``."""
        s = self._o._st()
        found = self._matches(s, words)
        if not found:
            return []
        n = len(s.doc_terms)
        avg = s.doc_len_total / n if n else 1.0
        idf = {}
        for w in dict.fromkeys(words):
            df = len(s.postings.get(w, ()))
            if df:
                idf[w] = math.log((n - df + 0.5) / (df + 0.5) + 1.0)
        scores = {}
        for rid in found:
            terms = s.doc_terms[rid]
            length = sum(terms.values())
            score = 0.0
            for w, weight in idf.items():
                tf = terms.get(w, 0)
                if tf:
                    score += weight * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * length / avg))
            scores[rid] = score
        ranked = sorted(scores, key=lambda r: (-scores[r], r))[:depth]
        live = _live_ids(s, ranked, tenant, purpose, subject, now)
        return [r for r in ranked if r in live][:limit]

    def count_matches(self, words: Sequence[str], cap: int) -> int:
        """How many rows match any of ``words``, counting at most ``cap``."""
        return min(cap, len(self._matches(self._o._st(), words)))

    def terms(self) -> Iterable[str]:
        """Every word the index holds."""
        return list(self._o._st().postings)

    def matching_ids(self, words: Sequence[str], ids: Sequence[int]) -> list[int]:
        """Which of ``ids`` the index still matches for any of ``words``."""
        found = self._matches(self._o._st(), words)
        return [i for i in ids if i in found]

    def purge(self) -> bool:
        """Nothing to purge: a deleted entry is gone from the postings at commit."""
        return False

    def purged_epoch(self) -> int:
        return self._o.current_epoch()

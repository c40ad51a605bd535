"""The memory origin's state: one object, copied per transaction, swapped in at commit."""

from __future__ import annotations

import copy
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..base import RecordRow

BM25_K1 = 1.2
BM25_B = 0.75


def bm25_ceiling(n: int, dfs: Iterable[int]) -> float:
    """The most BM25 any record could score for a query whose distinct words are in ``dfs``
    records each, in an index of ``n`` (the idf, the term frequency saturated at k1 + 1). A df
    above ``n`` (counted in another look at the index, beside a writer) means the index had at
    least df records then, and that is the size used for it."""
    return sum((BM25_K1 + 1) * math.log((max(n, df) - df + 0.5) / (df + 0.5) + 1.0) for df in dfs)


def bm25_idf(n: int, df: int) -> float:
    """BM25's idf of a word held by ``df`` of ``n`` records (the ``+ 1`` keeps it positive)."""
    return math.log((n - df + 0.5) / (df + 0.5) + 1.0)


def bm25_term(idf: Any, tf: Any, length: Any, avg: float) -> Any:
    """One word's BM25 in a record holding it ``tf`` times among ``length`` words (``avg``:
    the index's mean length), of idf ``idf``: floats, or numpy arrays of them (the PostgreSQL
    origin's postings score a query's candidates at once, :mod:`efface.origin.postgres.postings`);
    the same operations in the same order either way, so the same scores to the last bit."""
    return idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * length / avg))


def bm25_scores(
    found: Iterable[int],
    doc_terms: dict[int, Counter],
    postings: dict[str, set[int]],
    doc_len_total: int,
    words: Sequence[str],
) -> dict[int, float]:
    """BM25 (k1 1.2, b 0.75) of each of ``found`` over ``words``, in an index held as postings
    and each document's term counts (the memory origin's, and the PostgreSQL origin's in this
    process)."""
    n = len(doc_terms)
    avg = doc_len_total / n if n else 1.0
    idf = {}
    for w in dict.fromkeys(words):
        df = len(postings.get(w, ()))
        if df:
            idf[w] = bm25_idf(n, df)
    scores = {}
    for rid in found:
        terms = doc_terms[rid]
        length = sum(terms.values())
        score = 0.0
        for w, weight in idf.items():
            tf = terms.get(w, 0)
            if tf:
                score += bm25_term(weight, tf, length, avg)
        scores[rid] = score
    return scores


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
        self.tenant_names: dict[str, str] = {}  # tenant id -> name, while the tenant has anything left
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
        self.reasons: dict[int, tuple[tuple[str, str, str], ...]] = {}  # rid -> ((tenant, reason_h, text), ...)
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

    def clone(self) -> _State:
        new = copy.copy(self)
        for name, value in vars(self).items():
            if isinstance(value, (dict, list)):
                setattr(new, name, copy.copy(value))
        return new


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


def _live_ids(s: _State, ids: Iterable[int], tenant: str, purpose: str, subject: str | None, now: float) -> set[int]:
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

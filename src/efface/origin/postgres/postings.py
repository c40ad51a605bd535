"""The PostgreSQL origin's word index in this process's memory, as numpy arrays.

:class:`~.text.PgText` keeps what it has read and unsealed here: for each term, the records
holding it (an array of ids, sorted, and how often each holds it), and for each record its
length, its tenant and the epoch its text was put at. A query finds the records its words
hold (the union of their arrays), keeps those of the tenant (and, inside a snapshot, those no
newer than it), and scores them over every query word at once: for each word, its counts in
the candidates are found by binary search in its array, and BM25 is computed over the whole
candidate array with the shared formula (:func:`efface.origin.memory.state.bm25_term`), so
the scores are those of the memory origin's :func:`~efface.origin.memory.state.bm25_scores`
over the same postings, to the last bit. Held per record in Python dicts, the same query cost
5 ms at 10k records and grew with the store (the candidates a common word finds). Once
:mod:`efface.compiled` has its loops (compiled in the background when the index holds
:data:`COMPILE_RECORDS` records), each word's counts are walked against the candidates in one
compiled pass (:data:`~efface.sorted_ids.bm25_walk`, in ``bm25_term``'s order of operations)
instead of numpy's gather, mask and formula: at 100k records, 0.16 ms of a recall's CPU
instead of 0.76 (the query words find about 6,700 records), with the same float operations
in the same order, so the same scores to the last bit.

Records added since a term's array was last rebuilt wait in a small tail (:data:`TAIL`), merged
into the array past that size; a removed record leaves every array it is in at once, with its
length, tenant and epoch (a forget's words do not wait in memory for a later pass).

Not thread-safe: :class:`~.text.PgText` holds its lock around every call.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from ... import compiled
from ...sorted_ids import LEFT_TO_RIGHT, bm25_walk, by_id, found, gather, inserted, union, union_bm25
from ..memory.state import BM25_B, BM25_K1, bm25_idf, bm25_term

TAIL = 4096
"""Records added to a term since its array was rebuilt, at most: past this the tail is merged in."""
ABSENT = -1
"""The tenant code of a record not held."""
COMPILE_RECORDS = 20_000
"""Records held at which a query has the compiled loops made (:func:`efface.compiled.warm_now`,
on a thread: recall never waits for them); below it numpy's scoring costs well under a
millisecond, less than loading numba."""


class _Term:
    """One term's postings: ids (sorted) with counts, and a tail of ids added since (a record
    is in one or the other)."""

    __slots__ = ("ids", "tail", "tf", "view")

    def __init__(self, ids: np.ndarray, tf: np.ndarray) -> None:
        self.ids, self.tf = ids, tf
        self.tail: dict[int, int] = {}
        self.view: tuple[np.ndarray, np.ndarray] | None = None

    def count(self) -> int:
        return len(self.ids) + len(self.tail)

    def merged(self) -> tuple[np.ndarray, np.ndarray]:
        """Ids (sorted) and counts, the tail in."""
        if not self.tail:
            return self.ids, self.tf
        if self.view is None:
            ids = np.fromiter(self.tail, np.int64, len(self.tail))
            tf = np.fromiter(self.tail.values(), np.float64, len(self.tail))
            order = np.argsort(ids)
            self.view = inserted(self.ids, self.tf, ids[order], tf[order])
        return self.view

    def add(self, rid: int, tf: int) -> None:
        self.tail[rid] = tf
        self.view = None
        if len(self.tail) > TAIL:
            self.ids, self.tf = self.merged()
            self.tail, self.view = {}, None

    def drop(self, rids: Sequence[int]) -> None:
        for rid in rids:
            if self.tail.pop(rid, None) is not None:
                self.view = None
        at = found(self.ids, np.asarray(sorted(rids), dtype=np.int64))
        if len(at):
            self.ids, self.tf = np.delete(self.ids, at), np.delete(self.tf, at)
            self.view = None


class Postings:
    """Every term's postings and every held record's length, tenant and epoch (module docstring)."""

    def __init__(self) -> None:
        self.terms: dict[str, _Term] = {}
        self.doc_terms: dict[int, tuple[str, ...]] = {}
        """Each held record's distinct terms (what its removal takes it out of)."""
        self.len_total = 0
        self.length = np.zeros(1024, dtype=np.float64)
        self.tenant = np.full(1024, ABSENT, dtype=np.int32)
        self.epoch = np.zeros(1024, dtype=np.int64)
        """The epoch each record's text was put at since the build (0: at or before it)."""
        self.newest = 0
        """The largest epoch in :attr:`epoch`: a snapshot at least as new needs no filter."""
        self._codes: dict[str, int] = {}
        """Each tenant holding records here, and its code in :attr:`tenant` (until it holds none)."""
        self._next_code = 0
        self._per_tenant: Counter[int] = Counter()

    # -- keeping up --------------------------------------------------------------------------
    def _room(self, rid: int) -> None:
        if rid >= len(self.length):
            size = max(rid + 1, 2 * len(self.length))
            self.length = np.concatenate([self.length, np.zeros(size - len(self.length), np.float64)])
            self.tenant = np.concatenate([self.tenant, np.full(size - len(self.tenant), ABSENT, np.int32)])
            self.epoch = np.concatenate([self.epoch, np.zeros(size - len(self.epoch), np.int64)])

    def _code(self, tenant: str) -> int:
        code = self._codes.get(tenant)
        if code is None:
            code = self._codes[tenant] = self._next_code
            self._next_code += 1
        return code

    def _place(self, rid: int, tenant: str, counts: Counter[str], epoch: int) -> None:
        self._room(rid)
        size = sum(counts.values())
        code = self._code(tenant)
        self.doc_terms[rid] = tuple(counts)
        self.length[rid], self.tenant[rid], self.epoch[rid] = size, code, epoch
        self.newest = max(self.newest, epoch)
        self._per_tenant[code] += 1
        self.len_total += size

    @classmethod
    def build(cls, docs: Iterable[tuple[int, str, Counter[str]]]) -> Postings:
        """Postings of ``(id, tenant, term counts)`` records, each term's array made at once."""
        p = cls()
        grouped: dict[str, tuple[list[int], list[int]]] = {}
        for rid, tenant, counts in docs:  # distinct ids
            p._place(rid, tenant, counts, 0)
            for term, tf in counts.items():
                got = grouped.get(term)
                if got is None:
                    grouped[term] = ([rid], [tf])
                else:
                    got[0].append(rid)
                    got[1].append(tf)
        for term, (ids, tfs) in grouped.items():
            p.terms[term] = _Term(*by_id(np.asarray(ids, dtype=np.int64), np.asarray(tfs, dtype=np.float64)))
        return p

    def add(self, rid: int, tenant: str, counts: Counter[str], epoch: int = 0) -> None:
        """A record not held (:meth:`remove` it first), its text's term counts."""
        self._place(rid, tenant, counts, epoch)
        for term, tf in counts.items():
            t = self.terms.get(term)
            if t is None:
                t = self.terms[term] = _Term(np.empty(0, np.int64), np.empty(0, np.float64))
            t.add(rid, tf)

    def remove(self, rids: Iterable[int]) -> None:
        """Records out of every term's postings (those not held are skipped), one pass per term."""
        by_term: dict[str, list[int]] = {}
        for rid in dict.fromkeys(rids):
            terms = self.doc_terms.pop(rid, None)
            if terms is None:
                continue
            self.len_total -= int(self.length[rid])
            code = int(self.tenant[rid])
            self._per_tenant[code] -= 1
            if not self._per_tenant[code]:  # the tenant's last record here: its id goes too
                del self._per_tenant[code]
                self._codes = {t: c for t, c in self._codes.items() if c != code}
            self.length[rid], self.tenant[rid], self.epoch[rid] = 0.0, ABSENT, 0
            for term in terms:
                by_term.setdefault(term, []).append(rid)
        for term, gone in by_term.items():
            t = self.terms.get(term)
            if t is not None:
                t.drop(gone)
                if not t.count():
                    del self.terms[term]

    # -- counts ------------------------------------------------------------------------------
    def doc_count(self) -> int:
        return len(self.doc_terms)

    def tenant_count(self, tenant: str) -> int:
        code = self._codes.get(tenant)
        return 0 if code is None else self._per_tenant[code]

    def ids_of(self, tenant: str) -> np.ndarray:
        """The ids (ascending) of ``tenant``'s records held here."""
        code = self._codes.get(tenant)
        if code is None:
            return np.empty(0, dtype=np.int64)
        return np.flatnonzero(self.tenant == code).astype(np.int64)

    def df(self, term: str) -> int:
        t = self.terms.get(term)
        return 0 if t is None else t.count()

    def holds(self, rid: int) -> bool:
        return rid in self.doc_terms

    # -- queries -----------------------------------------------------------------------------
    def matches(self, terms: Sequence[str], tenant: str | None = None, pinned: int | None = None) -> np.ndarray:
        """Ids (sorted) of the records holding any of ``terms``: of ``tenant`` only if given,
        and put at or before epoch ``pinned`` if given (a snapshot's)."""
        ids = union([self.terms[t].merged()[0] for t in dict.fromkeys(terms) if t in self.terms])
        if not len(ids):
            return ids
        if tenant is not None:
            code = self._codes.get(tenant)
            if code is None:
                return ids[:0]
            if self._per_tenant[code] < len(self.doc_terms):  # else every record held is the tenant's
                ids = ids[self.tenant[ids] == code]
        if pinned is not None and self.newest > pinned:
            ids = ids[self.epoch[ids] <= pinned]
        return ids

    def holding_all(self, terms: Sequence[str]) -> np.ndarray:
        """Ids (sorted) of the records holding every one of ``terms``."""
        out: np.ndarray | None = None
        for t in dict.fromkeys(terms):
            if t not in self.terms:
                return np.empty(0, dtype=np.int64)
            ids = self.terms[t].merged()[0]
            out = ids if out is None else np.intersect1d(out, ids, assume_unique=True)
        return np.empty(0, dtype=np.int64) if out is None else out

    def ranking(
        self, finders: Sequence[str], terms: Sequence[str], tenant: str | None = None, pinned: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`matches` of ``finders`` and their :meth:`scores` over ``terms``: once the loops
        are compiled, in one walk of the finders' lists together (:data:`~efface.sorted_ids.union_bm25`;
        0.4 ms of a recall's CPU at 100k records before, for the about 6,000 records a query's words
        find), then the other terms' walks, so the same ids and the same scores to the last bit."""
        order = [t for t in dict.fromkeys(terms) if t in self.terms]
        finding = [t for t in dict.fromkeys(finders) if t in self.terms]
        loop, walk = (union_bm25.compiled, bm25_walk.compiled) if compiled.ready() else (None, None)
        n = len(self.doc_terms)
        if loop is None or walk is None or not finding or order[: len(finding)] != finding:  # finders not first
            got = self.matches(finders, tenant, pinned)
            return got, self.scores(got, terms)
        code = -1
        if tenant is not None:
            code = self._codes.get(tenant, -2)
            if code == -2:
                return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
            if self._per_tenant[code] == n:  # every record held is the tenant's
                code = -1
        lists = [self.terms[t].merged() for t in finding]
        starts = np.zeros(len(lists) + 1, dtype=np.int64)
        np.cumsum([len(i) for i, _tf in lists], out=starts[1:])
        size = int(starts[-1])
        ids, total, norm = np.empty(size, np.int64), np.empty(size, np.float64), np.empty(size, np.float64)
        idf = np.array([bm25_idf(n, self.terms[t].count()) for t in finding], dtype=np.float64)
        got = loop(
            np.concatenate([i for i, _tf in lists]), np.concatenate([tf for _i, tf in lists]), starts, idf,
            BM25_K1 + 1, self.length, self.len_total / n, BM25_K1, 1 - BM25_B, BM25_B, self.tenant, code,
            self.epoch, -1 if pinned is None or self.newest <= pinned else pinned, ids, total, norm, LEFT_TO_RIGHT,
        )  # fmt: skip
        ids, total, norm = ids[:got], total[:got], norm[:got]
        for term in order[len(finding) :]:
            t = self.terms[term]
            walk(ids, *t.merged(), norm, bm25_idf(n, t.count()), BM25_K1 + 1, total, LEFT_TO_RIGHT)
        return ids, total

    def scores(self, cands: np.ndarray, terms: Sequence[str]) -> np.ndarray:
        """BM25 of each of ``cands`` (held, sorted) over ``terms`` (each distinct term once, in
        their order: the shared formula's, :func:`~efface.origin.memory.state.bm25_scores`)."""
        n = len(self.doc_terms)
        total = np.zeros(len(cands), dtype=np.float64)
        if not len(cands) or not n:
            return total
        avg = self.len_total / n
        length = self.length[cands]
        loop = bm25_walk.compiled if compiled.ready() else None
        if loop is None and n >= COMPILE_RECORDS:
            compiled.warm_now()
        if loop is not None:
            # bm25_term's operations, in its order: its length norm over every candidate at once
            norm = BM25_K1 * (1 - BM25_B + BM25_B * length / avg)
            for term in dict.fromkeys(terms):
                t = self.terms.get(term)
                if t is not None:
                    loop(cands, *t.merged(), norm, bm25_idf(n, t.count()), BM25_K1 + 1, total, LEFT_TO_RIGHT)
            return total
        for term in dict.fromkeys(terms):
            t = self.terms.get(term)
            if t is None:
                continue
            f = np.zeros(len(cands), dtype=np.float64)  # each candidate's count of the term (0: none)
            gather(cands, *t.merged(), f)
            held = f > 0
            idf = bm25_idf(n, t.count())
            total[held] += bm25_term(idf, f[held], length[held], avg)
        return total

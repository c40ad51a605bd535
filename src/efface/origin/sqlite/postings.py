"""The word index's postings, held in memory for ranking: FTS5's own BM25, computed here.

FTS5's ``bm25()`` costs most of a full-text query: for every row that matches any query word
it looks the row's length up in ``fts_docsize`` and gathers the row's word positions, then
sorts. Reading the doclists alone is a tenth of it (at 100k records, 0.9 ms to count a
query's matches against 10 ms to rank them). Here each term's postings (record ids, sorted,
and how often the term occurs in each) and each record's length live in numpy arrays, so a
query ranks the records its rarest words find in a few array operations, and scores each of
them over **every** query word, the common ones included: a common word adds what BM25 gives
it to the records it is in, found by binary search in its postings, without those postings
being read whole (the rarest words find, every word scores: MaxScore's split).

The scores are FTS5's to the rounding: the same idf (over the index's rows), the same
k1 = 1.2 and b = 0.75, and a record's length over all of the index's columns, as FTS5's
``bm25(fts, 1.0, 0.0)`` counts it (the tenant column weighs nothing, its tokens count in the
length). ``tests/sqlite/test_postings.py`` compares them with FTS5's own.

What is here is derived from the word index and kept up with it: every committed change of
the index is applied here after its commit (:meth:`Postings.apply`), deletes first, so an
erased record's id and length leave memory before the forget that erased it returns; a
term that only erased records held leaves with them. A store that is opened loads the
postings from the index (``fts5vocab``); a large one does so in the background, and its
queries use FTS5 meanwhile.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

import numpy as np

from ... import compiled
from ...ranking import Ranking
from ...sorted_ids import TF_FIRST, bm25_walk, by_id, found, gather, inserted, union

K1, B = 1.2, 0.75
"""FTS5's bm25() defaults, which efface keeps."""
TAIL = 4096
"""Postings of one term added since its array was last rebuilt, at most: past this, the tail
is merged into the array (one copy of it)."""
DROP_NOW = 16_384
"""An erased record leaves a term's array at once when the array is at most this long; from a
longer one (a common word's: a copy of megabytes at 1M records) at the next :meth:`Postings.purge`
(the compactor's pass after the erasure, or the verify), not before the forget returns."""
TEXT, TENANT = 0, 1
"""The index's columns, as keys here: a term of the text, a token of a tenant id."""

Key = tuple[int, str]


Counts: TypeAlias = Mapping[str, int]


@dataclass
class Change:
    """One committed transaction's change to the word index: the records whose entries went
    (with the terms they had in each column), and the records added (each column's terms with
    their counts, and the record's length over all columns). An updated record is in both."""

    removed: dict[int, tuple[Iterable[str], ...] | None] = field(default_factory=dict)
    """None for a record whose terms are not kept (a change queued while the postings load: an
    erased text's terms do not wait in memory for it): it leaves every term's list."""
    added: dict[int, tuple[tuple[Counts, ...], int]] = field(default_factory=dict)

    def without_terms(self) -> Change:
        """This change, the removed records' terms left out (see :attr:`removed`)."""
        return Change(dict.fromkeys(self.removed), self.added)


def _term_into(
    cands: np.ndarray, parts: list[tuple[np.ndarray, np.ndarray]], norm: np.ndarray, idf: float, total: np.ndarray
) -> None:
    """Add one term's BM25 to the total of each candidate (``cands``, sorted) that holds it:
    ``idf * tf * (K1 + 1) / (tf + norm)``, its count ``tf`` read from the term's parts (ids
    sorted and distinct; a record is in one part at most). Compiled (once :mod:`efface.compiled`
    has its loops): one walk per part (:data:`~efface.sorted_ids.bm25_walk`, in FTS5's order
    of operations), without the GIL, adding where a candidate holds the term. Else numpy: the
    counts gathered (:func:`~efface.sorted_ids.gather`), then the formula over every candidate
    (0 where it holds none). Both make the same float operations in the same order, so the
    totals are the same to the last bit."""
    loop = bm25_walk.compiled if compiled.ready() else None
    if loop is not None:
        for ids, tf in parts:
            if len(ids):
                loop(cands, ids, tf, norm, idf, K1 + 1.0, total, TF_FIRST)
        return
    f = np.zeros(len(cands), dtype=np.float64)
    for ids, tf in parts:
        gather(cands, ids, tf, f)
    total += idf * (f * (K1 + 1.0)) / (f + norm)


class _Term:
    """One term's postings: an array sorted by id, and a tail of the ones added since it was
    last rebuilt (a record is in one or the other, never both). Ids dropped from a long array
    wait in ``dead`` until :meth:`purge` copies the array without them (the records are
    already out of the lengths, so no query finds or counts them meanwhile)."""

    __slots__ = ("_tail_view", "dead", "ids", "tail", "tf")

    def __init__(self, ids: np.ndarray, tf: np.ndarray):
        self.ids, self.tf = ids, tf
        self.tail: dict[int, int] = {}
        self.dead: set[int] = set()
        self._tail_view: tuple[np.ndarray, np.ndarray] | None = None

    def count(self) -> int:
        return len(self.ids) + len(self.tail) - len(self.dead)

    def parts(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The array and the tail (sorted, kept until the next change), ids with counts."""
        if not self.tail:
            return [(self.ids, self.tf)]
        got = self._tail_view
        if got is None:
            ids = np.fromiter(self.tail, np.int64, len(self.tail))
            order = np.argsort(ids)
            tf = np.fromiter(self.tail.values(), np.float32, len(self.tail))
            got = self._tail_view = (ids[order], tf[order])
        return [(self.ids, self.tf), got]

    def merged(self) -> tuple[np.ndarray, np.ndarray]:
        """Ids (sorted) and counts, the tail merged in."""
        parts = self.parts()
        if len(parts) == 1:
            return parts[0]
        (ids, tf), (more, more_tf) = parts
        return inserted(ids, tf, more, more_tf)

    def add(self, counts: dict[int, int]) -> None:
        """Records (not held here) and how often each holds the term."""
        if self.dead and not self.dead.isdisjoint(counts):
            self.purge()  # a rewritten record comes back: its old place goes first
        self.tail.update(counts)
        self._tail_view = None
        if len(self.tail) > TAIL:
            self.ids, self.tf = self.merged()
            self.tail, self._tail_view = {}, None

    def drop(self, ids: Sequence[int], *, now: bool) -> None:
        """Take ``ids`` out: from the tail at once, from the array now or at :meth:`purge`."""
        for i in ids:
            if self.tail.pop(i, None) is not None:
                self._tail_view = None
        if not len(self.ids):
            return
        at = found(self.ids, np.asarray(ids, dtype=np.int64))
        if not len(at):
            return
        if now:
            self.ids, self.tf = np.delete(self.ids, at), np.delete(self.tf, at)
        else:
            self.dead.update(self.ids[at].tolist())

    def purge(self) -> None:
        if self.dead:
            dead, self.dead = sorted(self.dead), set()
            self.drop(dead, now=True)


class Postings:
    """Every term's postings and every record's length, for :meth:`rank`. Thread-safe: changes
    are applied under a lock; a query takes its arrays under it and computes outside."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._cols: tuple[dict[str, _Term], dict[str, _Term]] = ({}, {})
        """Each column's terms (``TEXT``, ``TENANT``) and their postings."""
        self._terms = self._cols[TEXT]
        self._dirty: set[Key] = set()
        """Terms whose arrays still hold dropped ids (:data:`DROP_NOW`)."""
        self._len = np.zeros(1024, dtype=np.float32)
        self._here = np.zeros(1024, dtype=bool)
        self._rows = 0
        self._tokens = 0.0

    # -- building and keeping up ------------------------------------------------------------
    @classmethod
    def of(cls, grouped: Iterable[tuple[Key, np.ndarray, np.ndarray]]) -> Postings:
        """Postings from each key's ids (sorted, unique) and counts, as the index holds them."""
        p = cls()
        all_ids, all_tf = [], []
        for key, ids, tf in grouped:
            if len(ids):
                p._cols[key[0]][key[1]] = _Term(ids.astype(np.int64), tf.astype(np.float32))
                all_ids.append(ids)
                all_tf.append(tf)
        if all_ids:
            ids = np.concatenate(all_ids).astype(np.int64)
            size = int(ids.max()) + 1
            p._len = np.bincount(ids, weights=np.concatenate(all_tf).astype(np.float64), minlength=size).astype(
                np.float32
            )
            p._here = p._len > 0
            p._rows = int(p._here.sum())
            p._tokens = float(p._len.sum())
        return p

    def _room(self, rid: int) -> None:
        if rid >= len(self._len):
            size = max(rid + 1, 2 * len(self._len))
            grown = np.zeros(size, dtype=np.float32)
            grown[: len(self._len)] = self._len
            here = np.zeros(size, dtype=bool)
            here[: len(self._here)] = self._here
            self._len, self._here = grown, here

    def apply(self, change: Change) -> None:
        """A committed change: its removed records leave (ids, lengths, and any term left with
        no record), then its added ones come in. Applying a change twice, or one the postings
        were loaded with already, leaves them as applying it once: every record it names is
        taken out before any is put in."""
        with self._mu:
            held = self._held
            gone: tuple[dict[str, list[int]], dict[str, list[int]]] = ({}, {})
            everywhere: list[int] = []
            for rid, cols in change.removed.items():
                if held(rid):
                    if cols is None:
                        everywhere.append(rid)
                        continue
                    for col, words in enumerate(cols):
                        for w in words:
                            gone[col].setdefault(w, []).append(rid)
            if everywhere:
                for col, terms in enumerate(self._cols):
                    for term in terms:
                        gone[col].setdefault(term, []).extend(everywhere)
            for rid in self._held_of(change.added):  # rewritten, or applied already (a load saw it): out before in
                for col, words in enumerate(change.added[rid][0]):
                    for w in words:
                        gone[col].setdefault(w, []).append(rid)
            for col, drops in enumerate(gone):
                terms = self._cols[col]
                for term, ids in drops.items():
                    t = terms.get(term)
                    if t is not None:
                        t.drop(sorted(set(ids)), now=len(t.ids) <= DROP_NOW)
                        if t.dead:
                            self._dirty.add((col, term))
                        if not t.count():
                            del terms[term]
                            self._dirty.discard((col, term))
            for rid in self._held_of([*change.removed, *change.added]):
                self._rows -= 1
                self._tokens -= float(self._len[rid])
                self._here[rid], self._len[rid] = False, 0.0
            adds: tuple[dict[str, dict[int, int]], dict[str, dict[int, int]]] = ({}, {})
            if change.added:
                rids = np.fromiter(change.added, dtype=np.int64, count=len(change.added))
                sizes = np.fromiter((n for _c, n in change.added.values()), dtype=np.float64, count=len(rids))
                self._room(int(rids.max()))
                self._here[rids], self._len[rids] = True, sizes
                self._rows += len(rids)
                self._tokens += float(sizes.sum())
            for rid, (counts, _n) in change.added.items():
                for col, col_counts in enumerate(counts):
                    into = adds[col]
                    for term, c in col_counts.items():
                        got = into.get(term)
                        if got is None:
                            into[term] = {rid: c}
                        else:
                            got[rid] = c
            for col, col_adds in enumerate(adds):
                terms = self._cols[col]
                for term, items in col_adds.items():
                    t = terms.get(term)
                    if t is None:
                        t = terms[term] = _Term(np.empty(0, np.int64), np.empty(0, np.float32))
                    t.add(items)

    def purge(self) -> int:
        """Copy every array that still holds dropped ids without them (one term at a time, the
        lock let go between terms so queries go on). Returns how many ids left."""
        left = 0
        while True:
            with self._mu:
                if not self._dirty:
                    return left
                col, term = self._dirty.pop()
                t = self._cols[col].get(term)
                if t is not None:
                    left += len(t.dead)
                    t.purge()

    def _held(self, rid: int) -> bool:
        return rid < len(self._here) and bool(self._here[rid])

    def _held_of(self, ids: Iterable[int]) -> list[int]:
        """Those of ``ids`` held here (a length), in the order given, each once: one array
        look-up for a whole import's batch."""
        arr = np.fromiter(dict.fromkeys(ids), dtype=np.int64)
        inside = arr[(arr >= 0) & (arr < len(self._here))]
        return inside[self._here[inside]].tolist()

    def holds(self, ids: Sequence[int], *, every_list: bool = False) -> list[int]:
        """Which of ``ids`` the postings still hold: a length, or a place waiting for the purge
        in a long list (none, once they are erased and purged). ``every_list``: also search
        every term's list for them (0.4 s at 1M records: the tests' check that nothing else
        is left; a drop takes a record out of exactly the terms its text had)."""
        with self._mu:
            here = self._here
            held = {i for i in ids if 0 <= i < len(here) and bool(here[i])}
            wanted = np.asarray(sorted(set(ids)), dtype=np.int64)
            for terms in self._cols:
                for t in terms.values():
                    if t.dead:
                        held.update(i for i in ids if i in t.dead)
                    if every_list and len(wanted):
                        for arr, _tf in t.parts():
                            held.update(arr[found(arr, wanted)].tolist())
            return sorted(held)

    def holds_term(self, term: str) -> bool:
        with self._mu:
            return term in self._terms

    def document_frequency(self, terms: Iterable[str]) -> dict[str, int]:
        with self._mu:
            return {t: self._terms[t].count() for t in terms if t in self._terms}

    # -- ranking ----------------------------------------------------------------------------
    def rank(self, finders: Sequence[str], scorers: Sequence[str], within: Sequence[str] | None = None) -> Ranking:
        """Records holding any of ``finders``' terms (and, if ``within`` is given, every token
        of it in the tenant column), best first, with FTS5's BM25 over ``finders`` and
        ``scorers`` together (distinct terms; higher is better; ties by id), ordered as far
        as they are read (:class:`~efface.ranking.Ranking`)."""
        with self._mu:
            rows, tokens, lengths, here = self._rows, self._tokens, self._len, self._here
            terms, tenants = self._cols
            find = [p for t in finders if t in terms for p in terms[t].parts()]
            score = [(terms[t].count(), terms[t].parts()) for t in dict.fromkeys([*finders, *scorers]) if t in terms]
            scope = None
            if within is not None:
                scope = [tenants[t].parts() if t in tenants else None for t in within]
        empty = Ranking.empty()
        if not find or rows <= 0:
            return empty
        cands = union([ids for ids, _ in find])
        for parts in scope or ():
            if parts is None:
                return empty
            cands = cands[np.isin(cands, np.concatenate([ids for ids, _ in parts]))]
        cands = cands[here[cands]]  # records dropped from a long array, not yet purged
        if not len(cands):
            return empty
        avgdl = tokens / rows
        norm = K1 * (1.0 - B + B * lengths[cands].astype(np.float64) / avgdl)
        total = np.zeros(len(cands), dtype=np.float64)
        for df, parts in score:
            idf = max(1e-6, math.log((rows - df + 0.5) / (df + 0.5)))
            _term_into(cands, parts, norm, idf, total)
        return Ranking(cands, total)  # the candidates in id order, as it needs them


def counts_of(text: Sequence[str], tenant: Counts, tenant_tokens: int) -> tuple[tuple[Counts, ...], int]:
    """A record's postings from its text's tokens and its tenant id's (counted once for a
    transaction's records: they share it), and its length: all of its tokens, as FTS5
    counts a row's length over every column."""
    return (Counter(text), tenant), len(text) + tenant_tokens


LOAD_CHUNK = 200_000
"""Postings read per statement while loading: each chunk of terms is its own short read, so
a load never holds one snapshot long enough to keep the WAL from being checkpointed."""


Loaded: TypeAlias = list[tuple[Key, np.ndarray, np.ndarray]]


def load(
    conn,
    scoped: bool,
    stop: threading.Event | None = None,
    between: Callable[[Loaded], None] | None = None,
) -> Loaded | None:
    """Every term's postings, read from the index's ``fts5vocab`` tables on ``conn`` in
    chunks of terms (a change committed meanwhile must be applied after: :meth:`Postings.apply`
    is idempotent). ``between`` is given what was read so far after each chunk (to take out
    records erased meanwhile: :func:`sweep`). None if ``stop`` was set meanwhile."""
    chunks: list[list[str]] = []
    run = 0
    for term, docs in conn.execute("SELECT term, doc FROM fts_vocab"):
        if run == 0:
            chunks.append([term, term])
        chunks[-1][1] = term
        run += docs
        if run >= LOAD_CHUNK:
            run = 0
    cols = {"text": TEXT, "tenant": TENANT} if scoped else {"text": TEXT}
    out: Loaded = []
    if between is not None:
        between(out)
    for lo, hi in chunks:
        if stop is not None and stop.is_set():
            return None
        for term, col, ids, counts in conn.execute(
            "SELECT term, col, group_concat(doc), group_concat(n) FROM (SELECT term, col, doc, count(*) AS n"
            " FROM fts_inst WHERE term >= ? AND term <= ? GROUP BY term, col, doc) GROUP BY term, col",
            (lo, hi),
        ):
            if col not in cols:
                continue
            a, c = by_id(np.array(ids.split(","), dtype=np.int64), np.array(counts.split(","), dtype=np.float32))
            out.append(((cols[col], term), a, c))
        if between is not None:
            between(out)
    return out


def sweep(loaded: Loaded, ids: Iterable[int]) -> None:
    """Take ``ids`` out of every list of ``loaded`` (in place; a list left empty goes)."""
    gone = np.asarray(sorted(set(ids)), dtype=np.int64)
    if not len(gone):
        return
    kept: Loaded = []
    for key, a, c in loaded:
        hit = found(a, gone)
        if len(hit):
            a, c = np.delete(a, hit), np.delete(c, hit)
        if len(a):
            kept.append((key, a, c))
    loaded[:] = kept

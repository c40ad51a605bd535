"""The PostgreSQL origin's word index: in this process's memory, kept up from the change log.

The database holds texts sealed, so it cannot index their words (and a GIN index over clear
words would keep them in its pages after every delete: docs/postgres.md). Each efface process
keeps its own postings over :func:`efface.text.words`, ranked by BM25 as the memory origin's
(:mod:`efface.origin.memory.text`):

* built at open from every record, unsealed;
* a transaction of this process stages its changes; they enter the postings once it has
  committed (a rolled-back one leaves nothing);
* before each query, the change log since the index's epoch is replayed (:meth:`PgText.refresh`):
  ids put by any process are read and unsealed again, dropped ones removed. So a write by
  another efface process on the same database is findable from this one's next query, and an
  erased record leaves these postings at the latest then (recall checks every candidate live
  in the origin anyway). If the log was pruned past this index's epoch, it is rebuilt whole.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ...text import words as text_words
from ..base import CHANGES_PRUNED
from ..memory.state import bm25_ceiling, bm25_scores
from .reads import REC_COLS, unseal_record

if TYPE_CHECKING:
    from .tx import PostgresTx

PostgresOrigin = Any
"""The origin this part serves (:class:`.origin.PostgresOrigin`), untyped here: the origin
imports this module, and importing it back, even for types, would close a circle."""

PRUNED = CHANGES_PRUNED
"""Meta key: the newest epoch whose change-log rows may have been pruned (every origin's)."""


class PgText:
    """Postings in memory over the origin's unsealed texts (see the module docstring)."""

    scoped = False
    """Its postings hold no tenant column for ranking (recall filters by tenant after)."""

    def __init__(self, origin: PostgresOrigin) -> None:
        self._o = origin
        self._mu = threading.RLock()
        self._applied = 0
        self._doc_terms: dict[int, Counter[str]] = {}
        self._doc_tenant: dict[int, str] = {}
        self._doc_epoch: dict[int, int] = {}
        """The epoch of each text put since open (absent: at or before the build at open); a
        query inside a snapshot leaves out texts newer than the snapshot's epoch."""
        self._len_total = 0
        self._postings: dict[str, set[int]] = {}

    # -- keeping up -----------------------------------------------------------------------------
    def stage(
        self, tx: PostgresTx, tenant: str, puts: Sequence[int], drops: Sequence[int], texts: dict[int, str]
    ) -> None:
        tx.staged.append((tenant, list(puts), list(drops), {i: texts[i] for i in puts}))

    def committed(self, tx: PostgresTx) -> None:
        """``tx`` committed: take its staged changes, or replay the log if another process
        committed since this index's epoch."""
        with self._mu:
            if self._applied == tx.epoch - 1:
                for tenant, puts, drops, texts in tx.staged:
                    for rid in dict.fromkeys((*puts, *drops)):
                        self._remove(rid)
                    for rid in puts:
                        self._add(rid, tenant, texts[rid], tx.epoch)
                self._applied = tx.epoch
                return
        self.refresh()

    # Reads from the database are made without holding _mu: a reader holding a pooled
    # connection (a snapshot) may be waiting for _mu, so whoever holds _mu must never wait
    # for a connection. What was read is applied under _mu if the index has not moved meanwhile.
    def rebuild(self) -> None:
        with self._o._reading() as conn:
            at = self._o.current_epoch()
            rows = conn.execute(f"SELECT {REC_COLS} FROM {self._o._s}.records r ORDER BY r.id").fetchall()
            recs = [unseal_record(self._o._sealer, conn, row) for row in rows]
        with self._mu:
            if at < self._applied:
                return
            self._doc_terms.clear()
            self._doc_tenant.clear()
            self._doc_epoch.clear()
            self._postings.clear()
            self._len_total = 0
            for rec in recs:
                self._add(rec.id, rec.tenant, rec.text)
            self._applied = at

    def refresh(self) -> None:
        """Replay the change log since this index's epoch (see the module docstring)."""
        for _attempt in range(8):
            start = self._applied
            pinned = self._o.snapshot_epoch()  # inside a snapshot: its epoch, already read
            now = self._o.current_epoch() if pinned is None else pinned
            if now <= start:
                return
            changes = self._o.changes_since(start, now)
            if int(self._o.meta_get(PRUNED) or 0) > start:  # read after: another process may prune meanwhile
                self.rebuild()
                continue
            last: dict[int, tuple[str, str]] = {}
            when: dict[int, int] = {}
            for epoch, rid, tenant, op in changes:
                last[rid] = (tenant, op)
                when[rid] = epoch
            if any(op == "drop" for _t, op in last.values()):
                self._o._sealer.forget_all()  # another process may have destroyed data keys
            recs = self._o.records_by_id([rid for rid, (_t, op) in last.items() if op == "put"])
            with self._mu:
                if self._applied != start:
                    continue  # another thread moved the index meanwhile: read again from there
                for rid in last:
                    self._remove(rid)
                for rec in recs.values():
                    self._add(rec.id, rec.tenant, rec.text, when[rec.id])
                self._applied = now
                return

    def _add(self, rid: int, tenant: str, text: str, epoch: int = 0) -> None:
        terms = Counter(text_words(text))
        self._doc_terms[rid] = terms
        if epoch:
            self._doc_epoch[rid] = epoch
        self._doc_tenant[rid] = tenant
        self._len_total += sum(terms.values())
        for w in terms:
            self._postings.setdefault(w, set()).add(rid)

    def _remove(self, rid: int) -> None:
        old = self._doc_terms.pop(rid, None)
        self._doc_tenant.pop(rid, None)
        self._doc_epoch.pop(rid, None)
        if old is None:
            return
        self._len_total -= sum(old.values())
        for w in old:
            posting = self._postings.get(w)
            if posting is not None:
                posting.discard(rid)
                if not posting:
                    del self._postings[w]

    def clear(self) -> None:
        with self._mu:
            self._doc_terms.clear()
            self._doc_tenant.clear()
            self._doc_epoch.clear()
            self._postings.clear()
            self._len_total = 0

    # -- queries ---------------------------------------------------------------------------------
    def holding_all(self, words: Sequence[str]) -> set[int]:
        """Ids whose texts hold every one of ``words`` (candidates for a phrase)."""
        self.refresh()
        with self._mu:
            sets = [self._postings.get(w, set()) for w in dict.fromkeys(words)]
            return set.intersection(*map(set, sets)) if sets else set()

    def doc_count(self) -> int:
        return len(self._doc_terms)

    def tenant_count(self, tenant: str) -> int:
        with self._mu:
            return sum(1 for t in self._doc_tenant.values() if t == tenant)

    def document_frequency(self, words: Sequence[str]) -> dict[str, int]:
        self.refresh()
        with self._mu:
            return {w: len(self._postings[w]) for w in words if w in self._postings}

    def index_terms(self, words: Sequence[str], *, remember: bool = True) -> list[str | None]:
        """The word itself: this index does not stem and memoises nothing."""
        return list(words)

    def bm25_ceiling(self, dfs: Sequence[int]) -> float:
        """As :meth:`efface.origin.memory.text.MemoryText.bm25_ceiling`."""
        return bm25_ceiling(len(self._doc_terms), dfs)

    def _matches(self, words: Sequence[str]) -> set[int]:
        out: set[int] = set()
        for w in dict.fromkeys(words):
            out |= self._postings.get(w, set())
        pinned = self._o.snapshot_epoch()
        if pinned is not None and self._doc_epoch:
            out = {rid for rid in out if self._doc_epoch.get(rid, 0) <= pinned}
        return out

    def _scores(self, words: Sequence[str], scoring: Sequence[str]) -> dict[int, float]:
        with self._mu:
            found = self._matches(words)
            return bm25_scores(found, self._doc_terms, self._postings, self._len_total, [*words, *scoring])

    def search(
        self, words: Sequence[str], tenant: str, purpose: str, subject: str | None, now: float, depth: int, limit: int
    ) -> list[int]:
        return [rid for rid, _ in self.ranked(words, tenant, purpose, subject, now, depth, limit)]

    def ranked(
        self,
        words: Sequence[str],
        tenant: str,
        purpose: str,
        subject: str | None,
        now: float,
        depth: int,
        limit: int,
        scoring: Sequence[str] = (),
    ) -> list[tuple[int, float]]:
        return self.ranked_seen(words, tenant, purpose, subject, now, depth, limit, scoring=scoring)[0]

    def ranked_seen(
        self,
        words: Sequence[str],
        tenant: str,
        purpose: str,
        subject: str | None,
        now: float,
        depth: int,
        limit: int,
        *,
        narrow: bool = True,
        scoring: Sequence[str] = (),
    ) -> tuple[list[tuple[int, float]], int]:
        """:meth:`ranked`, and how many matches were ranked (at most ``depth``)."""
        self.refresh()
        scores = self._scores(words, scoring)
        if not scores:
            return [], 0
        ranked = sorted(scores, key=lambda r: (-scores[r], r))[:depth]
        live = self._o.live_ids(ranked, tenant, purpose, subject, now)
        return [(r, scores[r]) for r in ranked if r in live][:limit], min(depth, len(scores))

    def count_matches(self, words: Sequence[str], cap: int) -> int:
        self.refresh()
        with self._mu:
            return min(cap, len(self._matches(words)))

    def terms(self) -> Iterable[str]:
        with self._mu:
            return list(self._postings)

    def terms_of_erased(self, ids: Sequence[int]) -> None:
        """Not kept: walking this index's words costs little (see :meth:`terms`)."""
        return None

    def matching_ids(self, terms: Sequence[str], ids: Sequence[int]) -> list[int]:
        with self._mu:
            found = self._matches(terms)
            return [i for i in ids if i in found]

    def held_in_memory(self, ids: Sequence[int]) -> list[int]:
        """Which of ``ids`` these postings still hold (verify probes them)."""
        with self._mu:
            return [i for i in ids if i in self._doc_terms]

    def purge(self) -> bool:
        """Nothing to purge: a deleted entry leaves the postings once its change is seen."""
        return False

    def purged_epoch(self) -> int:
        """The epoch these postings are at (brought up to the newest first)."""
        self.refresh()
        return self._applied

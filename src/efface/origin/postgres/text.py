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
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import apsw
import numpy as np

from ...ranking import Ranking
from ...text import index_text
from ..base import CHANGES_PRUNED
from ..memory.state import bm25_ceiling
from .postings import Postings
from .rows import REC_COLS, unseal_record

if TYPE_CHECKING:
    from .tx import PostgresTx

PostgresOrigin = Any
"""The origin this part serves (:class:`.origin.PostgresOrigin`), untyped here: the origin
imports this module, and importing it back, even for types, would close a circle."""

PRUNED = CHANGES_PRUNED
"""Meta key: the newest epoch whose change-log rows may have been pruned (every origin's)."""

TOKENIZE = ("porter", ["unicode61", "remove_diacritics", "2"])
"""The tokenizer the SQLite origin's index holds its words through (English stems: "runs",
"running" -> "run"), SQLite's own, run here on a private in-memory connection: both origins
hold the same terms for a text, so they find and score the same records."""
TERM_MEMO = 200_000
"""Query words whose stems are memoised at most (cleared when full)."""


class PgText:
    """Postings in memory over the origin's unsealed texts (see the module docstring)."""

    scoped = False
    """Its postings hold no tenant column for ranking (recall filters by tenant after)."""

    def __init__(self, origin: PostgresOrigin) -> None:
        self._o = origin
        self._tok_db = apsw.Connection(":memory:")
        self._tok = self._tok_db.fts5_tokenizer(*TOKENIZE)
        self._tok_mu = threading.Lock()
        self._term_memo: dict[str, str | None] = {}
        self._mu = threading.RLock()
        self._applied = 0
        self._post = Postings()
        """The postings (:mod:`.postings`), with each record's epoch: a query inside a
        snapshot leaves out texts newer than the snapshot's epoch."""
        self.listeners: list[Callable[[Mapping[int, tuple[str, str]] | None], None]] = []
        """Told, under this index's lock, of the changes it applies (record id -> (tenant, op)),
        or None when it rebuilt (the origin's kept vector sample, :mod:`.sample`)."""

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
                seen: dict[int, tuple[str, str]] = {}
                for tenant, puts, drops, texts in tx.staged:
                    self._post.remove((*puts, *drops))
                    for rid in puts:
                        self._add(rid, tenant, texts[rid], tx.epoch)
                    seen.update({rid: (tenant, "put") for rid in puts} | {rid: (tenant, "drop") for rid in drops})
                self._applied = tx.epoch
                self._tell(seen)
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
        built = Postings.build((rec.id, rec.tenant, self._counts(rec.text)) for rec in recs)
        with self._mu:
            if at < self._applied:
                return
            self._post = built
            self._applied = at
            self._tell(None)

    def applied(self) -> int:
        """The epoch these postings have replayed the change log up to."""
        return self._applied

    def refresh(self) -> None:
        """Replay the change log since this index's epoch (see the module docstring)."""
        for _attempt in range(8):
            start = self._applied
            pinned = self._o.words_epoch()  # inside a snapshot: its epoch (a deferred one's: ours)
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
                self._post.remove(last)
                for rec in recs.values():
                    self._add(rec.id, rec.tenant, rec.text, when[rec.id])
                self._applied = now
                self._tell(last)
                return

    def _tell(self, changes: Mapping[int, tuple[str, str]] | None) -> None:
        for listener in self.listeners:
            listener(changes)

    # -- terms -----------------------------------------------------------------------------------
    def _tokens(self, text: str) -> list[str]:
        """The terms the tokenizer makes of ``text``'s words (:data:`TOKENIZE`)."""
        with self._tok_mu:
            got = self._tok(text.encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None, include_offsets=False)
        return [t if isinstance(t, str) else str(t[0]) for t in got]

    def _term(self, word: str) -> str | None:
        got = self._term_memo.get(word, "")
        if got != "":
            return got
        tokens = self._tokens(word)
        term = tokens[0] if len(tokens) == 1 else None
        if len(self._term_memo) >= TERM_MEMO:
            self._term_memo.clear()
        self._term_memo[word] = term
        return term

    def _terms(self, words: Sequence[str]) -> list[str]:
        return [t for t in dict.fromkeys(self._term(w) for w in words) if t is not None]

    def _counts(self, text: str) -> Counter[str]:
        return Counter(self._tokens(index_text(text)))

    def _add(self, rid: int, tenant: str, text: str, epoch: int) -> None:
        """A record not held (removed first), put at ``epoch``."""
        self._post.add(rid, tenant, self._counts(text), epoch)

    def clear(self) -> None:
        with self._mu:
            self._post = Postings()

    # -- queries ---------------------------------------------------------------------------------
    def holding_all(self, words: Sequence[str]) -> set[int]:
        """Ids whose texts hold every one of ``words`` (candidates for a phrase)."""
        self.refresh()
        with self._mu:
            terms = self._terms(words)
            return set(self._post.holding_all(terms).tolist()) if terms else set()

    def doc_count(self) -> int:
        return self._post.doc_count()

    def tenant_count(self, tenant: str) -> int:
        with self._mu:
            return self._post.tenant_count(tenant)

    def tenant_ids(self, tenant: str) -> np.ndarray:
        """The ids (ascending) of ``tenant``'s records these postings hold, as replayed so far
        (no look-up: the origin's vector sample draws among them, :mod:`.sample`)."""
        with self._mu:
            return self._post.ids_of(tenant)

    def document_frequency(self, words: Sequence[str]) -> dict[str, int]:
        self.refresh()
        with self._mu:
            out = {}
            for w in words:
                t = self._term(w)
                if t is not None and (df := self._post.df(t)):
                    out[w] = df
            return out

    def index_terms(self, words: Sequence[str], *, remember: bool = True) -> list[str | None]:
        """The term this index holds for each word (its stem: :data:`TOKENIZE`), None for a
        word the tokenizer would not keep as one token; ``remember=False``: not memoised."""
        if remember:
            return [self._term(w) for w in words]
        out: list[str | None] = []
        for w in words:
            tokens = self._tokens(w)
            out.append(tokens[0] if len(tokens) == 1 else None)
        return out

    def bm25_ceiling(self, dfs: Sequence[int]) -> float:
        """As :meth:`efface.origin.memory.text.MemoryText.bm25_ceiling`."""
        return bm25_ceiling(self._post.doc_count(), dfs)

    def _matches(self, terms: Sequence[str], tenant: str | None = None) -> np.ndarray:
        """Ids (sorted) of the records holding any of ``terms`` (of ``tenant``, if given)
        that this thread's snapshot, if any, holds."""
        return self._post.matches(terms, tenant, self._o.words_epoch())

    def _ranking(self, words: Sequence[str], scoring: Sequence[str], tenant: str | None = None) -> Ranking:
        """The records ``words`` find (of ``tenant``, if given) and their BM25 over ``words``
        and ``scoring`` (:meth:`.postings.Postings.scores`)."""
        with self._mu:
            pinned = self._o.words_epoch()
            return Ranking(*self._post.ranking(self._terms(words), self._terms([*words, *scoring]), tenant, pinned))

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
        ranking = self._ranking(words, scoring)
        if not len(ranking):
            return [], 0
        ids, scores = ranking.head(depth)
        ranked = ids.tolist()
        live = self._o.live_ids(ranked, tenant, purpose, subject, now)
        return [(r, x) for r, x in zip(ranked, scores.tolist(), strict=True) if r in live][:limit], min(
            depth, len(ranking)
        )

    def ranked_unchecked(
        self, words: Sequence[str], tenant: str | None, *, narrow: bool = True, scoring: Sequence[str] = ()
    ) -> Ranking:
        """Every record of ``tenant`` that ``words`` find, with its BM25 over ``scoring``'s
        words too, **not checked live** (:class:`~efface.origin.base.UncheckedRanking`):
        recall checks them best first in its own snapshot, beside its other legs' candidates."""
        self.refresh()
        return self._ranking(words, scoring, tenant)

    def count_matches(self, words: Sequence[str], cap: int) -> int:
        self.refresh()
        with self._mu:
            return min(cap, len(self._matches(self._terms(words))))

    def terms(self) -> Iterable[str]:
        with self._mu:
            return list(self._post.terms)

    def terms_of_erased(self, ids: Sequence[int]) -> None:
        """Not kept: walking this index's words costs little (see :meth:`terms`)."""
        return None

    def matching_ids(self, terms: Sequence[str], ids: Sequence[int]) -> list[int]:
        with self._mu:
            found = set(self._matches(terms).tolist())
            return [i for i in ids if i in found]

    def held_in_memory(self, ids: Sequence[int]) -> list[int]:
        """Which of ``ids`` these postings still hold (verify probes them)."""
        with self._mu:
            return [i for i in ids if self._post.holds(i)]

    def purge(self) -> bool:
        """Nothing to purge: a deleted entry leaves the postings once its change is seen."""
        return False

    def purged_epoch(self) -> int:
        """The epoch these postings are at (brought up to the newest first)."""
        self.refresh()
        return self._applied

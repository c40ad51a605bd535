"""The memory origin's word index: postings over efface.text.words, ranked by BM25."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from ...text import words as text_words
from .state import _live_ids, _State, bm25_ceiling, bm25_scores

if TYPE_CHECKING:  # pragma: no cover
    from .tx import MemoryTx


class MemoryText:
    """The memory origin's word index: postings and term counts over :func:`efface.text.words`,
    staged inside the transaction, ranked by BM25 (OR semantics)."""

    scoped = False
    """Its postings hold no tenant column (recall filters by tenant after ranking)."""

    def __init__(self, state: Callable[[], _State], current_epoch: Callable[[], int]):
        self._st = state
        """The state this thread reads (the origin's snapshot, or its current state)."""
        self._current_epoch = current_epoch

    def stage(
        self, tx: MemoryTx, tenant: str, puts: Sequence[int], drops: Sequence[int], texts: dict[int, str]
    ) -> None:
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
        return len(self._st().doc_terms)

    def document_frequency(self, words: Sequence[str]) -> dict[str, int]:
        s = self._st()
        return {w: len(s.postings[w]) for w in words if w in s.postings}

    def _matches(self, s: _State, words: Sequence[str]) -> set[int]:
        out: set[int] = set()
        for w in dict.fromkeys(words):
            out |= s.postings.get(w, set())
        return out

    def tenant_count(self, tenant: str) -> int:
        """Records the tenant (its id) holds."""
        return sum(1 for r in self._st().records.values() if r.tenant == tenant)

    def index_terms(self, words: Sequence[str], *, remember: bool = True) -> list[str | None]:
        """The term the index holds for each word: the word itself (this index does not stem
        and memoises nothing)."""
        return list(words)

    def bm25_ceiling(self, dfs: Sequence[int]) -> float:
        """The most BM25 any record could score for a query whose distinct words are in
        ``dfs`` records each (this index's idf, the term frequency saturated at k1 + 1).
        ``dfs`` were counted in another look at the state than ``n``: a writer between the two
        can leave a df above ``n``. This idf is defined for any df (its argument is
        ``(n + 1) / (df + 0.5)``), but a df above the store's size means the store had at least
        df records when it was counted, and that is the size used for it (as the SQLite index
        does, where the other idf would fail)."""
        return bm25_ceiling(len(self._st().doc_terms), dfs)

    def search(
        self, words: Sequence[str], tenant: str, purpose: str, subject: str | None, now: float, depth: int, limit: int
    ) -> list[int]:
        """Rank the ``depth`` best matches of any of ``words`` by BM25, keep those live for the
        tenant and purpose (and subject), best first, at most ``limit``."""
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
        """:meth:`search` with each id's BM25 score (higher is better)."""
        s = self._st()
        found = self._matches(s, words)
        if not found:
            return []
        scores = bm25_scores(found, s.doc_terms, s.postings, s.doc_len_total, [*words, *scoring])
        ranked = sorted(scores, key=lambda r: (-scores[r], r))[:depth]
        live = _live_ids(s, ranked, tenant, purpose, subject, now)
        return [(r, scores[r]) for r in ranked if r in live][:limit]

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
        """:meth:`ranked`, and how many matches were ranked (at most ``depth``). ``scoring``:
        more words that add to the scores of the records ``words`` find (none found by them alone)."""
        return self.ranked(words, tenant, purpose, subject, now, depth, limit, scoring), min(
            depth, len(self._matches(self._st(), words))
        )

    def count_matches(self, words: Sequence[str], cap: int) -> int:
        """How many rows match any of ``words``, counting at most ``cap``."""
        return min(cap, len(self._matches(self._st(), words)))

    def terms(self) -> Iterable[str]:
        """Every word the index holds."""
        return list(self._st().postings)

    def terms_of_erased(self, ids: Sequence[int]) -> None:
        """Not kept here: walking this index's words costs little (see :meth:`terms`)."""
        return None

    def matching_ids(self, words: Sequence[str], ids: Sequence[int]) -> list[int]:
        """Which of ``ids`` the index still matches for any of ``words``."""
        found = self._matches(self._st(), words)
        return [i for i in ids if i in found]

    def purge(self) -> bool:
        """Nothing to purge: a deleted entry is gone from the postings at commit."""
        return False

    def purged_epoch(self) -> int:
        return self._current_epoch()

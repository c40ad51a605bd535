"""Full-text read path: the origin's word index (FTS5 on SQLite), ranked by BM25.

The index lives in the origin and is staged inside the origin's transaction, so a deleted
row can never match again: this path's applied epoch never lags. Its erased epoch is the
origin's too: the delete takes the row's entries out of the index pages in the same
transaction (FTS5 ``secure-delete``, see ``origin/sqlite/separators.py``); only a store that
cannot show that waits for the compactor's merge. A query's rarest words within a budget of
postings find its records (see :data:`POSTING_BUDGET`); where the index holds its postings in
memory (the SQLite origin, ``origin/sqlite/postings.py``) every query word scores them, the
common ones too, and otherwise (FTS5's own ranking, while they load) the words that found
them do. The ranked list is widened while the tenant, purpose and subject filters thin it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from typing import cast

from .. import foreground
from ..capable import capable
from ..model import Check, probe_sample
from ..origin.base import WordIndex
from ..origin.capabilities import HeldInMemory, UncheckedRanking
from ..ranking import Ranking
from ..text import content_words, query_words
from .base import Erased, Held, Query, check

MAX_FTS_CANDIDATES = 20000
POSTING_BUDGET = 20000
"""How many postings (records holding a word, summed over the query's words) one full-text
query may read: words are taken rarest first while their document frequencies fit, the
rarest always. Reading and scoring a common word's long doclist is what makes a query slow,
so the bound is on that cost, and it does not grow with the store. The words left out are
the ones BM25 weighs least. An earlier rule dropped every word found in more than 1% of the
records: on Debian's package descriptions (60k) it kept a third of a query's words, left a
quarter of the queries with one word and took BM25's MRR@10 from 0.65 to 0.43
(bench/bench_quality.py); this budget keeps four fifths of the words and all of the
quality there, at a bounded cost (docs/benchmarks-history.md, "Retrieval quality")."""


NARROW = 0.5
"""A query ranks only its own tenant's matches (a word index with a tenant column) when the
tenant holds under this share of the records. A tenant that holds most of them (a store of one
tenant) gains nothing from it and pays for walking its own list of records beside the words'
(measured on one-tenant corpora: the full-text leg 9-35 % slower scoped), so such a query
ranks every match and keeps the tenant's, as an index without the column does."""


class FullTextIndex:
    name = "fts"
    max_propagation_s = 0.0
    synchronous = True

    def __init__(self, origin, secret: bytes):
        self._origin = origin
        self._text: WordIndex = origin.text
        self._token_key = hashlib.blake2b(b"efface-token-key", key=secret[:64], digest_size=32).digest()

    # -- epochs ----------------------------------------------------------------------
    def applied_epoch(self) -> int:
        return self._origin.current_epoch()

    def erased_epoch(self) -> int:
        return self._text.purged_epoch()

    purged_epoch = erased_epoch

    def stage(self, tx, tenant: str, puts: Sequence[int], drops: Sequence[int], texts: dict[int, str]) -> None:
        self._text.stage(tx, tenant, puts, drops, texts)

    def catch_up(self, upto: int | None = None) -> int:
        return self.applied_epoch()

    def persist(self) -> None:
        self._text.purge()

    erase = persist

    def replay_epoch(self) -> int:
        return self.applied_epoch()  # nothing to replay: it absorbs in the origin's transaction

    # -- reads -----------------------------------------------------------------------
    def _selective(self, words: list[str]) -> list[str]:
        """The query's rarest words while their postings fit :data:`POSTING_BUDGET` (at
        least the rarest one), one word per term the index holds ("runs" and "running" are
        one stem: asking for both would count its postings twice)."""
        return self._plan(words)[0]

    def _plan(self, words: list[str], tenant: str | None = None) -> tuple[list[str], list[int], bool]:
        """:meth:`_selective`'s words, the document frequency of each distinct term of the
        query (0 for a term no record holds), read in the same look-up, for the ceiling, and
        whether to rank only ``tenant``'s matches (:data:`NARROW`), from its count of
        records in the same look-up too."""
        seen: set[str] = set()
        kept: list[str] = []
        terms: list[str | None] = []
        for w, t in zip(words, self._text.index_terms(words), strict=True):
            if (t or w) not in seen:
                seen.add(t or w)
                kept.append(w)
                terms.append(t)
        words = kept
        if not words:
            return [], [], False
        scoped = tenant is not None and self._text.scoped
        df = self._text.document_frequency(words)
        dfs = [df.get(w, 0) for w, t in zip(words, terms, strict=True) if t is not None]
        narrow = scoped and self._text.tenant_count(tenant or "") < NARROW * self._text.doc_count()
        if len(words) <= 1:
            return words, dfs, narrow
        present = sorted((w for w in words if df.get(w)), key=lambda w: df[w])
        finders: list[str] = []
        read = 0
        for w in present:
            if finders and read + df[w] > POSTING_BUDGET:
                break
            finders.append(w)
            read += df[w]
        return finders, dfs, narrow

    def candidates(self, query: Query, n: int) -> list[int]:
        """Rank in the index first (cheap), then keep the rows live for the tenant, purpose and
        subject; widen the ranked list while filters thin it below ``n``."""
        return [rid for rid, _ in self.scored(query, n)]

    def scored(self, query: Query, n: int) -> list[tuple[int, float]]:
        """:meth:`candidates` with their BM25 scores (higher is better), for score fusion."""
        return self.scored_within(query, n)[0]

    def scored_within(self, query: Query, n: int) -> tuple[list[tuple[int, float]], float]:
        """:meth:`scored`, and the most BM25 a record could score for all of the query's words
        (those past the posting budget too; :meth:`ceiling`), from the same look-up."""
        every = content_words(query_words(query.text))
        words, dfs, narrow = self._plan(every, query.tenant)
        ceiling = self._text.bm25_ceiling(dfs)
        if not words:
            return [], ceiling
        m = 4 * n
        while True:
            found, seen = self._text.ranked_seen(
                words, query.tenant, query.purpose, query.subject, query.now, m, n, narrow=narrow, scoring=every
            )
            if len(found) >= n or m >= MAX_FTS_CANDIDATES or seen < m:
                return found, ceiling
            m = min(m * 4, MAX_FTS_CANDIDATES)

    def ranked_within(self, query: Query) -> tuple[Ranking, float] | None:
        """Every record the query's words find, best first, with its BM25 score over all of
        them, **not checked live**, and :meth:`ceiling`; for recall, which checks them best
        first in its own snapshot (with the other leg's candidates, each row looked up once).
        None when the index cannot rank without checking (then :meth:`scored_within`)."""
        unchecked = (
            cast(UncheckedRanking, self._text).ranked_unchecked if capable(self._text, UncheckedRanking) else None
        )
        if unchecked is None:
            return None
        every = content_words(query_words(query.text))
        words, dfs, narrow = self._plan(every, query.tenant)
        ceiling = self._text.bm25_ceiling(dfs)
        if not words:
            return Ranking.empty(), ceiling
        got = unchecked(words, query.tenant, narrow=narrow, scoring=every)
        return None if got is None else (got, ceiling)

    def ceiling(self, query: Query) -> float:
        """The most BM25 a record could score for all of the query's words: a record's score
        over it is the share of the query its words match, whatever the candidate list
        (recall fuses by that share)."""
        return self._text.bm25_ceiling(self._plan(content_words(query_words(query.text)))[1])

    # -- the erasure contract --------------------------------------------------------
    def _token(self, word: str) -> int:
        return int.from_bytes(hashlib.blake2b(word.encode(), key=self._token_key, digest_size=8).digest(), "little")

    def held(self, erased: Erased) -> list[Held]:
        return []  # the index holds tokens of the origin's text, fingerprinted as the text

    def evidence(self, erased: Erased) -> bytes:
        """Keyed hashes of the terms the index held for the sampled erased texts (their
        stems, in a stemming index; never the words or terms themselves)."""
        out = []
        for i in erased.sample:
            terms = self._text.index_terms(query_words(erased.texts[i]), remember=False)
            out.append([self._token(t) for t in dict.fromkeys(t for t in terms if t is not None)])
        return json.dumps(out).encode()

    def probe(self, tenant: str | None, erased: Sequence[int], evidence: bytes) -> Check:
        """Find the sampled erased texts' words that live records still use, and ask the index
        whether any of them still leads to the erased record it came from."""
        t0 = time.time()
        per_record = json.loads(evidence or b"[]")
        wanted = {h for words in per_record for h in words}
        recovered: dict[int, str] = {}
        # The words the index still held right after the delete, when this process made it
        # (the first verify after a forget); else every word the index holds.
        kept = self._text.terms_of_erased(probe_sample(erased)) if wanted else None
        if wanted:
            for n, term in enumerate(self._text.terms() if kept is None else kept):
                if n % 2048 == 0:
                    foreground.give_way()  # verify runs beside reads: recalls first
                h = self._token(term)
                if h in wanted:
                    recovered[h] = term
        leaked: set[int] = set()
        probes = 0
        sample = probe_sample(erased)
        if erased and len(sample) == len(per_record):
            # Each sampled record is asked about under its own words, one word per query
            # (FTS5 seeks a single word's doclist to the id; an OR of words reads them whole).
            # Asking every erased id under every sampled word sought each common word's
            # doclist a hundred times: 2 s for a 100-record erasure at 1M records.
            for rid, words in zip(sample, per_record, strict=True):
                for term in sorted({recovered[h] for h in words if h in recovered}):
                    probes += 1
                    leaked.update(self._text.matching_ids([term], [rid]))
        elif erased:  # evidence of another sampling: every erased id under every word
            for term in sorted({recovered[h] for words in per_record for h in words if h in recovered}):
                probes += 1
                leaked.update(self._text.matching_ids([term], erased))
        missing = sum(1 for h in wanted if h not in recovered)
        # the postings this process holds in memory for ranking (origin/sqlite/postings.py)
        in_memory = self._text.held_in_memory if isinstance(self._text, HeldInMemory) else None
        remembered: list[int] = in_memory(list(erased)) if in_memory is not None else []
        leaked.update(remembered)
        return check(
            "fts.by_text",
            "unreadable",
            "fail" if leaked else "pass",
            (
                f"{len(leaked)} erased records still matched by their words"
                + (f" ({len(remembered)} in the postings in memory)" if remembered else "")
                if leaked
                else (f"{len(erased)} erased records in none of the postings held in memory; " if in_memory else "")
                + f"{len(per_record)} sampled erased texts: {len(recovered)} of their words are still in the index "
                f"(used by live records), {missing} are gone; {probes} queries matched no erased record"
                + (
                    ""
                    if kept is None
                    else " (the words the index still held right after the delete, kept in this process, "
                    "instead of a walk of its whole vocabulary)"
                )
            ),
            t0,
        )

    def check_erased(self, tenant: str | None, epoch: int, erased: Sequence[int]) -> Check:
        t0 = time.time()
        purged = self.erased_epoch()
        return check(
            "fts.erased",
            "erased",
            "pass" if purged >= epoch else "fail",
            f"full-text index purged up to epoch {purged} (erasure epoch {epoch}): deleted entries are taken "
            "out of their pages in the delete's transaction, or dropped by a merge where that cannot be shown, "
            "and the freed pages zeroed (secure_delete)",
            t0,
        )

    def live_copies(self, tenant: str | None, windows: Sequence[bytes]) -> set[bytes]:
        return set()  # no copy of text is kept here (external content)

    def may_hold_live(self, file: str) -> bool:
        return False

    def close(self) -> None:
        return None

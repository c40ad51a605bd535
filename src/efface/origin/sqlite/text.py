"""The SQLite origin's word index: FTS5, external-content over ``records`` (no copy of the text).

It is updated inside the origin's transaction (the ``'delete'`` command, given the text the
row was indexed from), so a deleted row can never match again. With FTS5's ``secure-delete``
option the deleted row's entries leave the index pages in that same transaction, and the page
separators they leave behind are rewritten there too (:mod:`.separators`): an erasure costs
the pages it touches, not the index. (Until session 10 the index kept deleted tokens behind a
delete marker and the compactor merged the whole index, ``optimize``: 1.5 s at 1M records
whatever the erasure's size, with the writer held.) A store whose index does not stem, or a
separator that cannot be rewritten, still marks the index for that merge:
:meth:`SQLiteText.purge` runs it and :meth:`SQLiteText.purged_epoch` says up to where.

Stores made since the index stems (FTS5's ``porter`` tokenizer over ``unicode61``) hold
English stems ("runs", "running" -> "run"); a store made before keeps the tokenizer it was
made with (read from its own schema), so it opens and answers as it did. Queries go through
the index's own tokenizer either way; what the index holds for a word, :meth:`SQLiteText.index_terms`
asks SQLite's tokenizer itself, so verify probes exactly the terms the index holds.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import apsw

from ...model import probe_sample
from ...ranking import Ranking, live_first
from ...text import index_text
from ...text import words as text_words
from . import fts5
from .conn import Connections
from .edge import guarded, savepoint
from .inmemory import PostingsInMemory
from .postings import Change, Postings, counts_of
from .separators import rewrite_stale, still_held
from .tx import SQLiteTx

READ_WHOLE_PER_ID = 100
"""A doclist of at most this many postings per id asked about is read whole (see
:meth:`SQLiteText.matching_ids`)."""
DIRTY = "fts.dirty"
PURGED = "fts.purged_epoch"
FOLDED = "fts.folded"
"""Set once the index holds :func:`efface.text.index_text` of every record (older stores
indexed the text as written, which FTS5 does not fold the way efface does)."""
SPACED = "fts.zwsp_spaced"
"""Set once the index holds the words of every text with a zero-width space between letters
as two words (:func:`efface.text.spaced`); older stores indexed them joined, and a delete must
name the words the index holds."""


TOKENIZE_STEMMED = ("porter", ["unicode61", "remove_diacritics", "2"])
"""The tokenizer of a new store's index (schema.FTS_SCHEMA), as apsw names it."""


KEPT_IDS = 100_000
"""Erased records whose still-held words are remembered for verify's first probe at most."""
DF_MEMO_MIN = 1000
"""A term's document frequency is memoised from this many rows up: a rarer term's doclist is
short to count again, and a write can change its count by a large share (a word just written
must be found by the next recall)."""
DF_DRIFT = 0.01
"""A memoised document frequency is used while the store's size is within this share of its
size when counted (planning and the score ceiling need an estimate; a term of 1,000 rows or
more moves by at most that share)."""
TERM_MEMO = 65536
"""Words whose terms are memoised at most (the memo starts again when full)."""
log = logging.getLogger("efface.origin")
LiveIds = Callable[[Sequence[int], str, str, "str | None", float], set[int]]
"""``live_ids(ids, tenant, purpose, subject, now)``: those of ``ids`` live for them."""
_UNKNOWN = object()


@guarded
class SQLiteText(PostingsInMemory):
    """The word index of the origin whose connections it is handed; ``live_ids`` is the
    origin's live check (:meth:`.SQLiteReads.live_ids`), which ranked matches pass."""

    def __init__(self, db: Connections, live_ids: LiveIds):
        self._db = db
        self._live_ids = live_ids
        r = db.reader()
        self._docs = r.execute("SELECT count(*) FROM records").fetchone()[0]
        sql = r.execute("SELECT sql FROM sqlite_schema WHERE name='fts'").fetchone()[0]
        self.stems = "porter" in sql.lower()
        """Whether this store's index holds stems (stores made before stemming do not)."""
        self.secure = r.execute("SELECT 1 FROM fts_config WHERE k='secure-delete' AND v=1").fetchone() is not None
        """Whether the index deletes in place (FTS5 ``secure-delete``, set when the origin opens);
        if not, every delete marks the index for the compactor's merge."""
        self.scoped = "tenant" in {row[0] for row in r.execute("SELECT name FROM pragma_table_info('fts')")}
        """Whether this store's index holds each record's tenant (stores made before it do
        not: their queries rank every tenant's matches and keep their own tenant's after)."""
        # SQLite's own porter tokenizer, on a private connection (never the writer's, which a
        # long write holds), so a word's term here is exactly the one the index holds.
        self._tok_db = apsw.Connection(":memory:") if self.stems else None
        self._tok = self._tok_db.fts5_tokenizer(*TOKENIZE_STEMMED) if self._tok_db is not None else None
        self._tok_mu = threading.Lock()
        self._terms: dict[str, str | None] = {}
        """Each word's term (its stem), memoised: a recall's query words, met again and again.
        An erasure takes its texts' words out (:meth:`stage`)."""
        self._terms_mu = threading.Lock()
        self._held: dict[str, int] = {}
        """Records per tenant id, counted once per tenant and kept up by :meth:`stage` (an
        estimate, as ``_docs``: a rolled-back write is not taken back). Reading it from the
        index instead (the tenant id's document frequency) walked the tenant's whole list of
        records on every query: 2.5 ms of a 20 ms recall at 100k records."""
        self._held_mu = threading.Lock()
        self._df: dict[str, tuple[int, int]] = {}
        """Document frequencies of common terms (at least :data:`DF_MEMO_MIN` rows), each with
        the store's size when counted: FTS5 counts a term's rows by reading its whole doclist
        (4 ms for a recall's words at 100k records, ten times that at 1M). Used while the store
        has not grown or shrunk by more than :data:`DF_DRIFT` since; an erasure takes its
        words' terms out, as it does from the memo of terms."""
        self._df_mu = threading.Lock()
        self._kept: dict[int, tuple[str, ...]] = {}
        self._kept_mu = threading.Lock()
        self._init_postings()

    def _change(self, tenant_tokens: list[str], old: dict[int, list[str]], new: dict[int, str]) -> Change:
        """The change a transaction makes to the postings: ``old`` records' entries go (their
        terms), ``new`` ones come (folded texts)."""
        ch = Change()
        tenant = Counter(tenant_tokens)
        for rid, terms in old.items():
            ch.removed[rid] = (set(terms), tenant)
        for rid, text in new.items():
            ch.added[rid] = counts_of(self._token_list(text), tenant, len(tenant_tokens))
        return ch

    def stage(
        self, tx: SQLiteTx, tenant: str, puts: Sequence[int], drops: Sequence[int], texts: dict[int, str]
    ) -> None:
        c = tx.connection
        # The index is fed the folded words, not the text as written: FTS5's tokenizer keeps
        # invisible characters as separators and full-width letters as they are, so without
        # this a name with a soft hyphen inside, or in full-width letters, would be other
        # words here than in mention detection and in queries. A delete names the same words
        # (and, in a scoped index, the same tenant: a record never changes tenant).
        extra: tuple[str, ...] = (tenant,) if self.scoped else ()
        cols, marks = ("text, tenant", "?,?") if self.scoped else ("text", "?")
        folded = {rid: index_text(tx.old_texts[rid]) for rid in (*puts, *drops) if rid in tx.old_texts}
        # each old text's terms, read once: for the separators, verify's memo and the postings
        old_terms = {rid: self._token_list(text) for rid, text in folded.items()} if self._tok is not None else {}
        olds = [(rid, text, *extra) for rid, text in folded.items()]
        fresh = {rid: index_text(texts[rid]) for rid in puts}
        news = [(rid, fresh[rid], *extra) for rid in puts]
        erased_terms: set[str] = set()
        if olds:
            # secure-delete: the rows' entries leave the index pages here, in this transaction;
            # the separators they leave behind are rewritten too (see .separators). Where that
            # cannot be shown, the index is marked for a merge, in the same transaction: a
            # crash cannot lose the need to purge.
            c.executemany(f"INSERT INTO fts(fts, rowid, {cols}) VALUES('delete', ?, {marks})", olds)
            clean = False
            if self._tok is not None:
                words = {rid: set(terms) for rid, terms in old_terms.items()}
                erased_terms = set().union(*(words[rid] for rid in drops if rid in words))
                if self.secure:
                    clean = rewrite_stale(c, self._tokens(extra) | set().union(*words.values()))
                    # for verify's probe: the sampled records' words the index still holds
                    sampled = [rid for rid in probe_sample(sorted(drops)) if rid in words]
                    left = still_held(c, set().union(*(words[rid] for rid in sampled)))
                    self._remember_kept({rid: words[rid] & left for rid in sampled})
            if not clean:
                c.execute("INSERT INTO meta(k, v) VALUES(?, '1') ON CONFLICT(k) DO UPDATE SET v='1'", (DIRTY,))
        if news:
            c.executemany(f"INSERT INTO fts(rowid, {cols}) VALUES(?, {marks})", news)
        if self._tok is not None:  # for the postings in memory, applied once this commits
            tx.text_changes.append(self._change(self._token_list(tenant) if self.scoped else [], old_terms, fresh))
        # A running document count for the common-term cut-off (an estimate is enough).
        change = sum(1 for r in puts if r not in tx.old_texts) - sum(1 for r in drops if r in tx.old_texts)
        self._docs += change
        with self._held_mu:
            if tenant in self._held:
                self._held[tenant] += change
        if drops:
            # The words of what goes are taken out of the memo of terms (a recall may have put
            # them there): an erasure leaves none of them in this process. Only those: clearing
            # the whole memo at every forget made every recall tokenize its words again, each
            # word one more wait for the GIL on a busy server.
            gone = {w for rid in drops if rid in tx.old_texts for w in text_words(tx.old_texts[rid])}
            with self._terms_mu:
                for w in gone:
                    self._terms.pop(w, None)
            # and from the memo of document frequencies, the terms the index held for them
            with self._df_mu:
                for t in erased_terms if self.stems else gone:
                    self._df.pop(t, None)

    def fold_index(self) -> None:
        """Re-index every record from its folded words, once, for a store whose index was fed
        the text as written. The old segments are merged away at once, in the same write."""
        o = self._db
        if o.meta_get(FOLDED) == "1":
            if o.meta_get(SPACED) != "1":
                self._respace()
            return
        with o.write_lock, savepoint(o.writer):
            w = o.writer
            if w.execute("SELECT 1 FROM records LIMIT 1").fetchone() is not None:
                w.execute("INSERT INTO fts(fts) VALUES('delete-all')")
                rows = w.execute("SELECT id, text, tenant FROM records").fetchall()
                if self.scoped:
                    w.executemany(
                        "INSERT INTO fts(rowid, text, tenant) VALUES(?,?,?)",
                        ((rid, index_text(text), tenant) for rid, text, tenant in rows),
                    )
                else:
                    w.executemany(
                        "INSERT INTO fts(rowid, text) VALUES(?,?)", ((rid, index_text(text)) for rid, text, _t in rows)
                    )
                w.execute("INSERT INTO fts(fts) VALUES('optimize')")
            for flag in (FOLDED, SPACED):
                w.execute("INSERT INTO meta(k, v) VALUES(?, '1') ON CONFLICT(k) DO UPDATE SET v='1'", (flag,))

    def _respace(self) -> None:
        """Re-index, once, the records whose text has a zero-width space (U+200B): an older
        efface removed it, joining the words on each side, where :func:`efface.text.fold` now
        sees a word break. Each such record's entry is deleted by the words the index holds
        (the text without its zero-width spaces folds to exactly those) and put back by its
        words now, in one write, so a later delete (an erasure) names what the index holds."""
        o = self._db
        extra_col, extra_mark = (", tenant", ",?") if self.scoped else ("", "")
        with o.write_lock, savepoint(o.writer):
            w = o.writer
            rows = w.execute("SELECT id, text, tenant FROM records WHERE instr(text, char(8203)) > 0").fetchall()
            changed = False
            for rid, text, tenant in rows:
                old, new = index_text(text.replace("\u200b", "")), index_text(text)
                if old == new:
                    continue
                extra = (tenant,) if self.scoped else ()
                w.execute(
                    f"INSERT INTO fts(fts, rowid, text{extra_col}) VALUES('delete', ?, ?{extra_mark})",
                    (rid, old, *extra),
                )
                w.execute(f"INSERT INTO fts(rowid, text{extra_col}) VALUES(?, ?{extra_mark})", (rid, new, *extra))
                changed = True
            if changed and not self.secure:  # the old entries are left for the compactor's merge
                w.execute("INSERT INTO meta(k, v) VALUES(?, '1') ON CONFLICT(k) DO UPDATE SET v='1'", (DIRTY,))
            w.execute("INSERT INTO meta(k, v) VALUES(?, '1') ON CONFLICT(k) DO UPDATE SET v='1'", (SPACED,))

    def doc_count(self) -> int:
        return self._docs

    def tenant_count(self, tenant: str) -> int:
        """About how many records ``tenant`` (its id) holds: counted in the origin the first
        time it is asked, then kept up by the writes."""
        with self._held_mu:
            got = self._held.get(tenant)
        if got is None:
            (got,) = self._db.reader().execute("SELECT count(*) FROM records WHERE tenant=?", (tenant,)).fetchone()
            with self._held_mu:
                got = self._held.setdefault(tenant, got)
        return max(got, 0)

    def _remember_kept(self, kept: dict[int, set[str]]) -> None:
        """Keep which words of each erased record's text the index still held right after the
        delete: other records' words, never an erased one (those are gone from it). verify's
        first probe of the erasure asks for just these (:meth:`terms_of_erased`) instead of
        walking the whole vocabulary (1 s at 1M records). Kept before the commit: if the
        transaction rolls back, the ids stay live and a later erasure of them replaces this."""
        with self._kept_mu:
            for rid, terms in kept.items():
                self._kept.pop(rid, None)
                self._kept[rid] = tuple(sorted(terms))
            while len(self._kept) > KEPT_IDS:
                self._kept.pop(next(iter(self._kept)))

    def terms_of_erased(self, ids: Sequence[int]) -> list[str] | None:
        """The words of the erased ``ids``' texts that the index still held right after their
        delete, in this process (see :meth:`_remember_kept`); each id is answered once. None
        when an id is not known here (erased by another process, or the memo let it go): ask
        :meth:`terms` then. A word another record gave the index after the delete cannot lead
        to an erased id (ids are never reused), and one left for an erased id by a failed
        delete was still held, so it is here."""
        with self._kept_mu:
            if any(i not in self._kept for i in ids):
                return None
            return sorted({t for i in ids for t in self._kept.pop(i)})

    def _tokens(self, values: Iterable[str]) -> set[str]:
        """Every term the index's tokenizer makes of ``values`` (a stemming index only)."""
        assert self._tok is not None
        out: set[str] = set()
        with self._tok_mu:
            for value in values:
                for got in self._tok(value.encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None, include_offsets=False):
                    out.add(got if isinstance(got, str) else str(got[0]))
        return out

    def _token_list(self, value: str) -> list[str]:
        """The terms the index's tokenizer makes of ``value``, in order, repeats kept."""
        assert self._tok is not None
        with self._tok_mu:
            got = self._tok(
                value.encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None, include_offsets=False, include_colocated=False
            )
        return got  # type: ignore[return-value]  # plain strings without offsets and colocated tokens

    def _term_uncached(self, word: str) -> str | None:
        assert self._tok is not None
        with self._tok_mu:
            got = list(self._tok(word.encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None, include_offsets=False))
        if len(got) != 1:
            return None
        first = got[0]  # without offsets: (token, *colocated)
        return first if isinstance(first, str) else str(first[0])

    def index_terms(self, words: Sequence[str], *, remember: bool = True) -> list[str | None]:
        """The term the index holds for each (folded) word: its stem in a stemming index, the
        word itself otherwise; None for a word the tokenizer would not keep as one token.
        ``remember=False`` for the words of erased texts: they are not memoised."""
        if not self.stems:
            return list(words)
        term = self._term if remember else self._term_uncached
        return [term(w) for w in words]

    def _term(self, word: str) -> str | None:
        got = self._terms.get(word, _UNKNOWN)
        if got is not _UNKNOWN:
            return got  # type: ignore[return-value]
        term = self._term_uncached(word)
        with self._terms_mu:
            if len(self._terms) >= TERM_MEMO:
                self._terms.clear()
            self._terms[word] = term
        return term

    def document_frequency(self, words: Sequence[str]) -> dict[str, int]:
        """Records holding each word's term (words whose term the index lacks left out)."""
        terms = self.index_terms(words)
        wanted = sorted({t for t in terms if t is not None})
        if not wanted:
            return {}
        post = self._postings()
        if post is not None:  # exact, and no read of the index
            got = post.document_frequency(wanted)
            return {w: got[t] for w, t in zip(words, terms, strict=True) if t in got}
        docs = self._docs
        df: dict[str, int] = {}
        ask: list[str] = []
        with self._df_mu:
            for t in wanted:
                memo = self._df.get(t)
                if memo is not None and abs(docs - memo[1]) <= DF_DRIFT * max(memo[1], 1):
                    df[t] = memo[0]
                else:
                    ask.append(t)
        if ask:
            fresh = fts5.vocab_counts(self._db.reader(), ask)
            df.update(fresh)
            with self._df_mu:
                for t, n in fresh.items():
                    if n >= DF_MEMO_MIN:
                        if len(self._df) >= TERM_MEMO:
                            self._df.clear()
                        self._df[t] = (n, docs)
        return {w: df[t] for w, t in zip(words, terms, strict=True) if t in df}

    def bm25_ceiling(self, dfs: Sequence[int]) -> float:
        """The most BM25 any row could score for a query whose distinct terms are in ``dfs``
        rows each (FTS5's own idf over the rows it holds, its k1 = 1.2 and the term frequency
        saturated): what a row's score is a share of. A term in no row counts at the idf FTS5
        gives such a term.

        A term's rows can outnumber ``_docs``: the count moves when a write or an erasure is
        staged, before it commits (and is not taken back on a rollback), while ``dfs`` come
        from the index as a reader sees it, or from the postings, at another moment; a recall
        beside a forget saw a df above the count and failed on the log of a negative number.
        At any one moment a term is in at most every row, so a df above the count says there
        were at least df rows when it was counted: that is the size used for it. Such a term
        is in every row, and gets FTS5's floor idf, as FTS5 gives any term in most rows; the
        ceiling only scales this one recall's word scores for the fusion."""
        return fts5.bm25_ceiling(self._docs, dfs)

    def search(
        self, words: Sequence[str], tenant: str, purpose: str, subject: str | None, now: float, depth: int, limit: int
    ) -> list[int]:
        """Rank the ``depth`` best matches of any of ``words`` by BM25, keep those live for the
        tenant and purpose (and subject), best first, at most ``limit``."""
        return [rid for rid, _ in self.ranked(words, tenant, purpose, subject, now, depth, limit)]

    def ranked(
        self, words: Sequence[str], tenant: str, purpose: str, subject: str | None, now: float, depth: int, limit: int
    ) -> list[tuple[int, float]]:
        """:meth:`search` with each id's BM25 score (higher is better)."""
        return self.ranked_seen(words, tenant, purpose, subject, now, depth, limit)[0]

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
        """:meth:`ranked`, and how many matches the index ranked (at most ``depth``: fewer
        means there are no more to widen to; counted, in the same statement, only when fewer
        than ``limit`` were live, ``depth`` otherwise). One statement that returns one row (every row a statement
        returns is a wait for the GIL on a busy server: origin.py's docstring): the index
        ranks ``depth`` matches, and the origin checks them live best first, stopping at the
        ``limit``-th live one (the outer query keeps the ranked order, so SQLite does no
        sort of its own there and stops early: about 1.5 ms of a 9 ms leg at 100k records).
        A scoped index ranks only the tenant's own matches (its tenant column weighs nothing
        in the score) when ``narrow``; otherwise, and in an older index, every tenant's
        matches are ranked and the tenant's kept after."""
        post = self._postings()
        if post is not None:
            return self._ranked_in_memory(post, words, scoring, tenant, purpose, subject, now, depth, limit, narrow)
        return fts5.ranked_live(
            self._db.reader(), words, tenant, purpose, subject, now, depth, limit, scoped=self.scoped, narrow=narrow
        )

    def _ranked_in_memory(
        self,
        post: Postings,
        words: Sequence[str],
        scoring: Sequence[str],
        tenant: str,
        purpose: str,
        subject: str | None,
        now: float,
        depth: int,
        limit: int,
        narrow: bool,
    ) -> tuple[list[tuple[int, float]], int]:
        """:meth:`ranked_seen` from the postings in memory: the records ``words`` find, scored
        over ``scoring``'s words too, checked live best first in chunks until ``limit`` are
        (every match is ranked at once: all of them are checked if need be), and how many
        matched (at most ``depth``), as FTS5's ranking counts them."""
        ranking = self._rank(post, words, scoring, tenant, narrow)
        found = live_first(ranking, limit, lambda chunk: self._live_ids(chunk, tenant, purpose, subject, now))
        return found, min(len(ranking), depth)

    def _rank(self, post: Postings, words: Sequence[str], scoring: Sequence[str], tenant: str, narrow: bool) -> Ranking:
        finders = [t for t in self.index_terms(words) if t is not None]
        scorers = [t for t in self.index_terms(scoring) if t is not None]
        within = self._token_list(tenant) if narrow and self.scoped else None
        return post.rank(finders, scorers, within)

    def ranked_unchecked(
        self, words: Sequence[str], tenant: str, *, narrow: bool = True, scoring: Sequence[str] = ()
    ) -> Ranking | None:
        """Every record ``words`` find, best first, with its score over ``scoring``'s words
        too, as :meth:`ranked_seen` ranks them, but **not checked live**: for a caller that
        checks them itself, best first, in its own snapshot (recall). None while the
        postings are not in memory (then :meth:`ranked_seen`, which checks)."""
        post = self._postings()
        if post is None:
            return None
        return self._rank(post, words, scoring, tenant, narrow)

    def count_matches(self, words: Sequence[str], cap: int) -> int:
        """How many rows match any of ``words``, counting at most ``cap``."""
        return fts5.count_matches(self._db.reader(), words, cap)

    def terms(self) -> Iterable[str]:
        """Every word the index holds (for verify: which erased words live records still use)."""
        return fts5.vocabulary(self._db.reader())

    def matching_ids(self, terms: Sequence[str], ids: Sequence[int]) -> list[int]:
        """Which of ``ids`` the index still holds under any of ``terms`` (terms as
        :meth:`terms` lists them). FTS5 seeks a term's doclist to each id (about 0.3 ms a
        seek here) or reads it whole (about 1 us a posting): whichever costs less, so the
        cost follows the ids asked about, not the store."""
        if not ids:
            return []
        # A query string goes through the tokenizer again, and a stem is not always its own
        # stem (porter: "caus" stems to "cau"); such terms are looked up as they are, in the
        # index's instance table, so the probe asks for the exact term.
        direct = [t for t, again in zip(terms, self.index_terms(terms), strict=True) if again == t]
        exact = [t for t in terms if t not in set(direct)]
        return fts5.matching_ids(self._db.reader(), direct, exact, ids, READ_WHOLE_PER_ID * len(ids))

    def purge(self) -> bool:
        """Merge the index segments if any row was deleted since the last merge, so no deleted
        token stays in ``fts_data``; and take erased ids out of the postings' long arrays
        (:data:`.postings.DROP_NOW`). Returns True when it merged."""
        post = self._post
        if post is not None:
            post.purge()
        o = self._db
        if o.meta_get(DIRTY) != "1":
            return False
        with o.write_lock:
            epoch = o.current_epoch()
            with savepoint(o.writer):
                o.writer.execute("INSERT INTO fts(fts) VALUES('optimize')")
                o.writer.execute("UPDATE meta SET v='0' WHERE k=?", (DIRTY,))
                o.writer.execute(
                    "INSERT INTO meta(k, v) VALUES(?, ?) ON CONFLICT(k) DO UPDATE SET v=excluded.v",
                    (PURGED, str(epoch)),
                )
        return True

    def purged_epoch(self) -> int:
        """The newest epoch whose deleted tokens are physically gone from the index."""
        o = self._db
        if o.meta_get(DIRTY) != "1":
            return o.current_epoch()
        return int(o.meta_get(PURGED) or 0)

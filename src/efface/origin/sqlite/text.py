"""The SQLite origin's word index: FTS5, external-content over ``records`` (no copy of the text).

It is updated inside the origin's transaction (the ``'delete'`` command, given the text the
row was indexed from), so a deleted row can never match again. The deleted row's *tokens*
stay in the index segments behind a delete marker until the segments are merged. FTS5's
``secure-delete`` option would rewrite them at once, but we measured it at ~150 ms per
100-record forget on a 100k store, so the compactor purges instead: ``optimize`` merges the
segments, dropping deleted entries, and :meth:`SQLiteText.purged_epoch` says up to where.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ...text import index_text
from .edge import guarded
from .tx import LIVE, NOT_QUARANTINED, SQLiteTx, in_chunks

if TYPE_CHECKING:  # pragma: no cover
    from .origin import SQLiteOrigin

READ_WHOLE_PER_ID = 100
"""A doclist of at most this many postings per id asked about is read whole (see
:meth:`SQLiteText.matching_ids`)."""
DIRTY = "fts.dirty"
PURGED = "fts.purged_epoch"
FOLDED = "fts.folded"
"""Set once the index holds :func:`efface.text.index_text` of every record (older stores
indexed the text as written, which FTS5 does not fold the way efface does)."""


def _match(words: Sequence[str]) -> str:
    """A safe FTS5 query: each word quoted, OR-ed (operators in the input are just words)."""
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words)


@guarded
class SQLiteText:
    def __init__(self, origin: SQLiteOrigin):
        self._o = origin
        self._docs = origin._r().execute("SELECT count(*) FROM records").fetchone()[0]

    def stage(self, tx: SQLiteTx, puts: Sequence[int], drops: Sequence[int], texts: dict[int, str]) -> None:
        c = tx.connection
        # The index is fed the folded words, not the text as written: FTS5's tokenizer keeps
        # invisible characters as separators and full-width letters as they are, so without
        # this a name with a soft hyphen inside, or in full-width letters, would be other
        # words here than in mention detection and in queries. A delete names the same words.
        olds = [(rid, index_text(tx.old_texts[rid])) for rid in (*puts, *drops) if rid in tx.old_texts]
        if olds:
            c.executemany("INSERT INTO fts(fts, rowid, text) VALUES('delete', ?, ?)", olds)
            # in the same transaction: a crash cannot lose the need to purge
            c.execute("INSERT INTO meta(k, v) VALUES(?, '1') ON CONFLICT(k) DO UPDATE SET v='1'", (DIRTY,))
        if puts:
            c.executemany("INSERT INTO fts(rowid, text) VALUES(?,?)", [(rid, index_text(texts[rid])) for rid in puts])
        # A running document count for the common-term cut-off (an estimate is enough).
        self._docs += sum(1 for r in puts if r not in tx.old_texts) - sum(1 for r in drops if r in tx.old_texts)

    def fold_index(self) -> None:
        """Re-index every record from its folded words, once, for a store whose index was fed
        the text as written. The old segments are merged away at once, in the same write."""
        o = self._o
        if o.meta_get(FOLDED) == "1":
            return
        with o.write_lock, o.writer:
            w = o.writer
            if w.execute("SELECT 1 FROM records LIMIT 1").fetchone() is not None:
                w.execute("INSERT INTO fts(fts) VALUES('delete-all')")
                w.executemany(
                    "INSERT INTO fts(rowid, text) VALUES(?,?)",
                    ((rid, index_text(text)) for rid, text in w.execute("SELECT id, text FROM records").fetchall()),
                )
                w.execute("INSERT INTO fts(fts) VALUES('optimize')")
            w.execute("INSERT INTO meta(k, v) VALUES(?, '1') ON CONFLICT(k) DO UPDATE SET v='1'", (FOLDED,))

    def doc_count(self) -> int:
        return self._docs

    def document_frequency(self, words: Sequence[str]) -> dict[str, int]:
        marks = ",".join("?" * len(words))
        return dict(self._o._r().execute(f"SELECT term, doc FROM fts_vocab WHERE term IN ({marks})", list(words)))

    def search(
        self, words: Sequence[str], tenant: str, purpose: str, subject: str | None, now: float, depth: int, limit: int
    ) -> list[int]:
        """Rank the ``depth`` best matches of any of ``words`` by BM25, keep those live for the
        tenant and purpose (and subject), best first, at most ``limit``."""
        sub = " AND c.subject=?" if subject is not None else ""
        extra = [subject] if subject is not None else []
        rows = (
            self._o._r()
            .execute(
                "SELECT i.rowid FROM (SELECT rowid, bm25(fts) AS score FROM fts WHERE fts MATCH ?"
                "  ORDER BY score LIMIT ?) i JOIN records r ON r.id=i.rowid"
                # '+' keeps SQLite from scanning the (tenant, key) index instead of rowid lookups
                f" WHERE +r.tenant=? AND {NOT_QUARANTINED} AND EXISTS (SELECT 1 FROM claims c WHERE c.record_id=r.id"
                f" AND c.purpose=? AND {LIVE}{sub})"
                " ORDER BY i.score LIMIT ?",
                [_match(words), depth, tenant, purpose, now, *extra, limit],
            )
            .fetchall()
        )
        return [r[0] for r in rows]

    def count_matches(self, words: Sequence[str], cap: int) -> int:
        """How many rows match any of ``words``, counting at most ``cap``."""
        row = (
            self._o._r()
            .execute("SELECT count(*) FROM (SELECT 1 FROM fts WHERE fts MATCH ? LIMIT ?)", (_match(words), cap))
            .fetchone()
        )
        return row[0]

    def terms(self) -> Iterable[str]:
        """Every word the index holds (for verify: which erased words live records still use)."""
        return [r[0] for r in self._o._r().execute("SELECT term FROM fts_vocab")]

    def matching_ids(self, words: Sequence[str], ids: Sequence[int]) -> list[int]:
        """Which of ``ids`` the index still matches for any of ``words``. FTS5 seeks a word's
        doclist to each id (about 0.3 ms a seek here) or reads it whole (about 1 us a
        posting): whichever costs less, so the cost follows the ids asked about, not the
        store."""
        if not ids:
            return []
        if sum(self.document_frequency(words).values()) <= READ_WHOLE_PER_ID * len(ids):
            wanted = set(ids)
            rows = self._o._r().execute("SELECT rowid FROM fts WHERE fts MATCH ?", (_match(words),))
            return [r[0] for r in rows if r[0] in wanted]
        out: list[int] = []
        for chunk, marks in in_chunks(ids):
            out += [
                r[0]
                for r in self._o._r().execute(
                    f"SELECT rowid FROM fts WHERE fts MATCH ? AND rowid IN ({marks})", (_match(words), *chunk)
                )
            ]
        return out

    def purge(self) -> bool:
        """Merge the index segments if any row was deleted since the last merge, so no deleted
        token stays in ``fts_data``. Returns True when it merged."""
        o = self._o
        if o.meta_get(DIRTY) != "1":
            return False
        with o.write_lock:
            epoch = o.current_epoch()
            with o.writer:
                o.writer.execute("INSERT INTO fts(fts) VALUES('optimize')")
                o.writer.execute("UPDATE meta SET v='0' WHERE k=?", (DIRTY,))
                o.writer.execute(
                    "INSERT INTO meta(k, v) VALUES(?, ?) ON CONFLICT(k) DO UPDATE SET v=excluded.v",
                    (PURGED, str(epoch)),
                )
        return True

    def purged_epoch(self) -> int:
        """The newest epoch whose deleted tokens are physically gone from the index."""
        o = self._o
        if o.meta_get(DIRTY) != "1":
            return o.current_epoch()
        return int(o.meta_get(PURGED) or 0)

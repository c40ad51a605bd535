"""Full-text read path: an SQLite FTS5 index inside the origin file.

The table is *external-content* over ``records`` (``content='records'``): it keeps tokens,
never a copy of the text, so text can only ever be served from the origin. It is updated
inside the origin's transaction (the ``'delete'`` command, given the text the row was
indexed from), so a deleted row can never match again: its applied epoch never lags.

The deleted row's *tokens* stay in the index segments behind a delete marker until the
segments are merged. FTS5's ``secure-delete`` option would rewrite them at once, but we
measured it at ~150 ms per 100-record forget on a 100k store (it rewrites every page that
holds a deleted token), so the compactor purges instead: ``optimize`` merges the segments,
dropping deleted entries, and :meth:`FullTextIndex.purged_epoch` says up to where.
"""

from __future__ import annotations

import re
from typing import Sequence

from ..embed.hashing import fold
from .base import Query

# unicode61 splits on everything but letters and digits, "_" included
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
MAX_QUERY_TERMS = 32

SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(
    text, content='records', content_rowid='id', tokenize='unicode61 remove_diacritics 2'
);
"""


DIRTY = "fts.dirty"
PURGED = "fts.purged_epoch"
MAX_FTS_CANDIDATES = 20000
COMMON_TERM_SHARE = 0.01
"""Query terms in more than this share of all records are dropped (BM25 gives them almost no
weight, and scoring their long doclists is what makes a query slow); if every term is that
common, the rarest one is kept. The same idea as Lucene's common-terms query."""


def query_words(text: str) -> list[str]:
    return list(dict.fromkeys(_WORD.findall(fold(text))))[:MAX_QUERY_TERMS]


def match_expression(words: list[str]) -> str | None:
    """Turn words into a safe FTS5 query: each word quoted, OR-ed. Operators, quotes and
    column filters in the input are just words here, so no input is an FTS syntax error."""
    if not words:
        return None
    return " OR ".join(f'"{w}"' for w in words)


def phrase_query(text: str) -> str | None:
    """An FTS5 phrase query for the words of ``text`` in order."""
    words = _WORD.findall(fold(text))
    return '"' + " ".join(words) + '"' if words else None


class FullTextIndex:
    name = "fts"
    max_propagation_s = 0.0
    synchronous = True

    def __init__(self, origin):
        self._origin = origin
        conn = origin.connection
        with conn:
            conn.execute(SCHEMA)
            conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS fts_vocab USING fts5vocab(fts, 'row')")
            conn.execute("INSERT INTO fts(fts, rank) VALUES('secure-delete', 0)")
        self._docs = conn.execute("SELECT count(*) FROM records").fetchone()[0]

    def applied_epoch(self) -> int:
        return self._origin.current_epoch()

    def stage(self, tx, tenant: str, puts: Sequence[int], drops: Sequence[int], texts: dict[int, str]) -> None:
        olds = [(rid, tx.old_texts[rid]) for rid in (*puts, *drops) if rid in tx.old_texts]
        tx.executemany("INSERT INTO fts(fts, rowid, text) VALUES('delete', ?, ?)", olds)
        if olds:  # in the same transaction: a crash cannot lose the need to purge
            tx.execute("INSERT INTO meta(k, v) VALUES(?, '1') ON CONFLICT(k) DO UPDATE SET v='1'", (DIRTY,))
        tx.executemany("INSERT INTO fts(rowid, text) VALUES(?,?)", [(rid, texts[rid]) for rid in puts])
        # A running document count for the common-term cut-off (an estimate is enough).
        self._docs += sum(1 for r in puts if r not in tx.old_texts) - sum(1 for r in drops if r in tx.old_texts)

    def catch_up(self, upto: int | None = None) -> int:
        return self.applied_epoch()

    def persist(self) -> None:
        self.purge()

    def purge(self) -> bool:
        """Merge the index segments if any row was deleted since the last merge, so no deleted
        token stays in ``fts_data``. Returns True when it merged."""
        if self._origin.meta_get(DIRTY) != "1":
            return False
        epoch = self._origin.current_epoch()
        conn = self._origin.connection
        with conn:
            conn.execute("INSERT INTO fts(fts) VALUES('optimize')")
            conn.execute("UPDATE meta SET v='0' WHERE k=?", (DIRTY,))
            conn.execute("INSERT INTO meta(k, v) VALUES(?, ?) ON CONFLICT(k) DO UPDATE SET v=excluded.v",
                         (PURGED, str(epoch)))
        return True

    def purged_epoch(self) -> int:
        """The newest epoch whose deleted tokens are physically gone from the index."""
        if self._origin.meta_get(DIRTY) != "1":
            return self._origin.current_epoch()
        return int(self._origin.meta_get(PURGED) or 0)

    def _selective(self, words: list[str]) -> list[str]:
        """Drop the query's very common terms (keeping at least the rarest one)."""
        if len(words) <= 1:
            return words
        conn = self._origin.connection
        marks = ",".join("?" * len(words))
        df = dict(conn.execute(f"SELECT term, doc FROM fts_vocab WHERE term IN ({marks})", words))
        present = sorted((w for w in words if df.get(w)), key=lambda w: df[w])
        if not present:
            return []
        limit = max(50, COMMON_TERM_SHARE * self._docs)
        return [w for w in present if df[w] <= limit] or present[:1]

    def candidates(self, query: Query, n: int) -> list[int]:
        """Rank inside FTS5 first (cheap), then keep the rows live for the tenant, purpose and
        subject; widen the ranked list while filters thin it below ``n``."""
        expr = match_expression(self._selective(query_words(query.text)))
        if expr is None:
            return []
        sub = " AND c.subject=?" if query.subject is not None else ""
        extra = [query.subject] if query.subject is not None else []
        conn = self._origin.connection
        m = 4 * n
        while True:
            rows = conn.execute(
                "SELECT i.rowid FROM (SELECT rowid, bm25(fts) AS score FROM fts WHERE fts MATCH ?"
                "  ORDER BY score LIMIT ?) i JOIN records r ON r.id=i.rowid"
                # '+' keeps SQLite from scanning the (tenant, key) index instead of rowid lookups
                " WHERE +r.tenant=? AND NOT EXISTS (SELECT 1 FROM quarantine q WHERE q.record_id=r.id)"
                " AND EXISTS (SELECT 1 FROM claims c WHERE c.record_id=r.id"
                f" AND c.purpose=? AND (c.expires_at IS NULL OR c.expires_at>?){sub})"
                " ORDER BY i.score LIMIT ?",
                [expr, m, query.tenant, query.purpose, query.now, *extra, n],
            ).fetchall()
            if len(rows) >= n or m >= MAX_FTS_CANDIDATES or not self._more(expr, m):
                return [r[0] for r in rows]
            m = min(m * 4, MAX_FTS_CANDIDATES)

    def _more(self, expr: str, m: int) -> bool:
        """Whether the match has more than ``m`` rows (so widening can find more)."""
        row = self._origin.connection.execute(
            "SELECT count(*) FROM (SELECT 1 FROM fts WHERE fts MATCH ? LIMIT ?)", (expr, m + 1)).fetchone()
        return row[0] > m

    def close(self) -> None:
        return None

"""Full-text read path: an SQLite FTS5 index inside the origin file.

The table is *external-content* over ``records`` (``content='records'``): it keeps tokens,
never a copy of the text, so text can only ever be served from the origin. With the
``secure-delete`` option, deleting a row's tokens (the ``'delete'`` command, given the text
they were indexed from) removes them from the index segments at once, rather than
leaving tombstones until the next merge; measured, a contentless table keeps deleted tokens
in its segments until ``optimize``. It is updated inside the origin's transaction, so its
applied epoch never lags the origin.
"""

from __future__ import annotations

import re
from typing import Sequence

from ..embed.hashing import fold
from .base import Query

_WORD = re.compile(r"\w+", re.UNICODE)
MAX_QUERY_TERMS = 32

SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(
    text, content='records', content_rowid='id', tokenize='unicode61 remove_diacritics 2'
);
"""


def match_expression(text: str) -> str | None:
    """Turn free text into a safe FTS5 query: each word quoted, OR-ed. Operators, quotes and
    column filters in the input are just words here, so no input is an FTS syntax error."""
    words = list(dict.fromkeys(_WORD.findall(fold(text))))[:MAX_QUERY_TERMS]
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
            conn.execute("INSERT INTO fts(fts, rank) VALUES('secure-delete', 1)")

    def applied_epoch(self) -> int:
        return self._origin.current_epoch()

    def stage(self, tx, tenant: str, puts: Sequence[int], drops: Sequence[int], texts: dict[int, str]) -> None:
        for rid in list(puts) + list(drops):
            old = tx.old_texts.get(rid)
            if old is not None:
                tx.execute("INSERT INTO fts(fts, rowid, text) VALUES('delete', ?, ?)", (rid, old))
        for rid in puts:
            tx.execute("INSERT INTO fts(rowid, text) VALUES(?,?)", (rid, texts[rid]))

    def catch_up(self, upto: int | None = None) -> int:
        return self.applied_epoch()

    def persist(self) -> None:
        return None

    def candidates(self, query: Query, n: int) -> list[int]:
        expr = match_expression(query.text)
        if expr is None:
            return []
        sub = " AND c.subject=?" if query.subject is not None else ""
        args = [expr, query.tenant, query.purpose, query.now] + ([query.subject] if query.subject is not None else []) + [n]
        rows = self._origin.connection.execute(
            "SELECT f.rowid FROM fts f JOIN records r ON r.id=f.rowid"
            " WHERE fts MATCH ? AND r.tenant=?"
            " AND NOT EXISTS (SELECT 1 FROM quarantine q WHERE q.record_id=r.id)"
            " AND EXISTS (SELECT 1 FROM claims c WHERE c.record_id=r.id"
            f" AND c.purpose=? AND (c.expires_at IS NULL OR c.expires_at>?){sub})"
            " ORDER BY bm25(fts) LIMIT ?",
            args,
        )
        return [r[0] for r in rows]

    def close(self) -> None:
        return None

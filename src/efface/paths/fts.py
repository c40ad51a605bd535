"""Full-text read path: an SQLite FTS5 index inside the origin file.

The table is *contentless* (``content=''``): it keeps tokens, never a copy of the text,
so text can only ever be served from the origin. ``contentless_delete=1`` lets a row be
deleted by rowid, and the ``secure-delete`` option makes a delete remove the row's tokens
from the index segments at once instead of leaving them until the next merge. It is
updated inside the origin's transaction, so its applied epoch never lags the origin.
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
    text, content='', contentless_delete=1, tokenize='unicode61 remove_diacritics 2'
);
"""


def match_expression(text: str) -> str | None:
    """Turn free text into a safe FTS5 query: each word quoted, OR-ed. Operators, quotes and
    column filters in the input are just words here, so no input is an FTS syntax error."""
    words = list(dict.fromkeys(_WORD.findall(fold(text))))[:MAX_QUERY_TERMS]
    if not words:
        return None
    return " OR ".join(f'"{w}"' for w in words)


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
            tx.execute("DELETE FROM fts WHERE rowid=?", (rid,))
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
            " WHERE fts MATCH ? AND r.tenant=? AND EXISTS (SELECT 1 FROM claims c WHERE c.record_id=r.id"
            f" AND c.purpose=? AND (c.expires_at IS NULL OR c.expires_at>?){sub})"
            " ORDER BY bm25(fts) LIMIT ?",
            args,
        )
        return [r[0] for r in rows]

    def close(self) -> None:
        return None

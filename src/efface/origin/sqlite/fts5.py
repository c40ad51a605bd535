"""The word index's statements: FTS5 queries, BM25 ranked and checked live, and verify's look-ups.

What :class:`~.text.SQLiteText` asks of the FTS5 table, as functions of a reader connection:
a safe ``MATCH`` string (:func:`match`), BM25's score ceiling (:func:`bm25_ceiling`), the
ranking statement that checks matches live in the same statement (:func:`ranked_live`), the
document frequencies of terms (:func:`vocab_counts`), and the exact look-ups of verify's
probes (:func:`matching_ids`). Every statement on the recall path returns one row: every row
a statement returns is a wait for the GIL on a busy server (:mod:`.reads`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from .rows import LIVE, NOT_QUARANTINED, in_chunks

FTS5_K1_PLUS_1 = 2.2
"""FTS5's bm25() term-frequency saturation: k1 = 1.2 (its default, which efface keeps), so one
term adds at most (k1 + 1) x its idf."""


def match(words: Sequence[str]) -> str:
    """A safe FTS5 query: each word quoted, OR-ed (operators in the input are just words)."""
    return " OR ".join(quoted(w) for w in words)


def quoted(word: str) -> str:
    return '"' + word.replace('"', '""') + '"'


def tenant_match(tenant: str, words: Sequence[str]) -> str:
    """:func:`match` over the text column, for one tenant's rows only (a scoped index)."""
    return f"tenant : {quoted(tenant)} AND text : ({match(words)})"


def bm25_ceiling(docs: int, dfs: Sequence[int]) -> float:
    """The most BM25 any row could score for a query whose distinct terms are in ``dfs`` rows
    each, in an index of about ``docs`` rows (see :meth:`.SQLiteText.bm25_ceiling`)."""
    n = max(docs, 1)
    return FTS5_K1_PLUS_1 * sum(max(1e-6, math.log((max(n, df) - df + 0.5) / (df + 0.5))) for df in dfs)


def vocab_counts(r: Any, terms: Sequence[str]) -> dict[str, int]:
    """How many rows hold each of ``terms`` (those the index holds), in one row."""
    marks = ",".join("?" * len(terms))
    (got,) = r.execute(
        f"SELECT json_group_object(term, doc) FROM fts_vocab WHERE term IN ({marks})", list(terms)
    ).fetchone()  # one row: every row a statement returns is a wait for the GIL on a busy server
    return json.loads(got)


def ranked_live(
    r: Any,
    words: Sequence[str],
    tenant: str,
    purpose: str,
    subject: str | None,
    now: float,
    depth: int,
    limit: int,
    *,
    scoped: bool,
    narrow: bool,
) -> tuple[list[tuple[int, float]], int]:
    """FTS5 ranks ``depth`` matches by BM25, and the origin checks them live best first in the
    same statement (see :meth:`.SQLiteText.ranked_seen`)."""
    sub = " AND c.subject=?" if subject is not None else ""
    extra = [subject] if subject is not None else []
    if scoped:
        # wide: the plain words (a column filter costs ~12 % at 10k records); the tenant
        # column holds only tenant ids, and a row found there alone is still filtered live
        query = tenant_match(tenant, words) if narrow else match(words)
        score = "bm25(fts, 1.0, 0.0)"
    else:
        query, score = match(words), "bm25(fts)"
    got, seen = r.execute(
        # CASE is lazy: the matches are counted only when the live ones fell short
        "SELECT j, CASE WHEN json_array_length(j) < ? THEN"
        " (SELECT count(*) FROM (SELECT 1 FROM fts WHERE fts MATCH ? LIMIT ?)) END"
        " FROM (SELECT json_group_array(json_array(rowid, -score) ORDER BY score) AS j FROM ("
        f"SELECT i.rowid, i.score FROM (SELECT rowid, {score} AS score FROM fts WHERE fts MATCH ?"
        " ORDER BY score LIMIT ?) i"
        # '+' keeps SQLite from scanning the (tenant, key) index instead of rowid lookups
        f" JOIN records r ON r.id=i.rowid AND +r.tenant=? WHERE {NOT_QUARANTINED}"
        f" AND EXISTS (SELECT 1 FROM claims c WHERE c.record_id=r.id AND c.purpose=? AND {LIVE}{sub})"
        " ORDER BY i.score LIMIT ?))",
        [limit, query, depth, query, depth, tenant, purpose, now, *extra, limit],
    ).fetchone()
    found = [(row[0], row[1]) for row in json.loads(got)] if got is not None else []
    return found, (depth if seen is None else seen)


def count_matches(r: Any, words: Sequence[str], cap: int) -> int:
    """How many rows match any of ``words``, counting at most ``cap``."""
    row = r.execute(
        "SELECT count(*) FROM (SELECT 1 FROM fts WHERE fts MATCH ? LIMIT ?)", (match(words), cap)
    ).fetchone()
    return row[0]


def vocabulary(r: Any) -> list[str]:
    """Every term the index holds."""
    return [row[0] for row in r.execute("SELECT term FROM fts_vocab")]


def matching_ids(r: Any, direct: Sequence[str], exact: Sequence[str], ids: Sequence[int], whole: int) -> list[int]:
    """Which of ``ids`` the index holds under any of the terms: ``exact`` ones looked up as
    they are in the instance table, ``direct`` ones (their own terms) through ``MATCH``, each
    doclist read whole when the terms hold at most ``whole`` postings, else sought to each id."""
    out: set[int] = set()
    wanted = set(ids)
    for t in exact:
        out.update(row[0] for row in r.execute("SELECT doc FROM fts_inst WHERE term=?", (t,)) if row[0] in wanted)
    if not direct:
        return sorted(out)
    if postings_at_most(r, direct, whole):
        rows = r.execute("SELECT rowid FROM fts WHERE fts MATCH ?", (match(direct),))
        out.update(row[0] for row in rows if row[0] in wanted)
        return sorted(out)
    for chunk, marks in in_chunks(ids):
        out.update(
            row[0]
            for row in r.execute(
                f"SELECT rowid FROM fts WHERE fts MATCH ? AND rowid IN ({marks})", (match(direct), *chunk)
            )
        )
    return sorted(out)


def postings_at_most(r: Any, terms: Sequence[str], cap: int) -> bool:
    """Whether ``terms`` hold at most ``cap`` postings in all, counting no further than
    ``cap`` (instances, at least as many as rows): the exact document frequency reads a
    common term's whole doclist (30 ms for "and" at 1M records)."""
    total = 0
    for t in terms:
        row = r.execute(
            "SELECT count(*) FROM (SELECT 1 FROM fts_inst WHERE term=? LIMIT ?)", (t, cap - total + 1)
        ).fetchone()
        total += row[0] if row else 0
        if total > cap:
            return False
    return True

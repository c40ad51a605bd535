"""The words a deleted row leaves in FTS5's page separators, and how they are rewritten.

With the ``secure-delete`` option FTS5 takes a deleted row's entries out of the index pages
that hold them, in the delete's own transaction: a term no other row holds is gone from the
leaves. One copy is left. Each leaf page of a segment (after the first) has a separator in
``fts_idx``: the shortest prefix of the page's first term that sorts after the previous
page's last term. When the deleted term was first on its page, the separator stays: a
prefix of an erased word ("qhvds" of "qhvdshwcctlm"), one separator in a hundred deleted
terms on a test index, so about every other 100-record erasure.

:func:`rewrite_stale` finds them from the deleted rows' own terms: the separators that are a
prefix of one, in one pass over ``fts_idx``; for each, the first term now on its page, read
from the page itself. A separator that is not a prefix of it is stale, and becomes that term:
a valid separator, since it sorts after the old one, hence after the previous page's last
term, and is the page's first. (``integrity-check`` passes after it; tested.) Where a page
does not read as expected, the index's vocabulary answers instead: the smallest term held at
or after the separator. A separator that is a prefix of a term some live row holds stays as
it is: its bytes are that row's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

MAIN = b"0"
"""The byte FTS5 puts before every term of its main index (prefix indexes use others)."""
SEGMENT_SHIFT = 37
"""A segment's leaf page ``p`` is row ``segid << 37 | p`` of ``fts_data`` (31 bits of page,
5 of height, 1 for the doclist-index flag)."""
HEAD_BYTES = 64
"""Prefixes of a deleted term looked up one by one, up to this length (see :func:`_candidates`)."""
BATCH_PREFIXES = 1 << 16
"""About how many prefixes one pass over ``fts_idx`` looks up."""


def rewrite_stale(c: Any, terms: Iterable[str]) -> bool:
    """Rewrite every separator in ``fts_idx`` that is a prefix of one of ``terms`` (the
    deleted rows' terms) and of no term the index still holds. Runs on the writer ``c``,
    in the transaction that deleted the rows, after the deletes. Returns whether every
    stale separator was rewritten (if not, the index must be merged: ``optimize``).

    The separators that could be stale are found first (:func:`_candidates`, a pass over
    ``fts_idx`` per batch of terms, a few rows per thousand records), then each is looked
    up once: looking every deleted term up instead cost 0.17 ms a term, most of a
    100-record forget."""
    wanted = sorted(set(terms))
    if not wanted:
        return True
    # FTS5 keeps the transaction's changes in memory until a query of the index (or the
    # commit) writes them to the pages: one lookup, so the pages read below are the new ones.
    c.execute("SELECT 1 FROM fts_inst WHERE term=? LIMIT 1", (wanted[0],)).fetchone()
    for segid, key, pgno in _candidates(c, wanted):
        first = _first_term(c, segid, pgno >> 1)  # the column holds the page number << 1 | a flag
        if first is not None and first >= key:
            if not first.startswith(key):  # the page's first term went: it is the separator now
                c.execute("UPDATE fts_idx SET term=? WHERE segid=? AND term=?", (first, segid, key))
            continue
        if not _rewrite_from_vocabulary(c, segid, key):
            return False
    return True


def _candidates(c: Any, terms: list[str]) -> list[tuple[int, bytes, int]]:
    """``(segid, separator, pgno)`` of every separator that is a prefix of one of ``terms``.

    A term's prefixes are looked up by value up to :data:`HEAD_BYTES`; a longer separator
    can only be a prefix of a term whose first ``HEAD_BYTES`` it shares, so those are found
    by their head and checked against the terms that have it. Every prefix of every term
    (as this once did) grows with the square of a word's length: a 64 KiB one-word text
    (a token, a base64 attachment) built gigabytes of prefixes and its forget failed.
    Terms go in batches of at most :data:`BATCH_PREFIXES` prefixes, so memory stays
    bounded whatever the texts; each batch is one pass over ``fts_idx``."""
    found: dict[tuple[int, bytes], int] = {}
    batch: list[bytes] = []
    size = 0
    for term in terms:
        raw = MAIN + term.encode("utf-8")
        batch.append(raw)
        size += min(len(raw), HEAD_BYTES + len(MAIN))
        if size >= BATCH_PREFIXES:
            _find(c, batch, found)
            batch, size = [], 0
    if batch:
        _find(c, batch, found)
    return [(segid, key, pgno) for (segid, key), pgno in sorted(found.items())]


def _find(c: Any, batch: list[bytes], found: dict[tuple[int, bytes], int]) -> None:
    head = HEAD_BYTES + len(MAIN)
    prefixes = {raw[:k] for raw in batch for k in range(len(MAIN) + 1, min(len(raw), head) + 1)}
    heads: dict[bytes, list[bytes]] = {}
    for raw in batch:
        if len(raw) > head:
            heads.setdefault(raw[:head], []).append(raw)
    rows = c.execute(
        "SELECT segid, term, pgno FROM fts_idx WHERE term IN (SELECT unhex(value) FROM json_each(?1))"
        " OR (length(term) > ?3 AND substr(term, 1, ?3) IN (SELECT unhex(value) FROM json_each(?2)))",
        (json.dumps([p.hex() for p in prefixes]), json.dumps([h.hex() for h in heads]), head),
    )
    for segid, term, pgno in rows:
        key = bytes(term)
        if len(key) > head and not any(raw.startswith(key) for raw in heads.get(key[:head], ())):
            continue
        found[(int(segid), key)] = int(pgno)


def _first_term(c: Any, segid: int, page: int) -> bytes | None:
    """The first term on a leaf page of a segment, as FTS5 wrote it (index byte included),
    or None where the page does not read as expected. A leaf page: a 4-byte header (two
    big-endian u16: the first rowid's offset, the page index's offset), the entries, then the
    page index, whose first varint is the first term's offset; the first term on a page is
    written whole: its length as a varint, then its bytes. (``tests/sqlite/test_fts_secure_delete.py``
    checks this reading against every separator of a real index.)"""
    row = c.execute("SELECT block FROM fts_data WHERE id=?", ((segid << SEGMENT_SHIFT) + page,)).fetchone()
    if row is None:
        return None
    block = bytes(row[0])
    try:
        index = int.from_bytes(block[2:4], "big")
        if not 4 <= index < len(block):
            return None
        at, _ = _varint(block, index)
        n, start = _varint(block, at)
        term = block[start : start + n]
    except IndexError:
        return None
    return term if len(term) == n and term.startswith(MAIN) else None


def _varint(b: bytes, i: int) -> tuple[int, int]:
    """SQLite's varint at ``b[i:]``: (value, offset after it)."""
    v = 0
    for k in range(9):
        byte = b[i + k]
        if k == 8:
            return (v << 8) | byte, i + 9
        v = (v << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return v, i + k + 1
    raise IndexError  # pragma: no cover - the loop returns


def _rewrite_from_vocabulary(c: Any, segid: int, key: bytes) -> bool:
    """Where the page cannot be read: keep the separator if a live term begins with it,
    else set it to the smallest term held after it; False if neither can be shown."""
    sep = key[len(MAIN) :]
    # A separator cut inside a multi-byte character is compared from its whole
    # characters: the answer is then checked byte-wise below.
    row = c.execute(
        "SELECT term FROM fts_inst WHERE term >= ? LIMIT 1", (sep.decode("utf-8", errors="ignore"),)
    ).fetchone()
    if row is None:
        return False
    nxt = row[0].encode("utf-8")
    if nxt.startswith(sep):
        return True  # a live term's prefix: its bytes are that row's
    if nxt < sep:
        return False
    c.execute("UPDATE fts_idx SET term=? WHERE segid=? AND term=?", (MAIN + nxt, segid, key))
    return True


def still_held(c: Any, terms: Iterable[str]) -> set[str]:
    """Which of ``terms`` the index still holds (one instance is enough: the 'row'
    vocabulary would count every row of each term, 42 ms for a tenant's term at 1M)."""
    return {t for t in set(terms) if c.execute("SELECT 1 FROM fts_inst WHERE term=? LIMIT 1", (t,)).fetchone()}

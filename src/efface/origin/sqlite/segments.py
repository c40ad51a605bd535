"""The word index's segments, merged into one while the store is idle.

FTS5 writes each transaction's entries as a new segment and merges segments of a size four at
a time, so an index built by an import holds a dozen (11 at 100k records, in
``bench/bench_store.py``'s corpus). A ``secure-delete`` delete looks for every term of the
deleted row in every segment: measured at 100k, 1,000 rows took 1.2 s to delete from 11
segments and 0.44 s from one (100 rows: 0.19 against 0.045 s). So ``forget`` costs less in an
index of one segment.

:func:`consolidate` merges them with FTS5's own ``merge`` command given a negative page
count (segments of every level toward one, as ``optimize`` does, in steps of that many leaf
pages): each step is its own short write with the origin's write lock held, so writers wait
one step at most (about 20 ms) and readers not at all. Nothing is erased or added: the index
holds the same entries after. Freed pages are zeroed (``secure_delete``) and the rewritten
ones go through the page log like any write.

When it runs: :meth:`efface.store.Store.compact` always; the background compactor when the
store has been idle a while (:mod:`efface.erasure.compactor`) and a merge is worth its cost
(:func:`worth_it`): rewriting the whole index after every small write would cost a large
store far more than the deletes it saves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .conn import Connections

MERGE_PAGES = 200
"""Leaf pages one step merges (about 20 ms with the write lock held, measured at 100k)."""
GROWTH = 8
"""An idle merge runs once the segments besides the largest hold at least 1/GROWTH of its
pages: the whole index is then rewritten once per 1/GROWTH of growth, at most."""
MANY = 16
"""An idle merge also runs once the index holds this many segments, whatever their sizes."""


def sizes(conn: Any) -> list[int]:
    """Each segment's size in leaf pages, largest first, as its page separators in
    ``fts_idx`` tell it (every segment has a row there for its first leaf; the highest page
    number with a separator is within a page or so of its last)."""
    rows = conn.execute("SELECT max(pgno) >> 1 FROM fts_idx GROUP BY segid").fetchall()
    return sorted((max(int(r[0]), 1) for r in rows), reverse=True)


def worth_it(pages: list[int]) -> bool:
    """Whether an idle merge of segments this size is worth rewriting the whole index."""
    if len(pages) < 2:
        return False
    return len(pages) >= MANY or sum(pages[1:]) * GROWTH >= pages[0]


def consolidate(db: Connections, stop: Callable[[], bool] | None = None, *, always: bool = False) -> bool:
    """Merge the index's segments toward one, a step at a time, until it is one segment or
    ``stop()`` says to stop (checked between steps). Without ``always``, only when
    :func:`worth_it`. Returns True when nothing is left to merge."""
    if not always and not worth_it(sizes(db.reader())):
        return True
    while True:
        with db.write_lock:
            w = db.writer
            if len(sizes(w)) < 2:
                return True
            w.execute("INSERT INTO fts(fts, rank) VALUES('merge', ?)", (-MERGE_PAGES,))
        if stop is not None and stop():
            return False

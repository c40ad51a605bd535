"""The SQLite origin's byte-level capability: what verify and the compactor need of its file.

An origin that keeps bytes on disk declares this capability beside :class:`~efface.origin.base.Origin`
(see :class:`~efface.origin.base.Physical`): make erased bytes physically go (checkpoint the WAL,
rebuild the indexes whose pages keep fragments), and say which regions of which files may
legitimately hold a copy of live content, so the verifier can tell a live copy from residue
without knowing what a SQLite page is.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from .edge import guarded
from .schema import CHECKPOINTED, REINDEX, REINDEXED

if TYPE_CHECKING:  # pragma: no cover
    from .origin import SQLiteOrigin

LIVE_BTREES = (
    "tenants",
    "records",
    "sqlite_autoindex_records_1",
    "claims",
    "claims_subject",
    "sqlite_autoindex_claims_1",
    "subjects",
    "sqlite_autoindex_subjects_1",
    "mentions",
    "sqlite_autoindex_mentions_1",
    "mentions_subject",
    "subject_keys",
    "sqlite_autoindex_subject_keys_1",
    "sqlite_autoindex_subject_keys_2",
)
"""The b-trees where a live record, claim or subject legitimately holds bytes."""

NAME_BTREES = (
    "purposes",
    "sqlite_autoindex_purposes_1",
    "policies",
    "sqlite_autoindex_policies_1",
    "changes",
    "mutations",
    "receipts",
    "sqlite_autoindex_receipts_1",
    "ledger",
    "sqlite_schema",
    "sqlite_master",
)
"""The b-trees that hold no content, only names: tenants and purposes in use (beside keyed
hashes), and the schema's own words."""

TERM_BTREES = ("fts_data", "fts_idx")
"""The full-text index's b-trees: the terms of live records (merged after every erasure)."""

LIVE_VALUES = (
    "SELECT key, text, metadata, sources{embedding} FROM records",
    "SELECT DISTINCT subject FROM claims",
    "SELECT subject, identifiers FROM subjects",
    "SELECT DISTINCT subject FROM mentions",
    "SELECT subject FROM subject_keys",
)
"""Every content value the rows of :data:`LIVE_BTREES` hold that may share bytes with erased content."""

NAME_VALUES = (
    "SELECT name FROM tenants",
    "SELECT DISTINCT tenant FROM purposes",
    "SELECT DISTINCT purpose FROM purposes",
    "SELECT sql FROM sqlite_schema WHERE sql IS NOT NULL",
)
"""The tenant names in use (and their ids, which the other tables hold), the purpose names,
and the schema's statements."""

TERM_VALUES = ("SELECT term FROM fts_vocab",)

CONTENT, NAME, TERM = "content", "name", "term"
ALLOWED = {CONTENT: frozenset({CONTENT, NAME}), NAME: frozenset({NAME}), TERM: frozenset({TERM})}
"""Which kinds of live value may lie in the pages of each kind of b-tree."""

WAL_HEADER, FRAME_HEADER = 32, 24


class LiveRegions:
    """The file regions where a live copy of content may sit (for one verification): the
    pages of the live b-trees in the database file, and the page images of those pages in
    the current WAL (written after the last checkpoint: a live record written since is
    there before it is in the database file). Pages of :data:`NAME_BTREES` may hold only
    names, pages of :data:`TERM_BTREES` only the terms of live records."""

    def __init__(self, file: str, pages: dict[int, frozenset[str]], page_size: int, wal: str):
        self._file, self._pages, self._page, self._wal = file, pages, page_size, wal

    def bounds(
        self, file: str, offset: int, read: Callable[[str, int, int], bytes]
    ) -> tuple[int, int, frozenset[str]] | None:
        """The page ``[start, end)`` of ``file`` (relative to the store directory) around
        ``offset``, and the kinds of live value it may hold, if it is a page of a b-tree
        that holds live values; else None. ``read`` reads the bytes the scan saw (the WAL may
        be truncated under it)."""
        ps = self._page
        if file == self._file:
            page = offset // ps + 1
            return ((page - 1) * ps, page * ps, self._pages[page]) if page in self._pages else None
        if file != self._wal or offset < WAL_HEADER:
            return None
        header = read(file, 0, WAL_HEADER)
        if len(header) < WAL_HEADER or int.from_bytes(header[8:12], "big") != ps:
            return None
        frame = (offset - WAL_HEADER) // (FRAME_HEADER + ps)
        start = WAL_HEADER + frame * (FRAME_HEADER + ps)
        fh = read(file, start, FRAME_HEADER)
        # a frame of this WAL (its salts) holding a page of a live b-tree; stale frames of an
        # earlier WAL generation, and the frame headers themselves, are not live content
        if len(fh) < FRAME_HEADER or fh[8:16] != header[16:24] or offset < start + FRAME_HEADER:
            return None
        page = int.from_bytes(fh[0:4], "big")
        if page not in self._pages:
            return None
        return start + FRAME_HEADER, start + FRAME_HEADER + ps, self._pages[page]

    def contains(self, file: str, offset: int, width: int, read: Callable[[str, int, int], bytes]) -> bool:
        """Whether ``width`` bytes at ``offset`` lie inside one page of a live b-tree."""
        b = self.bounds(file, offset, read)
        return b is not None and CONTENT in b[2] and offset + width <= b[1]


@guarded
class SQLitePhysical:
    def __init__(self, origin: SQLiteOrigin):
        self._o = origin

    def files(self) -> list[str]:
        """The origin's files (absolute paths)."""
        return [self._o.path + suffix for suffix in ("", "-wal", "-shm")]

    def checkpoint(self) -> bool:
        """Copy the WAL into the database file and truncate it to zero bytes, so no old page
        image (with secure_delete, the only place deleted bytes can linger) stays in the WAL.
        Records the epoch it covers; returns False if a reader kept it from completing."""
        o = self._o
        with o.write_lock:
            epoch = o.current_epoch()
            busy, _log, _done = o.writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if busy:
                return False
            o.meta_set(CHECKPOINTED, str(epoch))
            # The meta row just went into the WAL; checkpoint again so the file is empty.
            o.writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return True

    def rebuild_indexes(self) -> bool:
        """Rebuild the indexes that hold keys and subjects if anything was erased since the last
        rebuild. secure_delete zeroes a deleted cell, but when SQLite rebuilds an index page
        it leaves the old cell bytes in the page's unallocated gap (found by verify's byte
        scan: fragments of erased keys and subject names in live pages of these indexes).
        A rebuild writes fresh pages and frees the old ones, which secure_delete zeroes."""
        o = self._o
        if o.meta_get(REINDEX) != "1":
            return False
        with o.write_lock, o.writer:
            for index in REINDEXED:
                o.writer.execute(f"REINDEX {index}")
            o.writer.execute("UPDATE meta SET v='0' WHERE k=?", (REINDEX,))
        return True

    def rewrite(self) -> bool:
        """Rebuild the whole database file (VACUUM) and checkpoint it; True once the WAL is
        empty again. For erased bytes that no rebuild of an index reaches: when SQLite
        rebuilds a *table* page in a rebalance it also leaves old cells in the page's
        unallocated gap, and a cell that stays live then leaves a stale copy there that
        outlives the cell's own (zeroed) deletion; the byte scan finds those (see
        ``Store.wait``). VACUUM writes every page afresh. Its temporary copy of the
        database is kept in memory (``temp_store``), never in a temporary file."""
        o = self._o
        with o.write_lock:
            (before,) = o.writer.execute("PRAGMA temp_store").fetchone()
            o.writer.execute("PRAGMA temp_store=MEMORY")
            try:
                o.writer.execute("VACUUM")
            finally:
                o.writer.execute(f"PRAGMA temp_store={int(before)}")
            return self.checkpoint()

    def checkpointed_epoch(self) -> int:
        return int(self._o.meta_get(CHECKPOINTED) or 0)

    def live_regions(self, root: str) -> LiveRegions:
        """Where, in the origin's file, a live record, claim or subject legitimately holds bytes."""
        r = self._o._r()
        kinds = {n: ALLOWED[CONTENT] for n in LIVE_BTREES}
        kinds.update({n: ALLOWED[NAME] for n in NAME_BTREES})
        kinds.update({n: ALLOWED[TERM] for n in TERM_BTREES})
        marks = ",".join("?" * len(kinds))
        pages = {
            row[0]: kinds[row[1]]
            for row in r.execute(f"SELECT pageno, name FROM dbstat WHERE name IN ({marks})", list(kinds))
        }
        page = r.execute("PRAGMA page_size").fetchone()[0]
        name = os.path.relpath(self._o.path, root)
        return LiveRegions(name, pages, page, name + "-wal")

    def live_values(self, embeddings: bool) -> Iterator[tuple[bytes, str]]:
        """Every value a live row holds (texts as their UTF-8 bytes, as stored), and its kind
        (content, name or term: see :data:`ALLOWED`), from one snapshot: what a live copy of
        erased bytes may belong to."""
        emb = ", embedding" if embeddings else ""
        queries = (
            [(sql.format(embedding=emb), CONTENT) for sql in LIVE_VALUES]
            + [(sql, NAME) for sql in NAME_VALUES]
            + [(sql, TERM) for sql in TERM_VALUES]
        )
        with self._o.snapshot():
            r = self._o._r()
            for sql, name in queries:
                for row in r.execute(sql):
                    for value in row:
                        if isinstance(value, str):
                            yield value.encode("utf-8"), name
                        elif isinstance(value, bytes):
                            yield value, name

    def pending_fingerprints(self, handle: str) -> list[bytes]:
        """The fingerprints of every other erasure not yet proven erased (newest first)."""
        rows = self._o._r().execute(
            "SELECT fingerprints FROM evidence WHERE fingerprints IS NOT NULL AND handle != ? ORDER BY epoch DESC",
            (handle,),
        )
        return [row[0] for row in rows]

    def live_holding(self, windows: set[bytes], embeddings: bool) -> set[bytes]:
        """Which of these byte windows occur in a live record's text or key (or embedding), or
        in a live subject's name or identifiers: copies that are allowed to be there, such as
        a retained duplicate or another subject whose name shares the bytes. One pass over
        the records with an Aho-Corasick automaton, whatever the number of windows."""
        import ahocorasick

        if not windows:
            return set()
        automaton = ahocorasick.Automaton()
        for w in windows:
            automaton.add_word(w.decode("latin-1"), w)
        automaton.make_automaton()
        found: set[bytes] = set()
        cols = "text, key" + (", embedding" if embeddings else "")
        queries = (
            f"SELECT {cols} FROM records",
            "SELECT DISTINCT subject FROM claims",
            "SELECT subject, identifiers FROM subjects",
            "SELECT subject FROM subject_keys",
            "SELECT name FROM tenants",
        )
        with self._o.snapshot():
            r = self._o._r()
            for sql in queries:
                for n, row in enumerate(r.execute(sql)):
                    if n % 256 == 0:
                        time.sleep(0)  # a long Python loop: let waiting readers take the GIL
                    for value in row:
                        raw = value.encode("utf-8") if isinstance(value, str) else value
                        for _end, w in automaton.iter(raw.decode("latin-1")):
                            found.add(w)
                    if len(found) == len(windows):
                        return found
        return found

    def page_images(self, names: Sequence[str]) -> set[int]:  # pragma: no cover - diagnostics
        r = self._o._r()
        marks = ",".join("?" * len(names))
        return {row[0] for row in r.execute(f"SELECT pageno FROM dbstat WHERE name IN ({marks})", list(names))}

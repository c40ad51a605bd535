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
from collections.abc import Sequence
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


class LiveRegions:
    """The file regions where a live copy of content may sit (for one verification)."""

    def __init__(self, file: str, pages: set[int], page_size: int):
        self._file, self._pages, self._page = file, pages, page_size

    def contains(self, file: str, offset: int, width: int) -> bool:
        """Whether ``width`` bytes at ``offset`` of ``file`` (relative to the store directory)
        lie inside one page of a b-tree that holds live content."""
        first, last = offset // self._page + 1, (offset + width - 1) // self._page + 1
        return file == self._file and first == last and first in self._pages


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

    def checkpointed_epoch(self) -> int:
        return int(self._o.meta_get(CHECKPOINTED) or 0)

    def live_regions(self, root: str) -> LiveRegions:
        """Where, in the origin's file, a live record, claim or subject legitimately holds bytes."""
        r = self._o._r()
        marks = ",".join("?" * len(LIVE_BTREES))
        pages = {row[0] for row in r.execute(f"SELECT pageno FROM dbstat WHERE name IN ({marks})", LIVE_BTREES)}
        page = r.execute("PRAGMA page_size").fetchone()[0]
        return LiveRegions(os.path.relpath(self._o.path, root), pages, page)

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

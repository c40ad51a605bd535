"""The word index's postings in memory: loaded from the index, kept up by every commit, swept of erasures.

:class:`PostingsInMemory` is the part of :class:`~.text.SQLiteText` that holds the index's
postings (:mod:`.postings`) for ranking: a small store loads them as it opens, a larger one in
the background from its first full-text query on, its queries ranked by FTS5 meanwhile; the
changes committed during a load are queued (without an erased text's terms) and applied after,
and an erased record leaves what the load has read after each chunk. Verify asks which
erased records they still hold (:meth:`PostingsInMemory.held_in_memory`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import apsw

from .conn import Connections
from .postings import Change, Loaded, Postings, load, sweep

LOAD_HERE = 20_000
"""A store of at most this many records loads its postings (:mod:`.postings`) as it opens;
a larger one in the background from its first full-text query on (about 40 us a record),
its queries ranked by FTS5 meanwhile."""
SWEEP_WAIT_S = 60.0
"""How long verify's question waits, at most, for a load under way to take an erased record
out of what it has read (one chunk of :data:`.postings.LOAD_CHUNK` postings: well under a
second); past it, the record counts as held."""
log = logging.getLogger("efface.origin")


class PostingsInMemory:
    """The postings part of :class:`~.text.SQLiteText` (which sets the attributes below)."""

    _db: Connections
    _docs: int
    _tok: apsw.FTS5Tokenizer | None
    scoped: bool

    def _init_postings(self) -> None:
        self._post: Postings | None = None
        """The index's postings in memory, for ranking (:mod:`.postings`), once loaded; a
        store without a stemming tokenizer (made before it) never loads them."""
        self._post_queue: list[Change] | None = None
        """Changes committed while the postings load, applied once they have: without the
        removed records' terms (:meth:`.Change.without_terms`), so an erased text's words do
        not wait in memory for the load; its id leaves every term's list then."""
        self._post_sweep: set[int] = set()
        """Records erased while the postings load, not yet taken out of what the load has read
        so far (it does so after each chunk it reads: :func:`.postings.sweep`)."""
        self._post_swept = threading.Condition(threading.Lock())
        self._post_loaded = threading.Event()
        """Set whenever no load is under way."""
        self._post_loaded.set()
        self._post_mu = threading.Lock()
        self._post_stop = threading.Event()
        self._post_later = False
        """A large store's postings are loaded from its first full-text query on."""

    def start_postings(self) -> None:
        """Load the postings: here for a small store; for a large one in the background,
        from its first full-text query on (a store opened only to write, forget or verify
        never reads them)."""
        if self._tok is None:
            return
        if self._docs <= LOAD_HERE:
            with self._post_mu:
                self._post_queue = []
                self._post_loaded.clear()
            self._load_postings()
        else:
            self._post_later = True

    def _postings(self) -> Postings | None:
        """The postings, if loaded; the first call of a large store starts their load."""
        post = self._post
        if post is None and self._post_later:
            with self._post_mu:
                start, self._post_later = self._post_later, False
                if start:
                    self._post_queue = []
                    self._post_loaded.clear()
            if start:
                threading.Thread(target=self._load_postings, name="efface-postings", daemon=True).start()
        return post

    def _load_postings(self) -> None:
        try:
            self._load_postings_now()
        finally:
            with self._post_swept:
                self._post_sweep.clear()  # the queue applied (or dropped) with what was read
                self._post_loaded.set()
                self._post_swept.notify_all()

    def _sweep_loaded(self, loaded: Loaded) -> None:
        """Between two chunks of a load: records erased since take leave of what it read."""
        with self._post_swept:
            gone, self._post_sweep = self._post_sweep, set()
        if gone:
            sweep(loaded, gone)
        with self._post_swept:
            self._post_swept.notify_all()

    def _load_postings_now(self) -> None:
        try:
            conn = apsw.Connection(self._db.path, flags=apsw.SQLITE_OPEN_READONLY)
            try:
                got = load(conn, self.scoped, self._post_stop, self._sweep_loaded)
            finally:
                conn.close()
        except apsw.Error as exc:  # the store closed, or the file went: FTS5 ranks from then on
            log.warning("word index postings not loaded (%s): full-text queries are ranked by FTS5", type(exc).__name__)
            with self._post_mu:
                self._post_queue = None  # the queued changes (an erasure's terms among them) go
            return
        if got is None:
            return
        post = Postings.of(got)
        with self._post_mu:
            if self._post_queue is None:  # stopped meanwhile: what was committed since is not here
                return
            for change in self._post_queue:
                post.apply(change)
            self._post, self._post_queue = post, None

    def stop_postings(self) -> None:
        self._post_stop.set()
        with self._post_mu:
            self._post, self._post_queue, self._post_later = None, None, False

    def committed(self, changes: Sequence[Change]) -> None:
        """Apply committed transactions' changes to the postings (or queue them while they load).
        The changes are committed: if applying one fails, the postings are dropped (FTS5 ranks
        from then on) rather than the write reported as failed or the postings left behind."""
        with self._post_mu:
            if self._post is not None:
                try:
                    for ch in changes:
                        self._post.apply(ch)
                except Exception as exc:
                    log.warning(
                        "word index postings dropped (%s): full-text queries are ranked by FTS5", type(exc).__name__
                    )
                    self._post, self._post_queue = None, None
            elif self._post_queue is not None:
                self._post_queue.extend(ch.without_terms() for ch in changes)
                with self._post_swept:
                    self._post_sweep.update(rid for ch in changes for rid in ch.removed)

    def held_in_memory(self, ids: Sequence[int]) -> list[int]:
        """Which of ``ids`` the postings in memory still hold (verify: none once erased), after
        taking out what erasures left in long arrays for later (:data:`.postings.DROP_NOW`).
        During a load, what it has read so far is asked: it takes a record erased meanwhile
        out after the chunk it is reading (a fraction of a second), which is waited for."""
        wanted = set(ids)
        with self._post_swept:
            self._post_swept.wait_for(
                lambda: self._post_loaded.is_set() or not (wanted & self._post_sweep), timeout=SWEEP_WAIT_S
            )
            if not self._post_loaded.is_set() and wanted & self._post_sweep:
                return sorted(wanted & self._post_sweep)  # not yet out of what the load read
        post = self._post
        if post is None:
            return []
        post.purge()
        return post.holds(ids)

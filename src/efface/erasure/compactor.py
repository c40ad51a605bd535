"""The compactor: brings every derived read path up to the newest epoch and erases the bytes.

A :class:`Compactor` is handed its collaborators (the origin, the read paths, the
propagation record, the expiry sweep and a clock), like ZODB's packer, and can run in the
background on its own thread or be driven by a caller (``compact()``, ``wait()`` without a
thread). One round: honour due expiries, let every asynchronous path absorb the change log,
and when it is due (an erasure waiting for its bytes to go, or periodically) persist the
paths that live in the origin's file, rebuild its key indexes and checkpoint its WAL, then
save the other paths' files and prune the change log. Once the store is idle (no mutation
for ``IDLE_S``, no erasure owed), it tidies: the word index's segments merged into one, in
short steps that give way to the next mutation (:mod:`efface.origin.sqlite.segments`).

Reads never wait for it: it takes the origin's write lock only for the origin's own
maintenance writes, and the paths let searches run beside their absorption.

On an origin several processes share (:class:`~efface.origin.base.SharedByProcesses`,
PostgreSQL), each process runs a compactor for its own paths, and what is the store's rather
than the process's runs under a lock every process sees, so it never runs twice at once and no
process undoes another's: the origin's physical work (its ``physical`` side: rebuilds,
checkpoints, the maintenance that removes erased bytes) under the shared lock
``maintenance``, skipped and owed to the next round while another process holds it; the
change log's pruning under the origin's own lock, only as far as every live process replays
it (:mod:`.changelog`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence

from ..origin.base import Origin
from ..origin.capabilities import Maintained, SharedByProcesses
from ..paths.base import ReadPath
from .changelog import ChangeLog
from .propagation import Propagation

PERSIST_EVERY_S = 30.0
"""How often the asynchronous paths save their files whole while they change (what a reopen
then need not absorb again from the change log)."""
QUIET_S = 10.0
"""A periodic whole save waits until no erasure has been acknowledged for this long: at a
million records it holds the GIL for about a second (usearch serialises the index), and an
erasure's ``wait`` and ``verify`` that ran into it took 2.4 s instead of 0.8-1.1. The
erased bytes do not wait for it: they go in place (:meth:`ReadPath.erase`)."""
PERSIST_LATEST_S = 300.0
"""A stream of erasures defers a whole save this long at most."""
ERASE_PERSIST_S = 0.5
"""After an erasure, the compactor erases its bytes from every artifact's files at most this
long after it last did (the ANN file in place; a whole save comes with the periodic one, see
``QUIET_S``),
unless someone waits for them (:meth:`Compactor.wake` with ``urgent``): a stream of forgets
that nobody waits on is erased in batches, a waited-on one at once."""
IDLE_S = 5.0
"""No mutation for this long and nothing owed: the store is idle, and the compactor tidies
(:meth:`Compactor.tidy`)."""
TIDY_S = 1.0
"""How long one round tidies at most before it looks for new work."""

log = logging.getLogger("efface")


class Compactor:
    def __init__(
        self,
        origin: Origin,
        paths: Sequence[ReadPath],
        propagation: Propagation,
        expire: Callable[[], object],
        *,
        interval: float = 0.5,
        consumer: str = "ann",
    ):
        self._origin = origin
        self._paths = list(paths)
        self._async = [p for p in self._paths if not p.synchronous]
        self._propagation = propagation
        self._expire = expire
        self._interval = interval
        self._changes = ChangeLog(origin, consumer)
        """This process's paths as one consumer of the change log (``consumer``: their name)."""
        self._mu = threading.Lock()
        """One round at a time (the background thread, compact() and wait() may race)."""
        self._last_persist = self._last_erase = self._erased_at = time.monotonic()
        # An erasure may be waiting for its bytes to go since before a restart: erase soon.
        self._owed = origin.current_epoch()
        """The newest epoch that may carry an erasure whose bytes the paths' files must lose.
        What is owed is read from the paths' erased epochs against it, never from a flag a
        round clears: a flag cleared by a round that had absorbed before the erasure
        committed lost that erasure for good (issue #33: a waited-on forget never reached
        ``erased``), and so did a round that failed half way."""
        self._urgent = False
        """A caller waits for an erasure's bytes to go: erase them this round."""
        self._checkpoint_owed = False
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._rounds = 0
        self._seen_epoch, self._seen_at, self._tidy_done = -1, time.monotonic(), False
        self._round_done = threading.Condition()
        """Notified after each round, so a waiter sleeps until something may have changed."""

    # -- driving ------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="efface-compactor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    def wake(self, erased: bool = False, urgent: bool = False) -> None:
        """A mutation committed: absorb it promptly (and, after an erasure, erase its bytes).
        ``urgent``: a caller waits for an erasure to be erased; its bytes go this round,
        not ``ERASE_PERSIST_S`` after the last erasure's."""
        if erased:
            # Called after the commit, so the current epoch covers the erasure.
            self._owed = max(self._owed, self._origin.current_epoch())
            self._erased_at = time.monotonic()
        if urgent:
            self._urgent = True
        self._wake.set()

    @property
    def erasure_unsaved(self) -> bool:
        """Whether an erasure's bytes may still be in a path's files: a path's erased epoch
        is behind the newest erasure woken for. The asynchronous paths erase last in a
        saving round, with the epoch they absorbed at its start, so one behind means the
        round began before that erasure committed (or failed): the next round owes it."""
        owed = any(p.erased_epoch() < self._owed for p in self._async or self._paths)
        if owed or not isinstance(self._origin, Maintained):
            return owed
        # a verification can owe the maintenance more work for an erasure it covered already
        return self._origin.erased_epoch() < self._owed or self._origin.owes()

    @property
    def rounds(self) -> int:
        """How many rounds, or steps of one, have finished (pass it to :meth:`after_round`):
        within a saving round, the origin's files are done before the other paths save."""
        return self._rounds

    def after_round(self, seen: int, timeout: float) -> None:
        """Sleep until a round (or step) after the ``seen``-th has finished, or ``timeout`` seconds."""
        with self._round_done:
            self._round_done.wait_for(lambda: self._rounds > seen, timeout)

    def save_due(self, now: float, urgent: bool = False) -> bool:
        """Whether this round saves the paths' files whole: every ``PERSIST_EVERY_S``, but
        not while erasures come (one in the last ``QUIET_S``, or one waited for), unless
        the last whole save is ``PERSIST_LATEST_S`` old."""
        since = now - self._last_persist
        if since > PERSIST_LATEST_S:
            return True
        quiet = not urgent and now - self._erased_at > QUIET_S
        return since > PERSIST_EVERY_S and quiet

    def absorb(self, upto: int | None = None) -> None:
        """Bring the asynchronous paths up to ``upto`` (default: everything)."""
        before = self._propagation.applied_epochs()
        for p in self._async:
            p.catch_up(upto)
        self._propagation.measure("absorb", before, self._propagation.applied_epochs())

    def run(self, persist: bool, whole: bool = True, merge: bool = False) -> int:
        """One round; returns the oldest applied epoch among the paths. With ``persist``,
        the paths' bytes of absorbed erasures go from their files: with ``whole``, every
        path saves its files whole; without, the asynchronous paths only take the erased
        bytes out of their files (:meth:`ReadPath.erase`, cheap where a path can), and the
        next whole save comes with the periodic one. With ``merge``, the word index's segments
        are then merged into one, whatever it costs (``Store.compact``: :mod:`.segments` of
        the SQLite origin)."""
        physical = self._origin.physical
        with self._mu:
            self.absorb()
            if persist:
                erased = self._propagation.erased_epochs()
                # The origin's files first (the paths that live in them, its indexes, its
                # WAL): a waiter can then scan them while the other paths save their own
                # files (at a million records the ANN file takes about a second).
                for p in self._paths:
                    if p.synchronous:
                        p.persist()
                if physical is not None:
                    # Store.compact (``merge``) waits for another process's maintenance to end.
                    with self._shared("maintenance", wait=merge) as mine:
                        if mine:
                            physical.rebuild_indexes()
                            self._checkpoint_owed = not physical.checkpoint()
                        else:  # another process runs it now, perhaps from before this erasure
                            self._checkpoint_owed = True
                if isinstance(self._origin, Maintained):  # a database server's rewrite, checkpoint, WAL, KEK
                    self._origin.maintain()  # under its own advisory lock: a try, another server's run counts
                self._propagation.measure("erase", erased, self._propagation.erased_epochs())
                self._step()
                erased = self._propagation.erased_epochs()
                for p in self._async:
                    if whole:
                        p.persist()
                    else:
                        p.erase()
                # no asynchronous path (an origin that indexes its own vectors): nothing of this
                # process replays the log but the origin's own readers, which it holds back for
                lagging = [p.replay_epoch() for p in self._async] or [self._origin.current_epoch()]
                if lagging:
                    self._changes.prune(min(lagging))
                now = time.monotonic()
                self._last_erase = now
                if whole:
                    self._last_persist = now
                self._propagation.measure("erase", erased, self._propagation.erased_epochs())
            elif self._checkpoint_owed and physical is not None:
                # A reader held the last checkpoint back: the erased page images are still
                # in the WAL. Retry just the checkpoint each round, not the whole save.
                erased = self._propagation.erased_epochs()
                with self._shared("maintenance") as mine:
                    self._checkpoint_owed = not (mine and physical.checkpoint())
                self._propagation.measure("erase", erased, self._propagation.erased_epochs())
            applied = min(p.applied_epoch() for p in self._paths)
        if merge and (merging := self._merge()) is not None:
            with self._shared("maintenance", wait=True):
                merging(always=True)
        self._step()
        return applied

    def tidy(self, *, idle_s: float | None = None, budget_s: float | None = None) -> bool:
        """Once no mutation has committed for ``idle_s`` and no erasure is owed, merge the
        word index's segments (``merge_segments`` of the origin's physical side, where it has
        one), in steps, for ``budget_s`` at most, stopping at the next mutation. A forget then
        deletes from one segment instead of a dozen. Returns True when it is done until the
        next mutation."""
        merge = self._merge()
        if merge is None:
            return True
        idle_s = IDLE_S if idle_s is None else idle_s
        now = time.monotonic()
        epoch = self._origin.current_epoch()
        if epoch != self._seen_epoch:
            self._seen_epoch, self._seen_at, self._tidy_done = epoch, now, False
        if self._tidy_done or now - self._seen_at < idle_s or self.erasure_unsaved or self._checkpoint_owed:
            return self._tidy_done
        until = now + (TIDY_S if budget_s is None else budget_s)
        woken = self._wake.is_set if self.running else lambda: False  # driven by a caller: no wake-ups
        with self._shared("maintenance") as mine:
            if mine:
                self._tidy_done = bool(merge(lambda: woken() or self._stop.is_set() or time.monotonic() > until))
        return self._tidy_done

    def _shared(self, name: str, wait: bool = False) -> contextlib.AbstractContextManager[bool]:
        """The origin's lock ``name`` across processes, where several share it (without
        ``wait``: yields False while another process holds it); else held at once (this
        process owns the origin, and ``_mu`` orders its rounds)."""
        if isinstance(self._origin, SharedByProcesses):
            return self._origin.shared_lock(name, wait)
        return contextlib.nullcontext(True)

    def _merge(self) -> Callable[..., bool] | None:
        """The origin's merge of its word index's segments, where it has one."""
        physical = self._origin.physical
        return physical.merge_segments if physical is not None else None

    def _step(self) -> None:
        """A round, or a step of one that a waiter may act on, has finished."""
        with self._round_done:
            self._rounds += 1
            self._round_done.notify_all()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._expire()
                now = time.monotonic()
                urgent, self._urgent = self._urgent, False
                periodic = self.save_due(now, urgent)
                hurry = self.erasure_unsaved and (urgent or now - self._last_erase > ERASE_PERSIST_S)
                self.run(persist=periodic or hurry, whole=periodic)
                if self._async:  # on a shared origin: still one of the change log's readers
                    self._changes.alive(min(p.replay_epoch() for p in self._async))
                if not self._wake.is_set():
                    self.tidy()
            except Exception as exc:  # keep the worker alive; the next round retries
                if self._stop.is_set():
                    return
                # Its type only, as everywhere in efface's logs: a message could quote data.
                log.error("compactor round failed (%s); the next round retries", type(exc).__name__)

"""The change log's consumers: none prunes what another still replays.

Each asynchronous read path keeps files that hold the origin's state as of some epoch, and
replays the change log from there on open (``ReadPath.replay_epoch``). Several processes may
share one origin, each with files of its own (PostgreSQL: one ANN index per server), so the
log is pruned only up to the oldest epoch any of them still needs.

* **An origin one process owns** (SQLite, memory): each consumer records its replay epoch,
  with the time it last said so, under its own meta key
  (:data:`~efface.origin.base.CHANGES_CONSUMER`); a consumer silent for :data:`STALE_S` no
  longer holds the log back. An embedded store has one consumer: it prunes what its own files
  no longer need, as before.
* **An origin several processes share** (:class:`~efface.origin.base.SharedByProcesses`,
  PostgreSQL): the origin keeps the register of readers itself, one row per process (its
  ``instance``), and prunes under a lock every process sees, to the oldest reader seen within
  its bound (``READER_TTL_S`` there); a process says it is alive every
  :data:`SHARED_REFRESH_S` (:meth:`ChangeLog.alive`, each compactor round), well inside that
  bound, so only a process that went away (``kill -9``) stops holding the log back. No meta key
  is shared between processes: each one's place is its own row.

Either way, a consumer that comes back after the log was pruned past its files finds them
older than the pruned floor (:data:`~efface.origin.base.CHANGES_PRUNED`, which only rises),
and rebuilds them from the origin instead of replaying (:class:`efface.paths.ann.VectorIndex`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..origin.base import CHANGES_CONSUMER, CHANGES_PRUNED, Origin
from ..origin.capabilities import SharedByProcesses

STALE_S = 7 * 24 * 3600.0
"""A consumer that has not spoken for this long no longer holds the change log back."""
REFRESH_S = 3600.0
"""A consumer says again that it is alive at least this often (one meta write)."""
SHARED_REFRESH_S = 60.0
"""On an origin several processes share, a process says it is alive at least this often: a
tenth of the origin's bound for a silent reader (600 s on PostgreSQL)."""


class ChangeLog:
    """One consumer's side of the change log's pruning."""

    def __init__(self, origin: Origin, consumer: str, clock: Callable[[], float] = time.time):
        self._origin = origin
        self._shared = origin if isinstance(origin, SharedByProcesses) else None
        self._key = CHANGES_CONSUMER + consumer
        self._clock = clock
        self._said: tuple[int, float] | None = None
        self._pruned = int(origin.meta_get(CHANGES_PRUNED) or 0)

    def prune(self, needed: int) -> int:
        """Record that this consumer replays the log after epoch ``needed``, and prune what no
        live consumer needs any more. Returns the floor pruned to (or kept)."""
        now = self._clock()
        if self._shared is not None:
            self._origin.prune_changes(needed)  # registers this process, prunes under the origin's lock
            self._said = (needed, now)
            self._pruned = int(self._origin.meta_get(CHANGES_PRUNED) or 0)
            return self._pruned
        if self._said is None or self._said[0] != needed or now - self._said[1] > REFRESH_S:
            self._origin.meta_set(self._key, f"{needed} {now:.0f}")
            self._said = (needed, now)
        floor = needed
        for key, value in self._origin.meta_items(CHANGES_CONSUMER).items():
            epoch, _, at = value.partition(" ")
            if key != self._key and now - float(at or 0) <= STALE_S:
                floor = min(floor, int(epoch))
        if floor > self._pruned:
            self._origin.prune_changes(floor)
            self._origin.meta_set(CHANGES_PRUNED, str(floor))
            self._pruned = floor
        return floor

    def alive(self, needed: int) -> None:
        """Say this consumer is alive (and replays after ``needed``) if it has not said so
        lately: on a shared origin every :data:`SHARED_REFRESH_S`, so the origin never takes a
        live process that is not saving its files for one that went away."""
        if self._shared is None:
            return
        if self._said is None or self._clock() - self._said[1] > SHARED_REFRESH_S:
            self.prune(needed)

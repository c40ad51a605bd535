"""The change log's consumers: none prunes what another still replays.

Each asynchronous read path keeps files that hold the origin's state as of some epoch, and
replays the change log from there on open (``ReadPath.replay_epoch``). Several processes may
share one origin, each with files of its own (PostgreSQL: one ANN index per server), so the
log is pruned only up to the oldest epoch any of them still needs. Each consumer records its
replay epoch, with the time it last said so, under its own meta key
(:data:`~efface.origin.base.CHANGES_CONSUMER`); a consumer silent for :data:`STALE_S` (a
server that went away) no longer holds the log back, and if it comes back its files are older
than the pruned floor (:data:`~efface.origin.base.CHANGES_PRUNED`), so it rebuilds them from
the origin instead of replaying (:class:`efface.paths.ann.VectorIndex` on open). An embedded
store has one consumer: it prunes what its own files no longer need, as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..origin.base import CHANGES_CONSUMER, CHANGES_PRUNED, Origin

STALE_S = 7 * 24 * 3600.0
"""A consumer that has not spoken for this long no longer holds the change log back."""
REFRESH_S = 3600.0
"""A consumer says again that it is alive at least this often (one meta write)."""


class ChangeLog:
    """One consumer's side of the change log's pruning."""

    def __init__(self, origin: Origin, consumer: str, clock: Callable[[], float] = time.time):
        self._origin = origin
        self._key = CHANGES_CONSUMER + consumer
        self._clock = clock
        self._said: tuple[int, float] | None = None
        self._pruned = int(origin.meta_get(CHANGES_PRUNED) or 0)

    def prune(self, needed: int) -> int:
        """Record that this consumer replays the log after epoch ``needed``, and prune what no
        live consumer needs any more. Returns the floor pruned to (or kept)."""
        now = self._clock()
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

"""The PostgreSQL origin's random sample of a tenant's live vectors (:class:`~efface.origin.capabilities.VectorSample`).

Recall lets its vector leg vote only as far as the best cosine stands out from the query's
cosines with a random sample of the tenant's live records (:func:`efface.paths.scores._standing`).
The SQLite origin draws that sample from its copy of liveness in memory, again after every
commit (0.4 ms at 50k records). Here a draw reads the database: two round trips (how many
records the tenant has; then the vectors of the positions drawn among them, live for the
purpose, in one statement) and a window over the tenant's ids on the server, a few
milliseconds at 50k records. Drawing it for each recall would add that to every query, so a
draw is **kept in this process** and used again until one of:

* the tenant changed since the draw (a change-log entry of its records, seen as this
  process's word index replays the log, :mod:`.text`): at once when the draw was the whole
  tenant (fewer records than the sample's size: its size is what a small tenant's best is
  judged against, :func:`efface.paths.scores._edge`), else after :data:`REDRAW_CHANGES` of them;
* :data:`REDRAW_S` seconds passed (a claim that expired, a change this process has not
  replayed yet).

**The trade-off.** Between redraws the statistic lags the tenant by up to
:data:`REDRAW_CHANGES` writes or :data:`REDRAW_S` seconds: a mean and a spread of 256
cosines that a few dozen records more or less hardly move (a mean and spread to a few
hundredths of a standard deviation either way: ``bench/experiments/exp_fusion_standing.py``),
for no round trip on a recall that finds it fresh. The sample only ever judges how far the
vector leg votes; recall never names, returns or ranks its records.

**Erased records.** A kept draw holds vectors of records, a copy of their content in this
process's memory. When the change log says a record was dropped (erased, by any process), its
row is zeroed in every kept draw and removed, as the word index drops its postings
(:meth:`changed`): this process stops holding an erased record's vector no later than its
postings, before a forget made here returns. When the log was pruned past the word index
(it rebuilds), every kept draw is forgotten. A draw that may hold a record whose drop was
applied here already (a drop of the tenant applied while it was read, or a recall's snapshot
older than the last drop applied) serves that recall and is not kept.

**Which records, and the draw.** The tenant's records not quarantined, in id order; up to
``n`` positions among them drawn with numpy's generator seeded by their count, as the SQLite
origin's copy draws (:meth:`efface.origin.sqlite.liveness.Liveness.sample`): a store with the
same records under the same ids draws the same sample on both origins. Of those, the ones
live for the purpose at the draw's ``now`` with a vector are kept.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .reads import NOT_QUARANTINED, _RawVector, live_claim, stored_many, to_vector

PostgresOrigin = Any
"""The origin this part serves (:class:`.origin.PostgresOrigin`), untyped here (as :mod:`.text`):
the origin imports this module."""

REDRAW_CHANGES = 64
"""Changes to a tenant (records put or dropped) after which its kept draw is drawn again."""
REDRAW_S = 60.0
"""Seconds after which a kept draw is drawn again, whatever changed."""
MAX_KEPT = 1024
"""Draws (tenant, purpose, size) kept at most (all forgotten at once past it), as the SQLite origin's."""

_EMPTY = np.empty((0, 0), dtype=np.float32)


@dataclass
class _Draw:
    ids: np.ndarray
    """The drawn records' ids (int64), one per row of :attr:`vectors`."""
    vectors: np.ndarray
    """Their vectors, rows of float32."""
    whole: bool
    """Drawn from fewer records than the sample's size: the whole tenant."""
    changes: int
    """The tenant's change count (:attr:`PgSample._changes`) when drawn."""
    at: float
    """``time.monotonic()`` when drawn."""


class PgSample:
    """Kept draws of tenants' live vectors (see the module docstring)."""

    def __init__(self, origin: PostgresOrigin) -> None:
        self._o = origin
        self._mu = threading.Lock()
        self._kept: dict[tuple[str, str, int], _Draw] = {}
        self._changes: dict[str, int] = {}
        """Per tenant: how many changes of its records this process has seen since it opened."""
        self._drops: dict[str, tuple[int, int]] = {}
        """Per tenant: (how many drops of its records this process has applied, the epoch the
        change log was replayed to when the last was)."""
        self._rebuilds, self._rebuilt = 0, 0
        """The word index's rebuilds (drops it could not name, of any tenant), and the epoch of the last."""

    def sample(self, tenant: str, purpose: str, now: float, n: int) -> np.ndarray:
        """At most ``n`` vectors of ``tenant``'s records live for ``purpose`` (rows of float32),
        a kept draw while it is fresh, else drawn now (in the thread's snapshot, if any)."""
        if n <= 0:
            return _EMPTY
        key = (tenant, purpose, n)
        with self._mu:
            got = self._kept.get(key)
            changes = self._changes.get(tenant, 0)
            drops = (self._drops.get(tenant, (0, 0))[0], self._rebuilds)
            if got is not None and self._fresh(got, changes):
                return got.vectors
        pinned = self._o.snapshot_epoch()
        ids, vectors, whole = self._draw(tenant, purpose, now, n)
        draw = _Draw(ids, vectors, whole, changes, time.monotonic())
        with self._mu:
            # Kept unless it may hold a record whose drop this process has already applied
            # (then it is used once, for this recall): a drop of the tenant's seen while it was
            # read, or, read in a snapshot, one applied at an epoch after the snapshot's. Writes
            # meanwhile do not stop it being kept (they count towards its redraw).
            seen, at = self._drops.get(tenant, (0, 0))
            if (seen, self._rebuilds) == drops and (pinned is None or pinned >= max(at, self._rebuilt)):
                if len(self._kept) >= MAX_KEPT:
                    self._kept.clear()
                self._kept[key] = draw
        return vectors

    @staticmethod
    def _fresh(got: _Draw, changes: int) -> bool:
        since = changes - got.changes
        if since >= (1 if got.whole else REDRAW_CHANGES):
            return False
        return time.monotonic() - got.at < REDRAW_S

    def _draw(self, tenant: str, purpose: str, now: float, n: int) -> tuple[np.ndarray, np.ndarray, bool]:
        """(ids, vectors, whole) of a new draw: see the module docstring."""
        s = self._o._s
        mine = f"FROM {s}.records r WHERE r.tenant = %s AND {NOT_QUARANTINED.format(s=s)}"
        with self._o._reading() as conn:
            count = int(conn.execute(f"SELECT count(*) {mine}", (tenant,)).fetchone()[0])
            if not count:
                return np.empty(0, dtype=np.int64), _EMPTY, True
            whole = count <= n
            # positions among the tenant's ids in order, 1-based, as the SQLite origin draws them
            if whole:
                at = np.arange(1, count + 1, dtype=np.int64)
            else:
                at = np.sort(np.random.default_rng(count).choice(count, n, replace=False)) + 1
            cur = conn.cursor(binary=True)
            cur.adapters.register_loader("vector", _RawVector)
            rows = cur.execute(
                f"SELECT r.id, r.embedding FROM (SELECT r.id, row_number() OVER (ORDER BY r.id) AS at {mine}) p"
                f" JOIN {s}.records r ON r.id = p.id WHERE p.at = ANY(%s) AND r.embedding IS NOT NULL"
                f" AND {live_claim(s, None)} ORDER BY r.id",
                (tenant, at.tolist(), tenant, purpose, now),
            ).fetchall()
        if not rows:
            return np.empty(0, dtype=np.int64), _EMPTY, whole
        ids = np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows))
        vecs = [to_vector(b) for b in stored_many([r[1] for r in rows])]
        return ids, np.stack([v for v in vecs if v is not None]).astype(np.float32, copy=False), whole

    def changed(self, changes: Mapping[int, tuple[str, str]] | None, epoch: int) -> None:
        """Changes this process has applied from the change log (record id -> (tenant, op)), the
        log replayed to ``epoch`` after them; None when it cannot tell which (the log was pruned
        past it: the word index rebuilt). Count them per tenant, and zero and remove the kept
        rows of records dropped."""
        with self._mu:
            if changes is None:
                self._zero_all()
                self._kept.clear()
                self._rebuilds, self._rebuilt = self._rebuilds + 1, epoch
                return
            per: dict[str, set[int]] = {}
            for rid, (tenant, op) in changes.items():
                self._changes[tenant] = self._changes.get(tenant, 0) + 1
                if op == "drop":
                    per.setdefault(tenant, set()).add(rid)
            for tenant in per:
                self._drops[tenant] = (self._drops.get(tenant, (0, 0))[0] + 1, epoch)
            for (tenant, _p, _n), got in self._kept.items():
                dropped = per.get(tenant)
                if not dropped or not len(got.ids):
                    continue
                gone = np.isin(got.ids, np.fromiter(dropped, dtype=np.int64, count=len(dropped)))
                if gone.any():
                    got.vectors[gone] = 0.0  # the copy itself, not only this draw's view of it
                    got.ids, got.vectors = got.ids[~gone], got.vectors[~gone]

    def held(self, ids: set[int]) -> list[int]:
        """Which of ``ids`` a kept draw holds a vector of (tests: an erased record's is gone)."""
        with self._mu:
            return sorted({int(i) for got in self._kept.values() for i in got.ids.tolist() if i in ids})

    def clear(self) -> None:
        with self._mu:
            self._zero_all()
            self._kept.clear()

    def _zero_all(self) -> None:
        for got in self._kept.values():
            got.vectors[...] = 0.0
